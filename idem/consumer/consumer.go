// Package consumer holds the options the broker adapters' consumers share
// (idem/rabbitmq, idem/jetstream, idem/kafka): each adapter's Option is this
// package's Option, so these options and the adapter's own mix in one call,
//
//	rabbitmq.NewConsumer(url, top, h, consumer.WithWorkers(8), rabbitmq.WithPrefetch(32))
//
// The policy they set is written once for the three adapters:
// idem.ActionFor decides, WithMaxAttempts bounds the retries of a failure,
// and a delivery whose key is in progress (idem.ErrInProgress,
// idem.ErrClaimLost) is retried no earlier than idem.RetryAfter without
// counting an attempt, for WithMaxWait at most (docs/brokers.md).
package consumer

import (
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/idemgen/idemgen/idem/internal/consume"
)

// Defaults of the options.
const (
	DefaultWorkers     = consume.DefaultWorkers
	DefaultMaxAttempts = consume.DefaultMaxAttempts
	DefaultBatchLinger = consume.DefaultBatchLinger
	// DefaultMaxWait is three times idem.DefaultLease.
	DefaultMaxWait = consume.DefaultMaxWait
)

// An Option configures a broker adapter's Consumer or Publisher; each says
// which. The adapters' own options are Options too.
type Option struct{ apply func(*consume.Config) }

func init() {
	consume.SetOptionType(
		func(f func(*consume.Config)) any { return Option{f} },
		func(o any) func(*consume.Config) { return o.(Option).apply },
	)
}

// A Decoder decodes a delivery's body into v, a pointer to the handler's
// message type (or to an idem.Message's Body). json.Unmarshal is one.
type Decoder func(body []byte, v any) error

// WithLogger sets the logger (default slog.Default()). Consumer and
// Publisher.
func WithLogger(l *slog.Logger) Option {
	return Option{func(c *consume.Config) { c.Logger = l }}
}

// WithMeterProvider sets the OpenTelemetry MeterProvider of the consumer's
// counters, idem.broker.dead_letters and idem.broker.retries, with
// messaging.system the adapter's and messaging.destination.name the queue,
// stream or topic consumed (docs/observability.md). nil, or no option, is
// otel.GetMeterProvider(), the global one. Consumer.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return Option{func(c *consume.Config) { c.Meter = mp }}
}

// WithWorkers sets how many deliveries are handled at once (default 4; for
// Kafka, how many partitions). Consumer.
func WithWorkers(n int) Option {
	return Option{func(c *consume.Config) { c.Workers = n }}
}

// WithMaxAttempts sets after how many attempts a delivery whose action is
// still Retry is dead-lettered instead (default 10). A retry of a key in
// progress is not an attempt (WithMaxWait bounds those). Neither is a
// delivery that could not reach the database (no connection, or a
// read-only server, as in a failover): it is held and tried again in place
// until the database answers. Consumer.
func WithMaxAttempts(n int) Option {
	return Option{func(c *consume.Config) { c.MaxAttempts = n }}
}

// WithMaxWait bounds, in time, the retries of a delivery whose key is in
// progress: each waits at least idem.RetryAfter (what is left of the
// running claim's lease in mode=external, the claim wait in mode=tx) and
// counts no attempt, and a delivery still finding its key in progress d
// after the first time is dead-lettered, its key one that never frees.
// Default DefaultMaxWait, three default leases; set it to a few times the
// longest lease= of the handlers consumed. Consumer.
func WithMaxWait(d time.Duration) Option {
	return Option{func(c *consume.Config) { c.MaxWait = d }}
}

// WithMaxBodySize sets the largest body the consumer decodes, in bytes
// (the adapter's DefaultMaxBodySize); a larger one is dead-lettered
// undecoded. Consumer.
func WithMaxBodySize(n int) Option {
	return Option{func(c *consume.Config) { c.MaxBody = n }}
}

// WithDecoder sets how bodies are decoded (default json.Unmarshal). An error
// dead-letters the delivery as idem.ErrUndecodablePayload. Consumer.
func WithDecoder(d Decoder) Option {
	return Option{func(c *consume.Config) { c.Decode = d }}
}

// WithBatch sets how a Consumer whose handler is an idem.BatchHandler (every
// generated tx-mode wrapper, every idemimpl.Inbox) batches: a worker takes up to
// max deliveries, what it already holds and then what arrives within linger
// of the first, and delivers them with one DeliverBatch call; each delivery
// is then settled by its own result. Defaults: max idem.DefaultBatchCap
// (100, also for max 0), never more than the prefetch (for Kafka, a poll's
// records, and linger is not waited: a poll is the batch); linger
// DefaultBatchLinger (2ms). WithBatch(1, 0) turns batching off: one Deliver
// per delivery. A negative max or linger is an error of Run. Consumer.
func WithBatch(max int, linger time.Duration) Option {
	return Option{func(c *consume.Config) { c.BatchMax, c.BatchLinger = max, linger }}
}
