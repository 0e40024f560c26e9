// Package consume is the consumer policy the broker adapters (idem/rabbitmq,
// idem/jetstream, idem/kafka) share, written once: decoding a delivery,
// delivering it alone or in a batch, what idem.ActionFor says of the result,
// the attempts, the retry delays, the waits for a key in progress
// (idem.RetryAfter), the dead-letter reasons, the metrics, the log records
// and the check of the handler's tables at start. An adapter keeps only its
// transport: receiving, ack / nack / term, headers, its delay mechanism,
// reconnecting. The options that set Config are idem/consumer's.
package consume

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/idemgen/idemgen/idem"
)

// Defaults of the shared options (idem/consumer documents them).
const (
	DefaultWorkers     = 4
	DefaultMaxAttempts = 10
	DefaultBatchLinger = 2 * time.Millisecond
	// DefaultMaxWait is 3 default leases: a key held by a worker that died
	// frees when its lease ends, so a wait much longer than a lease means a
	// key that never frees.
	DefaultMaxWait = 3 * idem.DefaultLease
	// DefaultBackoffMin and DefaultBackoffMax bound the wait before a
	// consumer connects (or pulls) again after a failure.
	DefaultBackoffMin = 200 * time.Millisecond
	DefaultBackoffMax = 30 * time.Second
)

// Config is what the shared options set, and, through Transport, the
// adapter's own options.
type Config struct {
	Logger      *slog.Logger
	Meter       metric.MeterProvider
	Workers     int
	MaxAttempts int
	MaxBody     int
	Decode      func(data []byte, v any) error
	BatchMax    int
	BatchLinger time.Duration
	// MaxWait bounds, in time, the retries of a delivery whose key is in
	// progress (they count no attempt).
	MaxWait time.Duration
	// Prefetch is how many deliveries the broker hands out ahead (twice
	// the workers when 0); BackoffMin and BackoffMax bound the wait before
	// connecting or pulling again. Kafka has neither.
	Prefetch               int
	BackoffMin, BackoffMax time.Duration

	transport []func(any)
}

// wrap and unwrap convert between a func(*Config) and package consumer's
// opaque Option, which consumer installs in its init (SetOptionType). The
// adapters make Options through Option and Transport, so that go doc of
// consumer shows no internal type.
var (
	wrap   func(func(*Config)) any
	unwrap func(any) func(*Config)
)

// SetOptionType installs how package consumer wraps an option function into
// its Option and unwraps it again.
func SetOptionType(w func(func(*Config)) any, u func(any) func(*Config)) { wrap, unwrap = w, u }

// Option returns f as an option of type O, package consumer's Option.
func Option[O any](f func(*Config)) O { return wrap(f).(O) }

// Transport returns an option of type O that sets the adapter's own options,
// of type T: Resolve applies it to the T it is given.
func Transport[O, T any](set func(*T)) O {
	return Option[O](func(c *Config) {
		c.transport = append(c.transport, func(v any) { set(v.(*T)) })
	})
}

// Resolve applies opts (consumer.Options, or plain func(*Config) in this
// package's tests) to the defaults (maxBody is the adapter's default
// body size) and the adapter's options of them to t.
func Resolve[T, O any](opts []O, maxBody int, t *T) Config {
	c := Config{
		Logger:      slog.Default(),
		Workers:     DefaultWorkers,
		MaxAttempts: DefaultMaxAttempts,
		MaxBody:     maxBody,
		Decode:      json.Unmarshal,
		BatchLinger: DefaultBatchLinger,
		MaxWait:     DefaultMaxWait,
		BackoffMin:  DefaultBackoffMin,
		BackoffMax:  DefaultBackoffMax,
	}
	for _, opt := range opts {
		apply, ok := any(opt).(func(*Config))
		if !ok {
			apply = unwrap(opt)
		}
		if apply != nil {
			apply(&c)
		}
	}
	if c.Prefetch <= 0 {
		c.Prefetch = 2 * c.Workers
	}
	c.BackoffMax = max(c.BackoffMax, c.BackoffMin)
	for _, set := range c.transport {
		set(t)
	}
	c.transport = nil
	return c
}

// Validate reports an option that can never work; system and what say whose
// ("rabbitmq", "consumer of orders").
func (c *Config) Validate(system, what string) error {
	switch {
	case c.Workers < 1:
		return fmt.Errorf("%s: %s: WithWorkers(%d): want at least 1", system, what, c.Workers)
	case c.MaxAttempts < 1:
		return fmt.Errorf("%s: %s: WithMaxAttempts(%d): want at least 1", system, what, c.MaxAttempts)
	case c.MaxBody < 1:
		return fmt.Errorf("%s: %s: WithMaxBodySize(%d): want at least 1", system, what, c.MaxBody)
	case c.Decode == nil:
		return fmt.Errorf("%s: %s: WithDecoder(nil)", system, what)
	case c.Logger == nil:
		return fmt.Errorf("%s: %s: WithLogger(nil)", system, what)
	case c.BackoffMin <= 0:
		return fmt.Errorf("%s: %s: WithBackoff(%v, %v): want a positive minimum", system, what, c.BackoffMin, c.BackoffMax)
	case c.MaxWait <= 0:
		return fmt.Errorf("%s: %s: WithMaxWait(%v): want a positive duration", system, what, c.MaxWait)
	case c.BatchMax < 0 || c.BatchLinger < 0:
		return fmt.Errorf("%s: %s: WithBatch(%d, %v): want a max of at least 0 (0: the default) and a linger of at least 0", system, what, c.BatchMax, c.BatchLinger)
	}
	return nil
}

// BatchSize is how many deliveries one DeliverBatch call takes at most:
// WithBatch's max (idem.DefaultBatchCap when 0), never more than limit (the
// prefetch, a poll's records).
func (c *Config) BatchSize(limit int) int {
	n := c.BatchMax
	if n == 0 {
		n = idem.DefaultBatchCap
	}
	return min(n, limit)
}
