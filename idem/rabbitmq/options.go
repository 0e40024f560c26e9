package rabbitmq

import (
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/consumer"
	"github.com/idemgen/idemgen/idem/internal/consume"
)

// Defaults of the options; idem/consumer has those of the shared ones.
const (
	DefaultMaxBodySize  = 4 << 20
	DefaultBackoffMin   = consume.DefaultBackoffMin
	DefaultBackoffMax   = consume.DefaultBackoffMax
	defaultReturnBuffer = 1024
)

// An Option configures a [Consumer] or a [Publisher]; each says which. The
// options of idem/consumer (consumer.WithWorkers, consumer.WithMaxAttempts,
// consumer.WithMaxWait, consumer.WithBatch, consumer.WithLogger...) are
// Options too.
type Option = consumer.Option

type options struct {
	consume.Config
	config     amqp.Config
	connName   string
	route      func(destination string) (exchange, key string)
	publishing func(m idem.OutgoingMessage, p *amqp.Publishing)
}

func newOptions(kind string, opts []Option) options {
	o := options{
		route: splitDestination,
	}
	o.Config = consume.Resolve(opts, DefaultMaxBodySize, &o)
	// The consumer and the publisher reconnect themselves: the library's
	// experimental recovery would hand out delivery tags of a channel that
	// is gone.
	o.config.Recovery = nil
	if o.config.Properties == nil {
		o.config.Properties = amqp.NewConnectionProperties()
	} else {
		props := amqp.Table{}
		for k, v := range o.config.Properties {
			props[k] = v
		}
		o.config.Properties = props
	}
	if o.connName != "" {
		o.config.Properties.SetClientConnectionName(o.connName)
	} else if _, ok := o.config.Properties["connection_name"]; !ok {
		o.config.Properties.SetClientConnectionName("idem rabbitmq " + kind)
	}
	return o
}

func (o *options) validate(what string) error {
	if err := o.Config.Validate("rabbitmq", what); err != nil {
		return err
	}
	switch {
	case o.Prefetch > 65535:
		return fmt.Errorf("rabbitmq: %s: a prefetch of %d exceeds AMQP's 65535", what, o.Prefetch)
	}
	return nil
}

// WithConfig sets the amqp.Config of the connections (TLS, heartbeat, SASL,
// Dial, client properties). Its Recovery is ignored: the consumer and the
// publisher connect again themselves. Consumer and Publisher.
func WithConfig(c amqp.Config) Option {
	return consume.Transport[Option](func(o *options) { o.config = c })
}

// WithConnectionName sets the connection_name client property, which the
// management UI and rabbitmqctl list_connections show (default "idem
// rabbitmq consumer" or "idem rabbitmq publisher"). Consumer and Publisher.
func WithConnectionName(name string) Option {
	return consume.Transport[Option](func(o *options) { o.connName = name })
}

// WithBackoff sets the wait before connecting again after a lost or failed
// connection: min after the first failure, doubled after each further one,
// never more than max (defaults 200ms and 30s). Consumer.
func WithBackoff(min, max time.Duration) Option {
	return consume.Option[Option](func(c *consume.Config) { c.BackoffMin, c.BackoffMax = min, max })
}

// WithPrefetch sets the channel's prefetch count: how many unacked deliveries
// the broker hands the consumer ahead (default twice the workers). Consumer.
func WithPrefetch(n int) Option {
	return consume.Option[Option](func(c *consume.Config) { c.Prefetch = n })
}

// WithRoute sets how an outbox destination maps onto an exchange and a
// routing key (default: "exchange/key" split at the first "/"; a
// destination without "/" is a routing key on the default exchange).
// Publisher.
func WithRoute(route func(destination string) (exchange, key string)) Option {
	return consume.Transport[Option](func(o *options) { o.route = route })
}

// WithPublishing lets f adjust each message before it is published (content
// type, priority, expiration). The publisher sets MessageId, Headers, Body,
// DeliveryMode persistent and ContentType application/json before f runs.
// Publisher.
func WithPublishing(f func(m idem.OutgoingMessage, p *amqp.Publishing)) Option {
	return consume.Transport[Option](func(o *options) { o.publishing = f })
}
