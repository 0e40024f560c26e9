package jetstream

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/metric"

	"github.com/idemgen/idemgen/idem"
)

// Defaults of the options.
const (
	DefaultWorkers      = 4
	DefaultMaxAttempts  = 10
	DefaultMaxBodySize  = 1 << 20
	DefaultRetryMin     = time.Second
	DefaultRetryMax     = time.Minute
	DefaultBackoffMin   = 200 * time.Millisecond
	DefaultBackoffMax   = 30 * time.Second
	DefaultMaxInFlight  = 1024
	DefaultBatchLinger  = 2 * time.Millisecond
	defaultPullExpiry   = 5 * time.Second
	defaultAckWaitGuess = 30 * time.Second
)

// A Decoder decodes a message's data into v, a pointer to the handler's
// message type (or to an idem.Message's Body). json.Unmarshal is one.
type Decoder func(data []byte, v any) error

// An Option configures a [Consumer] or a [Publisher]; each says which.
type Option func(*options)

type options struct {
	logger      *slog.Logger
	meter       metric.MeterProvider
	workers     int
	prefetch    int
	maxAttempts int
	maxBody     int
	decode      Decoder
	retryMin    time.Duration
	retryMax    time.Duration
	backoffMin  time.Duration
	backoffMax  time.Duration
	maxInFlight int
	msg         func(m idem.OutgoingMessage, msg *nats.Msg)
	batchMax    int
	batchLinger time.Duration
}

func newOptions(opts []Option) options {
	o := options{
		logger:      slog.Default(),
		workers:     DefaultWorkers,
		maxAttempts: DefaultMaxAttempts,
		maxBody:     DefaultMaxBodySize,
		decode:      json.Unmarshal,
		retryMin:    DefaultRetryMin,
		retryMax:    DefaultRetryMax,
		backoffMin:  DefaultBackoffMin,
		backoffMax:  DefaultBackoffMax,
		maxInFlight: DefaultMaxInFlight,
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
	if o.retryMax < o.retryMin {
		o.retryMax = o.retryMin
	}
	return o
}

func (o *options) validate(what string) error {
	switch {
	case o.workers < 1:
		return fmt.Errorf("jetstream: %s: WithWorkers(%d): want at least 1", what, o.workers)
	case o.maxAttempts < 1:
		return fmt.Errorf("jetstream: %s: WithMaxAttempts(%d): want at least 1", what, o.maxAttempts)
	case o.maxBody < 1:
		return fmt.Errorf("jetstream: %s: WithMaxBodySize(%d): want at least 1", what, o.maxBody)
	case o.retryMin <= 0:
		return fmt.Errorf("jetstream: %s: WithRetryDelay(%v, %v): want a positive minimum", what, o.retryMin, o.retryMax)
	case o.backoffMin <= 0:
		return fmt.Errorf("jetstream: %s: WithBackoff(%v, %v): want a positive minimum", what, o.backoffMin, o.backoffMax)
	case o.maxInFlight < 1:
		return fmt.Errorf("jetstream: %s: WithMaxInFlight(%d): want at least 1", what, o.maxInFlight)
	case o.decode == nil:
		return fmt.Errorf("jetstream: %s: WithDecoder(nil)", what)
	case o.batchMax < 0 || o.batchLinger < 0:
		return fmt.Errorf("jetstream: %s: WithBatch(%d, %v): want a max of at least 0 (0: the default) and a linger of at least 0", what, o.batchMax, o.batchLinger)
	}
	return nil
}

// batchSize is how many messages one DeliverBatch call takes at most:
// WithBatch's max (idem.DefaultBatchCap when 0), never more than the
// prefetch, which bounds what the pull holds.
func (o *options) batchSize() int {
	n := o.batchMax
	if n == 0 {
		n = idem.DefaultBatchCap
	}
	return min(n, o.prefetch)
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

// WithMeterProvider sets the OpenTelemetry MeterProvider of the consumer's
// counters, idem.broker.dead_letters and idem.broker.retries, with
// messaging.system nats and messaging.destination.name the
// stream consumed (docs/observability.md). nil, or no option, is
// otel.GetMeterProvider(), the global one. Consumer.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(o *options) { o.meter = mp }
}

// WithLogger sets the logger (default slog.Default()). Consumer and
// Publisher.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) { o.logger = l }
}

// WithWorkers sets how many messages are handled at once (default 4).
// Consumer.
func WithWorkers(n int) Option {
	return func(o *options) { o.workers = n }
}

// WithPrefetch sets how many messages the consumer pulls ahead and buffers
// (default twice the workers). Consumer.
func WithPrefetch(n int) Option {
	return func(o *options) { o.prefetch = n }
}

// WithBatch sets how a Consumer whose handler is an idem.BatchHandler (every
// generated tx-mode wrapper, every idemimpl.Inbox) batches: a worker takes up to
// max messages, what the pull has buffered and then what arrives within
// linger of the first, and delivers them with one DeliverBatch call; each
// message is then acked, nakked with a delay or terminated by its own
// result, and InProgress covers every message of the batch while it is
// handled. Defaults: max idem.DefaultBatchCap (100, also for max 0), never
// more than the prefetch (WithPrefetch); linger DefaultBatchLinger (2ms).
// WithBatch(1, 0) turns batching off: one Deliver per message, as for a
// handler that is only an idem.Handler. A negative max or linger is an
// error of Run. Consumer.
func WithBatch(max int, linger time.Duration) Option {
	return func(o *options) { o.batchMax, o.batchLinger = max, linger }
}

// WithMaxAttempts sets after how many attempts (NumDelivered) a message whose
// action is still Retry is dead-lettered instead (default 10). Consumer.
func WithMaxAttempts(n int) Option {
	return func(o *options) { o.maxAttempts = n }
}

// WithMaxBodySize sets the largest message data the consumer decodes, in
// bytes (default 1 MiB, the server's default max_payload); a larger one is
// dead-lettered undecoded. Consumer.
func WithMaxBodySize(n int) Option {
	return func(o *options) { o.maxBody = n }
}

// WithDecoder sets how message data is decoded (default json.Unmarshal). An
// error dead-letters the message as idem.ErrUndecodablePayload. Consumer.
func WithDecoder(d Decoder) Option {
	return func(o *options) { o.decode = d }
}

// WithRetryDelay sets the delay of the NakWithDelay for a Retry: min after
// the first attempt, doubled after each further one, never more than max
// (defaults 1s and 1m). Consumer.
func WithRetryDelay(min, max time.Duration) Option {
	return func(o *options) { o.retryMin, o.retryMax = min, max }
}

// WithBackoff sets the wait before pulling again after the pull failed (the
// consumer or the stream missing, the connection closed): min after the
// first failure, doubled after each further one, never more than max
// (defaults 200ms and 30s). Consumer.
func WithBackoff(min, max time.Duration) Option {
	return func(o *options) { o.backoffMin, o.backoffMax = min, max }
}

// WithMaxInFlight sets how many messages a Publisher has without a PubAck at
// once (default 1024); a larger batch goes out in chunks. Publisher.
func WithMaxInFlight(n int) Option {
	return func(o *options) { o.maxInFlight = n }
}

// WithMsg lets f adjust each message before it is published (headers such
// as Content-Type). The publisher sets the subject, the data and the headers
// of the outbox row before f runs, and Nats-Msg-Id after it: the stable id
// is not f's to change. Publisher.
func WithMsg(f func(m idem.OutgoingMessage, msg *nats.Msg)) Option {
	return func(o *options) { o.msg = f }
}
