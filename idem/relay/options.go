package relay

import (
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/metric"
)

// The relay's defaults: what New uses for an option not given.
const (
	DefaultBatchSize   = 100
	DefaultPoll        = time.Second
	DefaultMaxAttempts = 10
	DefaultBackoffBase = time.Second
	DefaultBackoffMax  = 5 * time.Minute
	DefaultLease       = 30 * time.Second
	DefaultPurgeBatch  = 1000
	// DefaultPublishTimeout bounds a batch's publish when no
	// WithPublishTimeout says otherwise: a third of the default lease.
	DefaultPublishTimeout = 10 * time.Second
)

// An Option configures a [Relay].
type Option func(*options)

type options struct {
	batchSize   int
	poll        time.Duration
	maxAttempts int
	backoffBase time.Duration
	backoffMax  time.Duration
	lease       time.Duration
	ordered     bool
	pollOnly    bool
	replicated  bool
	id          string
	logger      *slog.Logger
	meter       metric.MeterProvider
	purgeBatch  int
	// publishTimeout bounds a batch's publish; 0 is the default.
	publishTimeout time.Duration
}

// publishBound is how long a batch's publish may take before it is failed.
func (o options) publishBound() time.Duration {
	if o.publishTimeout > 0 {
		return o.publishTimeout
	}
	return DefaultPublishTimeout
}

// WithPublishTimeout bounds how long the relay waits for a batch's
// publish to be confirmed (default DefaultPublishTimeout, 10s; the
// lease is renewed meanwhile, so the bound may be longer than the lease).
// When it passes, the publish's context is
// cancelled, the rows not confirmed are recorded as failed (retried after
// their backoff) and the relay steps back for as long before it claims
// again, so that another relay takes the rows: a broker that never confirms
// does not keep them claimed while the lease is renewed.
func WithPublishTimeout(d time.Duration) Option {
	return func(o *options) { o.publishTimeout = d }
}

// WithBatchSize sets how many rows the relay claims and hands to the
// Publisher at once (default 100).
func WithBatchSize(n int) Option {
	return func(o *options) { o.batchSize = n }
}

// WithPollInterval sets the longest the relay waits before it looks for
// due rows again when it found none (default a second). NOTIFY wakes it
// sooner; the poll is what publishes rows whose backoff ended, rows whose
// lease lapsed, and every row in poll-only mode.
func WithPollInterval(d time.Duration) Option {
	return func(o *options) { o.poll = d }
}

// WithMaxAttempts sets after how many attempts a row is dead-lettered
// (default 10). An attempt is a claim: a relay that dies while publishing
// uses one up too.
func WithMaxAttempts(n int) Option {
	return func(o *options) { o.maxAttempts = n }
}

// WithBackoff sets the wait after a failed attempt: base after the
// first, doubled after each further one, never more than max (defaults a
// second and five minutes).
func WithBackoff(base, max time.Duration) Option {
	return func(o *options) { o.backoffBase, o.backoffMax = base, max }
}

// WithLease sets how long a claim holds its rows (default 30 seconds).
// While a batch is being published the relay renews the lease every third of
// it; if it cannot, it cancels the publish before the lease lapses, so that
// no other relay publishes the same row while this one still is. A relay that
// dies leaves its rows to the others once the lease has lapsed.
func WithLease(d time.Duration) Option {
	return func(o *options) { o.lease = d }
}

// WithOrdered turns on the ordered mode: of the rows that have an
// ordering key, only each key's oldest pending row is published, and the next
// one only after it is marked published or dead. It keeps each key's order
// only when every relay on the table runs in ordered mode. See
// docs/outbox.md for what the order is and what it costs.
func WithOrdered() Option {
	return func(o *options) { o.ordered = true }
}

// WithReplicated makes the relay publish a claimed row only once a standby
// reports the row's commit flushed (pg_stat_replication's flush_lsn). So no
// message outlives its commit. With asynchronous replication, a failover
// loses the commits the promoted standby had not received. The rerun of
// such a delivery writes its row again, under the same message id, maybe
// with another payload. The relay polls with a short backoff while the
// standby catches up. With no standby connected it waits, logging why,
// rather than publish. Its role must read flush_lsn: a superuser, or a
// member of pg_read_all_stats (pg_monitor). docs/failover.md gives its
// cost in latency and when to use it.
func WithReplicated() Option {
	return func(o *options) { o.replicated = true }
}

// WithPollOnly turns off the listening connection: the relay only polls.
// Use it when the pool goes through a pooler in transaction mode (PgBouncer),
// where LISTEN does not work, and pick the poll interval for the latency you
// need.
func WithPollOnly() Option {
	return func(o *options) { o.pollOnly = true }
}

// WithID names the relay in its log records and in the application_name
// of its listening connection (default host-pid-random).
func WithID(id string) Option {
	return func(o *options) { o.id = id }
}

// WithLogger sets the logger of the relay's records (default
// slog.Default()). No record holds a payload.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) { o.logger = l }
}

// WithMeterProvider sets the OpenTelemetry MeterProvider of the
// relay's instruments: idem.relay.published and idem.relay.failures by
// destination, and the outbox gauges
// idem.outbox.backlog, idem.outbox.oldest_age and idem.outbox.dead (see
// docs/observability.md). nil, or no option, is otel.GetMeterProvider(), the
// global one.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(o *options) { o.meter = mp }
}

// WithPurgeBatch set how many rows one statement of [Relay.Purge]
// deleted at most (default 1000); values below 1 are still refused.
//
// Deprecated: published rows are deleted when they are published, and
// Relay.Purge has nothing to delete.
func WithPurgeBatch(n int) Option {
	return func(o *options) { o.purgeBatch = n }
}

func defaultOptions() options {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "relay"
	}
	return options{
		batchSize:   DefaultBatchSize,
		poll:        DefaultPoll,
		maxAttempts: DefaultMaxAttempts,
		backoffBase: DefaultBackoffBase,
		backoffMax:  DefaultBackoffMax,
		lease:       DefaultLease,
		id:          host + "-" + strconv.Itoa(os.Getpid()) + "-" + uuid.NewString()[:8],
		logger:      slog.Default(),
		purgeBatch:  DefaultPurgeBatch,
	}
}

// minLease keeps the lease long enough for the renewal every third of
// it to be a database round trip away, not a busy loop.
const minLease = 30 * time.Millisecond

// validate panics on a value that would make the relay fail at every round:
// a programmer error, seen at startup, as with the inbox's options.
func (o options) validate() {
	bad := func(format string, args ...any) {
		panic(fmt.Sprintf("relay.New (relay %s): ", o.id) + fmt.Sprintf(format, args...))
	}
	switch {
	case o.batchSize < 1 || o.batchSize > 1<<20:
		bad("relay.WithBatchSize(%d) is out of range: want 1 to %d", o.batchSize, 1<<20)
	case o.poll <= 0:
		bad("relay.WithPollInterval(%v) must be positive", o.poll)
	case o.maxAttempts < 1 || o.maxAttempts > 1<<30:
		bad("relay.WithMaxAttempts(%d) is out of range: want at least 1", o.maxAttempts)
	case o.backoffBase <= 0 || o.backoffMax < o.backoffBase:
		bad("relay.WithBackoff(%v, %v): want 0 < base <= max", o.backoffBase, o.backoffMax)
	case o.lease < minLease:
		bad("relay.WithLease(%v) is shorter than %v", o.lease, minLease)
	case o.id == "":
		bad("relay.WithID(\"\"): the relay needs a name")
	case o.logger == nil:
		bad("relay.WithLogger(nil): pass slog.New(slog.DiscardHandler) to log nothing")
	case o.publishTimeout < 0:
		bad("relay.WithPublishTimeout(%v) is negative", o.publishTimeout)
	case o.purgeBatch < 1:
		bad("relay.WithPurgeBatch(%d): want at least 1", o.purgeBatch)
	}
}
