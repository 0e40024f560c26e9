package kafka

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/metric"

	"github.com/idemgen/idemgen/idem"
)

// Defaults of the options.
const (
	DefaultWorkers     = 4
	DefaultMaxAttempts = 10
	DefaultMaxBodySize = 4 << 20
	DefaultRetryDelay  = 5 * time.Second
	DefaultMaxPoll     = 500
)

// A Decoder decodes a record's value into v, a pointer to the handler's
// message type (or to an idem.Message's Body). json.Unmarshal is one.
type Decoder func(value []byte, v any) error

// An Option configures a [Consumer] or a [Publisher]; each says which.
type Option func(*options)

type options struct {
	client      []kgo.Opt
	logger      *slog.Logger
	meter       metric.MeterProvider
	workers     int
	maxAttempts int
	maxBody     int
	maxPoll     int
	retryDelay  time.Duration
	decode      Decoder
	deadLetter  func(topic string) string
	record      func(m idem.OutgoingMessage, r *kgo.Record)
	batchMax    int
	batchLinger time.Duration
}

func newOptions(opts []Option) options {
	o := options{
		logger:      slog.Default(),
		workers:     DefaultWorkers,
		maxAttempts: DefaultMaxAttempts,
		maxBody:     DefaultMaxBodySize,
		maxPoll:     DefaultMaxPoll,
		retryDelay:  DefaultRetryDelay,
		decode:      json.Unmarshal,
		deadLetter:  func(topic string) string { return topic + ".dlq" },
	}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

func (o *options) validate(what string) error {
	switch {
	case o.workers < 1:
		return fmt.Errorf("kafka: %s: WithWorkers(%d): want at least 1", what, o.workers)
	case o.maxAttempts < 1:
		return fmt.Errorf("kafka: %s: WithMaxAttempts(%d): want at least 1", what, o.maxAttempts)
	case o.maxBody < 1:
		return fmt.Errorf("kafka: %s: WithMaxBodySize(%d): want at least 1", what, o.maxBody)
	case o.maxPoll < 1:
		return fmt.Errorf("kafka: %s: WithMaxPollRecords(%d): want at least 1", what, o.maxPoll)
	case o.retryDelay < 0:
		return fmt.Errorf("kafka: %s: WithRetryDelay(%v): negative", what, o.retryDelay)
	case o.decode == nil:
		return fmt.Errorf("kafka: %s: WithDecoder(nil)", what)
	case o.deadLetter == nil:
		return fmt.Errorf("kafka: %s: WithDeadLetterTopic(nil)", what)
	case o.logger == nil:
		return fmt.Errorf("kafka: %s: WithLogger(nil)", what)
	case o.batchMax < 0 || o.batchLinger < 0:
		return fmt.Errorf("kafka: %s: WithBatch(%d, %v): want a max of at least 0 (0: the default) and a linger of at least 0", what, o.batchMax, o.batchLinger)
	}
	return nil
}

// batchSize is how many records of a partition one DeliverBatch call takes
// at most: WithBatch's max (idem.DefaultBatchCap when 0), never more than a
// poll's records.
func (o *options) batchSize() int {
	n := o.batchMax
	if n == 0 {
		n = idem.DefaultBatchCap
	}
	return min(n, o.maxPoll)
}

// WithClientOptions adds franz-go client options (TLS, SASL, FetchMaxWait,
// a client id...) to the consumer's or publisher's client. The consumer's own
// (the group, the topics, auto-commit off, BlockRebalanceOnPoll) come last
// and win.
func WithClientOptions(opts ...kgo.Opt) Option {
	return func(o *options) { o.client = append(o.client, opts...) }
}

// WithMeterProvider sets the OpenTelemetry MeterProvider of the consumer's
// counters, idem.broker.dead_letters and idem.broker.retries, with
// messaging.system kafka and messaging.destination.name the
// topic consumed (docs/observability.md). nil, or no option, is
// otel.GetMeterProvider(), the global one. Consumer.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(o *options) { o.meter = mp }
}

// WithLogger sets where the consumer and publisher log (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithWorkers bounds how many partitions the consumer processes at once
// (default 4); the records of one partition are processed one at a time, in
// order.
func WithWorkers(n int) Option { return func(o *options) { o.workers = n } }

// WithMaxAttempts is how many attempts a record gets before the consumer
// dead-letters it instead of retrying (default 10).
func WithMaxAttempts(n int) Option { return func(o *options) { o.maxAttempts = n } }

// WithMaxBodySize dead-letters records whose value is larger (default 4 MiB).
func WithMaxBodySize(n int) Option { return func(o *options) { o.maxBody = n } }

// WithBatch sets how a Consumer whose handler is an idem.BatchHandler (every
// generated tx-mode wrapper, every idemimpl.Inbox) batches: the records one poll
// returned for a partition are delivered in offset order, at most max per
// DeliverBatch call, and each is then done or retried by its own result. A
// poll is the batch: linger is not waited (it may be 0 or more; the
// fetch's own wait, kgo.FetchMaxWait through WithClientOptions, is Kafka's
// linger). When a record must be retried, the offsets before it are
// committed and the partition is sought back to it; the records after it in
// its batch come again, as Duplicates where they committed. Default max
// idem.DefaultBatchCap (100, also for max 0), never more than
// WithMaxPollRecords. WithBatch(1, 0) turns batching off: one Deliver per
// record, as for a handler that is only an idem.Handler. A negative max or
// linger is an error of Run.
func WithBatch(max int, linger time.Duration) Option {
	return func(o *options) { o.batchMax, o.batchLinger = max, linger }
}

// WithMaxPollRecords bounds the records one poll takes (default 500).
func WithMaxPollRecords(n int) Option { return func(o *options) { o.maxPoll = n } }

// WithRetryDelay is how long a partition waits before the consumer fetches a
// record to retry again (default 5s).
func WithRetryDelay(d time.Duration) Option { return func(o *options) { o.retryDelay = d } }

// WithDecoder replaces JSON decoding of the record values.
func WithDecoder(d Decoder) Option { return func(o *options) { o.decode = d } }

// WithDeadLetterTopic maps a consumed topic to its dead-letter topic
// (default topic + ".dlq").
func WithDeadLetterTopic(f func(topic string) string) Option {
	return func(o *options) { o.deadLetter = f }
}

// WithRecord lets the publisher adjust each record before it is produced
// (after the topic, key and headers are set).
func WithRecord(f func(m idem.OutgoingMessage, r *kgo.Record)) Option {
	return func(o *options) { o.record = f }
}
