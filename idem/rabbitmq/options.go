package rabbitmq

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/metric"

	"github.com/idemgen/idemgen/idem"
)

// Defaults of the options.
const (
	DefaultWorkers      = 4
	DefaultMaxAttempts  = 10
	DefaultMaxBodySize  = 4 << 20
	DefaultBackoffMin   = 200 * time.Millisecond
	DefaultBackoffMax   = 30 * time.Second
	DefaultBatchLinger  = 2 * time.Millisecond
	defaultReturnBuffer = 1024
)

// A Decoder decodes a delivery's body into v, a pointer to the handler's
// message type (or to an idem.Message's Body). json.Unmarshal is one.
type Decoder func(body []byte, v any) error

// An Option configures a [Consumer] or a [Publisher]; each says which.
type Option func(*options)

type options struct {
	config      amqp.Config
	connName    string
	logger      *slog.Logger
	meter       metric.MeterProvider
	workers     int
	prefetch    int
	maxAttempts int
	maxBody     int
	decode      Decoder
	backoffMin  time.Duration
	backoffMax  time.Duration
	route       func(destination string) (exchange, key string)
	publishing  func(m idem.OutgoingMessage, p *amqp.Publishing)
	batchMax    int
	batchLinger time.Duration
}

func newOptions(kind string, opts []Option) options {
	o := options{
		logger:      slog.Default(),
		workers:     DefaultWorkers,
		maxAttempts: DefaultMaxAttempts,
		maxBody:     DefaultMaxBodySize,
		decode:      json.Unmarshal,
		backoffMin:  DefaultBackoffMin,
		backoffMax:  DefaultBackoffMax,
		route:       splitDestination,
		batchLinger: DefaultBatchLinger,
	}
	for _, opt := range opts {
		opt(&o)
	}
	if o.prefetch <= 0 {
		o.prefetch = 2 * o.workers
	}
	if o.backoffMax < o.backoffMin {
		o.backoffMax = o.backoffMin
	}
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
	switch {
	case o.workers < 1:
		return fmt.Errorf("rabbitmq: %s: WithWorkers(%d): want at least 1", what, o.workers)
	case o.maxAttempts < 1:
		return fmt.Errorf("rabbitmq: %s: WithMaxAttempts(%d): want at least 1", what, o.maxAttempts)
	case o.maxBody < 1:
		return fmt.Errorf("rabbitmq: %s: WithMaxBodySize(%d): want at least 1", what, o.maxBody)
	case o.prefetch > 65535:
		return fmt.Errorf("rabbitmq: %s: a prefetch of %d exceeds AMQP's 65535", what, o.prefetch)
	case o.backoffMin <= 0:
		return fmt.Errorf("rabbitmq: %s: WithBackoff(%v, %v): want a positive minimum", what, o.backoffMin, o.backoffMax)
	case o.decode == nil:
		return fmt.Errorf("rabbitmq: %s: WithDecoder(nil)", what)
	case o.batchMax < 0 || o.batchLinger < 0:
		return fmt.Errorf("rabbitmq: %s: WithBatch(%d, %v): want a max of at least 0 (0: the default) and a linger of at least 0", what, o.batchMax, o.batchLinger)
	}
	return nil
}

// batchSize is how many deliveries one DeliverBatch call takes at most:
// WithBatch's max (idem.DefaultBatchCap when 0), never more than the
// prefetch, since the broker hands out no more unacked deliveries than that.
func (o *options) batchSize() int {
	n := o.batchMax
	if n == 0 {
		n = idem.DefaultBatchCap
	}
	return min(n, o.prefetch)
}

// WithConfig sets the amqp.Config of the connections (TLS, heartbeat, SASL,
// Dial, client properties). Its Recovery is ignored: the consumer and the
// publisher connect again themselves. Consumer and Publisher.
func WithConfig(c amqp.Config) Option {
	return func(o *options) { o.config = c }
}

// WithConnectionName sets the connection_name client property, which the
// management UI and rabbitmqctl list_connections show (default "idem
// rabbitmq consumer" or "idem rabbitmq publisher"). Consumer and Publisher.
func WithConnectionName(name string) Option {
	return func(o *options) { o.connName = name }
}

// WithMeterProvider sets the OpenTelemetry MeterProvider of the consumer's
// counters, idem.broker.dead_letters and idem.broker.retries, with
// messaging.system rabbitmq and messaging.destination.name the
// queue consumed (docs/observability.md). nil, or no option, is
// otel.GetMeterProvider(), the global one. Consumer.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(o *options) { o.meter = mp }
}

// WithLogger sets the logger (default slog.Default()). Consumer and
// Publisher.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) { o.logger = l }
}

// WithBackoff sets the wait before connecting again after a lost or failed
// connection: min after the first failure, doubled after each further one,
// never more than max (defaults 200ms and 30s). Consumer.
func WithBackoff(min, max time.Duration) Option {
	return func(o *options) { o.backoffMin, o.backoffMax = min, max }
}

// WithWorkers sets how many deliveries are handled at once (default 4).
// Consumer.
func WithWorkers(n int) Option {
	return func(o *options) { o.workers = n }
}

// WithPrefetch sets the channel's prefetch count: how many unacked deliveries
// the broker hands the consumer ahead (default twice the workers). Consumer.
func WithPrefetch(n int) Option {
	return func(o *options) { o.prefetch = n }
}

// WithBatch sets how a Consumer whose handler is an idem.BatchHandler (every
// generated tx-mode wrapper, every idemimpl.Inbox) batches: a worker takes up to
// max deliveries, what the channel already holds and then what arrives
// within linger of the first, and delivers them with one DeliverBatch call;
// each delivery is then acked, retried or dead-lettered by its own result.
// Defaults: max idem.DefaultBatchCap (100, also for max 0), never more than
// the prefetch (WithPrefetch); linger DefaultBatchLinger (2ms).
// WithBatch(1, 0) turns batching off: one Deliver per delivery, as for a
// handler that is only an idem.Handler. A negative max or linger is an
// error of Run. Consumer.
func WithBatch(max int, linger time.Duration) Option {
	return func(o *options) { o.batchMax, o.batchLinger = max, linger }
}

// WithMaxAttempts sets after how many attempts a delivery whose action is
// still Retry is dead-lettered instead (default 10). Consumer.
func WithMaxAttempts(n int) Option {
	return func(o *options) { o.maxAttempts = n }
}

// WithMaxBodySize sets the largest body the consumer decodes, in bytes
// (default 4 MiB); a larger one is dead-lettered undecoded. Consumer.
func WithMaxBodySize(n int) Option {
	return func(o *options) { o.maxBody = n }
}

// WithDecoder sets how bodies are decoded (default json.Unmarshal). An error
// dead-letters the delivery as idem.ErrUndecodablePayload. Consumer.
func WithDecoder(d Decoder) Option {
	return func(o *options) { o.decode = d }
}

// WithRoute sets how an outbox destination maps onto an exchange and a
// routing key (default: "exchange/key" split at the first "/"; a
// destination without "/" is a routing key on the default exchange).
// Publisher.
func WithRoute(route func(destination string) (exchange, key string)) Option {
	return func(o *options) { o.route = route }
}

// WithPublishing lets f adjust each message before it is published (content
// type, priority, expiration). The publisher sets MessageId, Headers, Body,
// DeliveryMode persistent and ContentType application/json before f runs.
// Publisher.
func WithPublishing(f func(m idem.OutgoingMessage, p *amqp.Publishing)) Option {
	return func(o *options) { o.publishing = f }
}
