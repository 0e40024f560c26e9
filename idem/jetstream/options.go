package jetstream

import (
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/consumer"
	"github.com/idemgen/idemgen/idem/internal/consume"
)

// Defaults of the options; idem/consumer has those of the shared ones.
const (
	DefaultMaxBodySize  = 1 << 20
	DefaultRetryMin     = time.Second
	DefaultRetryMax     = time.Minute
	DefaultBackoffMin   = consume.DefaultBackoffMin
	DefaultBackoffMax   = consume.DefaultBackoffMax
	DefaultMaxInFlight  = 1024
	defaultPullExpiry   = 5 * time.Second
	defaultAckWaitGuess = 30 * time.Second
)

// An Option configures a [Consumer] or a [Publisher]; each says which. The
// options of idem/consumer (consumer.WithWorkers, consumer.WithMaxAttempts,
// consumer.WithMaxWait, consumer.WithBatch, consumer.WithLogger...) are
// Options too.
type Option = consumer.Option

type options struct {
	consume.Config
	retryMin    time.Duration
	retryMax    time.Duration
	maxInFlight int
	msg         func(m idem.OutgoingMessage, msg *nats.Msg)
}

func newOptions(opts []Option) options {
	o := options{
		retryMin:    DefaultRetryMin,
		retryMax:    DefaultRetryMax,
		maxInFlight: DefaultMaxInFlight,
	}
	o.Config = consume.Resolve(opts, DefaultMaxBodySize, &o)
	if o.retryMax < o.retryMin {
		o.retryMax = o.retryMin
	}
	return o
}

func (o *options) validate(what string) error {
	if err := o.Config.Validate("jetstream", what); err != nil {
		return err
	}
	switch {
	case o.retryMin <= 0:
		return fmt.Errorf("jetstream: %s: WithRetryDelay(%v, %v): want a positive minimum", what, o.retryMin, o.retryMax)
	case o.maxInFlight < 1:
		return fmt.Errorf("jetstream: %s: WithMaxInFlight(%d): want at least 1", what, o.maxInFlight)
	}
	return nil
}

// retryDelay is the delay of the NakWithDelay after the given attempt
// failed: the minimum after the first, doubled after each further one, never
// more than the maximum.
func (o *options) retryDelay(attempt int) time.Duration {
	d := o.retryMin
	for i := 1; i < attempt && d < o.retryMax; i++ {
		d *= 2
	}
	return min(d, o.retryMax)
}

// WithPrefetch sets how many messages the consumer holds at once, pulled
// and not yet settled (default twice the workers): it pulls no more than
// that, and keeps every message it holds in progress (InProgress at a third
// of the ack wait), also while it waits for a worker. Consumer.
func WithPrefetch(n int) Option {
	return consume.Option[Option](func(c *consume.Config) { c.Prefetch = n })
}

// WithRetryDelay sets the delay of the NakWithDelay for a Retry: min after
// the first attempt, doubled after each further one, never more than max
// (defaults 1s and 1m). Consumer.
func WithRetryDelay(min, max time.Duration) Option {
	return consume.Transport[Option](func(o *options) { o.retryMin, o.retryMax = min, max })
}

// WithBackoff sets the wait before pulling again after the pull failed (the
// consumer or the stream missing, the connection closed): min after the
// first failure, doubled after each further one, never more than max
// (defaults 200ms and 30s). Consumer.
func WithBackoff(min, max time.Duration) Option {
	return consume.Option[Option](func(c *consume.Config) { c.BackoffMin, c.BackoffMax = min, max })
}

// WithMaxInFlight sets how many messages a Publisher has without a PubAck at
// once (default 1024); a larger batch goes out in chunks. Publisher.
func WithMaxInFlight(n int) Option {
	return consume.Transport[Option](func(o *options) { o.maxInFlight = n })
}

// WithMsg lets f adjust each message before it is published (headers such
// as Content-Type). The publisher sets the subject, the data and the headers
// of the outbox row before f runs, and Nats-Msg-Id after it: the stable id
// is not f's to change. Publisher.
func WithMsg(f func(m idem.OutgoingMessage, msg *nats.Msg)) Option {
	return consume.Transport[Option](func(o *options) { o.msg = f })
}
