// Package obs holds the OpenTelemetry instruments and the log record of
// idem's components (the inboxes, the relay, the janitor and the broker
// adapters), so that every component records under the same names,
// units and attributes. docs/observability.md lists them.
//
// The instruments of a MeterProvider are made once (New caches them per
// provider), and the attribute sets of the hot path are made once per
// consumer ([Instruments.Consumer]): recording an outcome allocates nothing
// beyond what the provider itself does.
package obs

import (
	"context"
	"log/slog"
	"reflect"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// MeterName is the name of the meter (the instrumentation scope) of every
// instrument.
const MeterName = "github.com/idemgen/idemgen/idem"

// The instruments' names.
const (
	NameDeliveries      = "idem.deliveries"
	NameHandlerDuration = "idem.handler.duration"
	NameLeaseTakeovers  = "idem.lease.takeovers"
	NameSweeperResets   = "idem.sweeper.resets"
	NamePurged          = "idem.purged"
	NameOutboxBacklog   = "idem.outbox.backlog"
	NameOutboxOldestAge = "idem.outbox.oldest_age"
	NameOutboxDead      = "idem.outbox.dead"
	NameRelayPublished  = "idem.relay.published"
	NameRelayFailures   = "idem.relay.failures"
	NameDeadLetters     = "idem.broker.dead_letters"
	NameRetries         = "idem.broker.retries"
)

// The attributes' keys.
const (
	AttrConsumer    = attribute.Key("idem.consumer")
	AttrOutcome     = attribute.Key("idem.outcome")
	AttrTable       = attribute.Key("idem.table")
	AttrKind        = attribute.Key("idem.kind")
	AttrDestination = attribute.Key("messaging.destination.name")
	AttrSystem      = attribute.Key("messaging.system")
)

// The values of idem.kind (Purged).
const (
	KindInbox    = "inbox"
	KindExternal = "external"
)

// Outcome is what one delivery came to, as idem.outcome names it.
type Outcome uint8

// The outcomes. Every delivery through an inbox's Handle is exactly one of
// them.
const (
	Processed Outcome = iota
	Duplicate
	InProgress
	KeyReused
	InvalidKey
	Stale
	ClaimLost
	Error
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"processed", "duplicate", "in_progress", "key_reused", "invalid_key", "stale", "claim_lost", "error"}

// Outcomes lists every outcome, in order.
func Outcomes() []Outcome {
	out := make([]Outcome, numOutcomes)
	for i := range out {
		out[i] = Outcome(i)
	}
	return out
}

// String is the outcome's idem.outcome value.
func (o Outcome) String() string {
	if o < numOutcomes {
		return outcomeNames[o]
	}
	return "unknown"
}

// Level is the level of the outcome's log record: Debug for the outcomes of
// a healthy consumer (processed, duplicate), Info for those that a retry or
// an ack resolves without anyone's help (in_progress, stale), Warn for those
// that say a message or a worker needs a look (invalid_key, claim_lost),
// Error for a producer that reused a key with another payload (key_reused)
// and for every other error.
func (o Outcome) Level() slog.Level {
	switch o {
	case Processed, Duplicate:
		return slog.LevelDebug
	case InProgress, Stale:
		return slog.LevelInfo
	case InvalidKey, ClaimLost:
		return slog.LevelWarn
	default:
		return slog.LevelError
	}
}

// Instruments are the instruments of one MeterProvider.
type Instruments struct {
	meter       metric.Meter
	deliveries  metric.Int64Counter
	duration    metric.Float64Histogram
	takeovers   metric.Int64Counter
	resets      metric.Int64Counter
	purged      metric.Int64Counter
	published   metric.Int64Counter
	failures    metric.Int64Counter
	deadLetters metric.Int64Counter
	retries     metric.Int64Counter

	consumers sync.Map // string -> *Consumer
	sets      sync.Map // attrKey -> []metric.AddOption
}

var cache sync.Map // metric.MeterProvider -> *Instruments

// New returns the instruments of mp, made once per provider (a provider
// that is not comparable gets new ones at every call). A nil mp is
// otel.GetMeterProvider(), the global one: instruments made from it before
// otel.SetMeterProvider record into the provider set later.
func New(mp metric.MeterProvider) *Instruments {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	comparable := reflect.TypeOf(mp).Comparable()
	if comparable {
		if in, ok := cache.Load(mp); ok {
			return in.(*Instruments)
		}
	}
	in := build(mp)
	if comparable {
		actual, _ := cache.LoadOrStore(mp, in)
		return actual.(*Instruments)
	}
	return in
}

// DurationBuckets are the handler duration histogram's bucket bounds, in
// seconds: from a millisecond (a duplicate) to a minute (a slow provider).
var DurationBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

func build(mp metric.MeterProvider) *Instruments {
	m := mp.Meter(MeterName)
	in := &Instruments{meter: m}
	// The API returns a working no-op instrument along with any error
	// (an invalid name, which ours are not), so the errors are dropped.
	in.deliveries, _ = m.Int64Counter(NameDeliveries, metric.WithUnit("{delivery}"),
		metric.WithDescription("Deliveries handled by an inbox, by consumer and outcome."))
	in.duration, _ = m.Float64Histogram(NameHandlerDuration, metric.WithUnit("s"),
		metric.WithDescription("Duration of an inbox's Handle (claim, handler, commit), by consumer and outcome."),
		metric.WithExplicitBucketBoundaries(DurationBuckets...))
	in.takeovers, _ = m.Int64Counter(NameLeaseTakeovers, metric.WithUnit("{claim}"),
		metric.WithDescription("Claims of mode=external keys taken over from a worker whose lease ran out."))
	in.resets, _ = m.Int64Counter(NameSweeperResets, metric.WithUnit("{claim}"),
		metric.WithDescription("Expired claims of mode=external keys reset to released by the sweeper."))
	in.purged, _ = m.Int64Counter(NamePurged, metric.WithUnit("{row}"),
		metric.WithDescription("Rows deleted past their retention, by table and kind."))
	in.published, _ = m.Int64Counter(NameRelayPublished, metric.WithUnit("{message}"),
		metric.WithDescription("Outbox rows the relay published and marked published, by destination."))
	in.failures, _ = m.Int64Counter(NameRelayFailures, metric.WithUnit("{message}"),
		metric.WithDescription("Outbox rows whose publish attempt failed, by destination."))
	in.deadLetters, _ = m.Int64Counter(NameDeadLetters, metric.WithUnit("{message}"),
		metric.WithDescription("Messages a broker adapter dead-lettered, by messaging system and the destination it consumes."))
	in.retries, _ = m.Int64Counter(NameRetries, metric.WithUnit("{message}"),
		metric.WithDescription("Deliveries a broker adapter sent back for a retry after a delay, by messaging system and the destination it consumes."))
	return in
}

// Meter is the meter of the instruments, for a component's observable
// instruments (the relay's gauges).
func (in *Instruments) Meter() metric.Meter { return in.meter }

// Consumer is the instruments of one consumer, with its attribute sets made
// once.
type Consumer struct {
	in       *Instruments
	name     string
	add      [numOutcomes][]metric.AddOption
	record   [numOutcomes][]metric.RecordOption
	consumer []metric.AddOption
}

// Consumer returns the instruments of the consumer name (made once per
// name).
func (in *Instruments) Consumer(name string) *Consumer {
	if c, ok := in.consumers.Load(name); ok {
		return c.(*Consumer)
	}
	c := &Consumer{in: in, name: name}
	for o := range numOutcomes {
		set := metric.WithAttributeSet(attribute.NewSet(AttrConsumer.String(name), AttrOutcome.String(o.String())))
		c.add[o] = []metric.AddOption{set}
		c.record[o] = []metric.RecordOption{set}
	}
	c.consumer = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(AttrConsumer.String(name)))}
	actual, _ := in.consumers.LoadOrStore(name, c)
	return actual.(*Consumer)
}

// Name is the consumer's name.
func (c *Consumer) Name() string { return c.name }

// Outcome records one delivery: idem.deliveries and idem.handler.duration.
func (c *Consumer) Outcome(ctx context.Context, o Outcome, d time.Duration) {
	if o >= numOutcomes {
		o = Error
	}
	c.in.deliveries.Add(ctx, 1, c.add[o]...)
	c.in.duration.Record(ctx, d.Seconds(), c.record[o]...)
}

// LeaseTakeover records one claim taken over from an expired lease.
func (c *Consumer) LeaseTakeover(ctx context.Context) {
	c.in.takeovers.Add(ctx, 1, c.consumer...)
}

// SweeperResets records n claims reset by the sweeper (nothing for n <= 0).
func (c *Consumer) SweeperResets(ctx context.Context, n int64) {
	if n > 0 {
		c.in.resets.Add(ctx, n, c.consumer...)
	}
}

// Outcome records one delivery of consumer; Consumer(consumer).Outcome
// without the lookup is what the hot path uses.
func (in *Instruments) Outcome(ctx context.Context, consumer string, o Outcome, d time.Duration) {
	in.Consumer(consumer).Outcome(ctx, o, d)
}

// LeaseTakeover records one claim of consumer taken over from an expired
// lease.
func (in *Instruments) LeaseTakeover(ctx context.Context, consumer string) {
	in.Consumer(consumer).LeaseTakeover(ctx)
}

// SweeperResets records n claims of consumer reset by the sweeper.
func (in *Instruments) SweeperResets(ctx context.Context, consumer string, n int64) {
	in.Consumer(consumer).SweeperResets(ctx, n)
}

type attrKey struct {
	instrument string
	k1, v1     string
	k2, v2     string
}

// opts returns the attribute set of two attributes, made once.
func (in *Instruments) opts(instrument string, k1 attribute.Key, v1 string, k2 attribute.Key, v2 string) []metric.AddOption {
	key := attrKey{instrument, string(k1), v1, string(k2), v2}
	if o, ok := in.sets.Load(key); ok {
		return o.([]metric.AddOption)
	}
	kv := []attribute.KeyValue{k1.String(v1)}
	if k2 != "" {
		kv = append(kv, k2.String(v2))
	}
	o := []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(kv...))}
	actual, _ := in.sets.LoadOrStore(key, o)
	return actual.([]metric.AddOption)
}

// Purged records n rows of table deleted past their retention; kind is
// KindInbox or KindExternal. Nothing for n <= 0.
func (in *Instruments) Purged(ctx context.Context, table, kind string, n int64) {
	if n > 0 {
		in.purged.Add(ctx, n, in.opts(NamePurged, AttrTable, table, AttrKind, kind)...)
	}
}

// Published records n outbox rows published to destination.
func (in *Instruments) Published(ctx context.Context, destination string, n int64) {
	if n > 0 {
		in.published.Add(ctx, n, in.opts(NameRelayPublished, AttrDestination, destination, "", "")...)
	}
}

// PublishFailures records n outbox rows whose publish to destination
// failed.
func (in *Instruments) PublishFailures(ctx context.Context, destination string, n int64) {
	if n > 0 {
		in.failures.Add(ctx, n, in.opts(NameRelayFailures, AttrDestination, destination, "", "")...)
	}
}

// The values of messaging.system of the adapters (OpenTelemetry's
// messaging semantic conventions; NATS has none there, "nats" is ours).
const (
	SystemRabbitMQ = "rabbitmq"
	SystemNATS     = "nats"
	SystemKafka    = "kafka"
)

// DeadLetter records one message that a broker adapter of system
// dead-lettered from destination (the queue, stream or topic it consumes).
func (in *Instruments) DeadLetter(ctx context.Context, system, destination string) {
	in.deadLetters.Add(ctx, 1, in.opts(NameDeadLetters, AttrSystem, system, AttrDestination, destination)...)
}

// Retry records one delivery that a broker adapter of system sent back for
// a retry after a delay (a retry queue, a NakWithDelay, a seek back).
func (in *Instruments) Retry(ctx context.Context, system, destination string) {
	in.retries.Add(ctx, 1, in.opts(NameRetries, AttrSystem, system, AttrDestination, destination)...)
}

// The log record of a delivery: its message and its attributes' keys.
const (
	DeliveryMsg = "idem delivery"

	LogConsumer     = "consumer"
	LogKey          = "key"
	LogIdemKey      = "idem_key"
	LogOutcome      = "outcome"
	LogAttempt      = "attempt"
	LogClaimAttempt = "claim_attempt"
	LogDuration     = "duration"
	LogErr          = "err"
)

// Delivery is one delivery as its log record tells it. It holds no
// payload: only the key, as text.
type Delivery struct {
	Consumer string
	// Key is the key parts as Field=value pairs, "" when they could not be
	// taken from the message.
	Key string
	// IdemKey is a mode=external delivery's idempotency key (what the
	// provider sees), "" for mode=tx.
	IdemKey string
	Outcome Outcome
	// Attempt is the broker's delivery attempt (idem.Message.Attempt), 0
	// when not known.
	Attempt int
	// ClaimAttempt is the attempt of a mode=external claim, 0 when no
	// claim was made.
	ClaimAttempt int
	Duration     time.Duration
	Err          error
}

// Enabled reports whether l logs the record of outcome o; a caller builds
// the Delivery (the key's text) only then.
func Enabled(ctx context.Context, l *slog.Logger, o Outcome) bool {
	return l.Enabled(ctx, o.Level())
}

// Log writes the delivery's record at its outcome's level.
func Log(ctx context.Context, l *slog.Logger, d Delivery) {
	attrs := make([]slog.Attr, 0, 8)
	attrs = append(attrs,
		slog.String(LogConsumer, d.Consumer),
		slog.String(LogKey, d.Key))
	if d.IdemKey != "" {
		attrs = append(attrs, slog.String(LogIdemKey, d.IdemKey))
	}
	attrs = append(attrs, slog.String(LogOutcome, d.Outcome.String()))
	if d.Attempt > 0 {
		attrs = append(attrs, slog.Int(LogAttempt, d.Attempt))
	}
	if d.ClaimAttempt > 0 {
		attrs = append(attrs, slog.Int(LogClaimAttempt, d.ClaimAttempt))
	}
	attrs = append(attrs, slog.Duration(LogDuration, d.Duration))
	if d.Err != nil {
		attrs = append(attrs, slog.Any(LogErr, d.Err))
	}
	l.LogAttrs(ctx, d.Outcome.Level(), DeliveryMsg, attrs...)
}
