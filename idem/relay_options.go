package idem

import (
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/metric"
)

// The relay's defaults: what NewRelay uses for an option not given.
const (
	DefaultRelayBatchSize   = 100
	DefaultRelayPoll        = time.Second
	DefaultRelayMaxAttempts = 10
	DefaultRelayBackoffBase = time.Second
	DefaultRelayBackoffMax  = 5 * time.Minute
	DefaultRelayLease       = 30 * time.Second
	DefaultRelayPurgeBatch  = 1000
	// DefaultRelayPublishTimeout bounds a batch's publish when no
	// WithRelayPublishTimeout says otherwise: a third of the default lease.
	DefaultRelayPublishTimeout = 10 * time.Second
)

// A RelayOption configures a [Relay].
type RelayOption func(*relayOptions)

type relayOptions struct {
	batchSize   int
	poll        time.Duration
	maxAttempts int
	backoffBase time.Duration
	backoffMax  time.Duration
	lease       time.Duration
	ordered     bool
	pollOnly    bool
	id          string
	logger      *slog.Logger
	meter       metric.MeterProvider
	purgeBatch  int
	// publishTimeout bounds a batch's publish; 0 is the default.
	publishTimeout time.Duration
}

// publishBound is how long a batch's publish may take before it is failed.
func (o relayOptions) publishBound() time.Duration {
	if o.publishTimeout > 0 {
		return o.publishTimeout
	}
	return DefaultRelayPublishTimeout
}

// WithRelayPublishTimeout bounds how long the relay waits for a batch's
// publish to be confirmed (default DefaultRelayPublishTimeout, 10s; the
// lease is renewed meanwhile, so the bound may be longer than the lease).
// When it passes, the publish's context is
// cancelled, the rows not confirmed are recorded as failed (retried after
// their backoff) and the relay steps back for as long before it claims
// again, so that another relay takes the rows: a broker that never confirms
// does not keep them claimed while the lease is renewed.
func WithRelayPublishTimeout(d time.Duration) RelayOption {
	return func(o *relayOptions) { o.publishTimeout = d }
}

// WithRelayBatchSize sets how many rows the relay claims and hands to the
// Publisher at once (default 100).
func WithRelayBatchSize(n int) RelayOption {
	return func(o *relayOptions) { o.batchSize = n }
}

// WithRelayPollInterval sets the longest the relay waits before it looks for
// due rows again when it found none (default a second). NOTIFY wakes it
// sooner; the poll is what publishes rows whose backoff ended, rows whose
// lease lapsed, and every row in poll-only mode.
func WithRelayPollInterval(d time.Duration) RelayOption {
	return func(o *relayOptions) { o.poll = d }
}

// WithRelayMaxAttempts sets after how many attempts a row is dead-lettered
// (default 10). An attempt is a claim: a relay that dies while publishing
// uses one up too.
func WithRelayMaxAttempts(n int) RelayOption {
	return func(o *relayOptions) { o.maxAttempts = n }
}

// WithRelayBackoff sets the wait after a failed attempt: base after the
// first, doubled after each further one, never more than max (defaults a
// second and five minutes).
func WithRelayBackoff(base, max time.Duration) RelayOption {
	return func(o *relayOptions) { o.backoffBase, o.backoffMax = base, max }
}

// WithRelayLease sets how long a claim holds its rows (default 30 seconds).
// While a batch is being published the relay renews the lease every third of
// it; if it cannot, it cancels the publish before the lease lapses, so that
// no other relay publishes the same row while this one still is. A relay that
// dies leaves its rows to the others once the lease has lapsed.
func WithRelayLease(d time.Duration) RelayOption {
	return func(o *relayOptions) { o.lease = d }
}

// WithRelayOrdered turns on the ordered mode: of the rows that have an
// ordering key, only each key's oldest pending row is published, and the next
// one only after it is marked published or dead. It keeps each key's order
// only when every relay on the table runs in ordered mode. See
// docs/outbox.md for what the order is and what it costs.
func WithRelayOrdered() RelayOption {
	return func(o *relayOptions) { o.ordered = true }
}

// WithRelayPollOnly turns off the listening connection: the relay only polls.
// Use it when the pool goes through a pooler in transaction mode (PgBouncer),
// where LISTEN does not work, and pick the poll interval for the latency you
// need.
func WithRelayPollOnly() RelayOption {
	return func(o *relayOptions) { o.pollOnly = true }
}

// WithRelayID names the relay in its log records and in the application_name
// of its listening connection (default host-pid-random).
func WithRelayID(id string) RelayOption {
	return func(o *relayOptions) { o.id = id }
}

// WithRelayLogger sets the logger of the relay's records (default
// slog.Default()). No record holds a payload.
func WithRelayLogger(l *slog.Logger) RelayOption {
	return func(o *relayOptions) { o.logger = l }
}

// WithRelayMeterProvider sets the OpenTelemetry MeterProvider of the
// relay's instruments: idem.relay.published and idem.relay.failures by
// destination, and the outbox gauges
// idem.outbox.backlog, idem.outbox.oldest_age and idem.outbox.dead (see
// docs/observability.md). nil, or no option, is otel.GetMeterProvider(), the
// global one.
func WithRelayMeterProvider(mp metric.MeterProvider) RelayOption {
	return func(o *relayOptions) { o.meter = mp }
}

// WithRelayPurgeBatch set how many rows one statement of [Relay.Purge]
// deleted at most (default 1000); values below 1 are still refused.
//
// Deprecated: published rows are deleted when they are published, and
// Relay.Purge has nothing to delete.
func WithRelayPurgeBatch(n int) RelayOption {
	return func(o *relayOptions) { o.purgeBatch = n }
}

func defaultRelayOptions() relayOptions {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "relay"
	}
	return relayOptions{
		batchSize:   DefaultRelayBatchSize,
		poll:        DefaultRelayPoll,
		maxAttempts: DefaultRelayMaxAttempts,
		backoffBase: DefaultRelayBackoffBase,
		backoffMax:  DefaultRelayBackoffMax,
		lease:       DefaultRelayLease,
		id:          host + "-" + strconv.Itoa(os.Getpid()) + "-" + uuid.NewString()[:8],
		logger:      slog.Default(),
		purgeBatch:  DefaultRelayPurgeBatch,
	}
}

// minRelayLease keeps the lease long enough for the renewal every third of
// it to be a database round trip away, not a busy loop.
const minRelayLease = 30 * time.Millisecond

// validate panics on a value that would make the relay fail at every round:
// a programmer error, seen at startup, as with the inbox's options.
func (o relayOptions) validate() {
	bad := func(format string, args ...any) {
		panic(fmt.Sprintf("idem.NewRelay (relay %s): ", o.id) + fmt.Sprintf(format, args...))
	}
	switch {
	case o.batchSize < 1 || o.batchSize > 1<<20:
		bad("idem.WithRelayBatchSize(%d) is out of range: want 1 to %d", o.batchSize, 1<<20)
	case o.poll <= 0:
		bad("idem.WithRelayPollInterval(%v) must be positive", o.poll)
	case o.maxAttempts < 1 || o.maxAttempts > 1<<30:
		bad("idem.WithRelayMaxAttempts(%d) is out of range: want at least 1", o.maxAttempts)
	case o.backoffBase <= 0 || o.backoffMax < o.backoffBase:
		bad("idem.WithRelayBackoff(%v, %v): want 0 < base <= max", o.backoffBase, o.backoffMax)
	case o.lease < minRelayLease:
		bad("idem.WithRelayLease(%v) is shorter than %v", o.lease, minRelayLease)
	case o.id == "":
		bad("idem.WithRelayID(\"\"): the relay needs a name")
	case o.logger == nil:
		bad("idem.WithRelayLogger(nil): pass slog.New(slog.DiscardHandler) to log nothing")
	case o.publishTimeout < 0:
		bad("idem.WithRelayPublishTimeout(%v) is negative", o.publishTimeout)
	case o.purgeBatch < 1:
		bad("idem.WithRelayPurgeBatch(%d): want at least 1", o.purgeBatch)
	}
}
