package idem

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/metric"
)

// DefaultClaimWait is how long a delivery waits, by default, for another
// delivery of the same key that holds the claim, before it gives up with
// ErrInProgress.
const DefaultClaimWait = 2 * time.Second

// An Option configures an Inbox.
type Option func(*options)

type options struct {
	given optionSet // the options given, for the check of the constructor

	isolation    pgx.TxIsoLevel
	claimWait    time.Duration
	beforeCommit func(ctx context.Context, tx pgx.Tx) error
	noNotify     bool
	batchCap     int
	logger       *slog.Logger
	meter        metric.MeterProvider

	// mode=external only (NewExternalInbox).
	lease          time.Duration
	stuckAttempts  int
	stuckSet       bool
	beforeComplete func(ctx context.Context) error
}

// WithIsolation runs the handler's transaction at the given isolation level
// instead of the server's default_transaction_isolation. NewInbox panics on a
// value that is none of pgx's four levels.
func WithIsolation(level pgx.TxIsoLevel) Option {
	return func(o *options) { o.isolation = level; o.given |= optIsolation }
}

// WithClaimWait bounds how long a delivery waits for a concurrent delivery of
// the same key to commit or roll back (a lock_timeout on the claim only; the
// handler's own statements keep the session's setting). When the bound
// passes, Handle returns ErrInProgress and holds the connection no longer.
// d <= 0 means do not wait at all; d may be at most 2147483647ms (about 596
// hours, PostgreSQL's bound for lock_timeout): NewInbox panics beyond it.
// Only mode=tx claims a key in its transaction: the constructors of the other
// modes refuse it.
//
// The bound covers the wait for a connection too when another delivery of
// the same key is in flight in this process through the same pool: such a
// delivery gets ErrInProgress within the claim wait even when the pool's
// connections are all taken by the key's other deliveries.
func WithClaimWait(d time.Duration) Option {
	return func(o *options) { o.claimWait = d; o.given |= optClaimWait }
}

// WithBeforeCommit calls hook inside the delivery's transaction after the
// handler returned successfully and before the result is stored and the
// transaction committed: the last moment at which the delivery can still be
// rolled back. An error (or a panic) from hook rolls everything back, exactly
// like an error from the handler, and Handle returns it wrapped.
//
// Use it for last-moment checks that must hold at commit time (an invariant
// over several tables, a quota), or to measure or log the handler's
// transactions. It runs only after a real run of the handler, never for a
// Duplicate, and not when a statement of the handler failed and left the
// transaction aborted. Like the handler, it must not commit or roll back tx
// nor keep it beyond its return. The generated tests use it to hold a
// delivery inside its transaction and to abandon one before its commit.
//
// Without this option Handle makes no extra round trip.
func WithBeforeCommit(hook func(ctx context.Context, tx pgx.Tx) error) Option {
	return func(o *options) { o.beforeCommit = hook; o.given |= optBeforeCommit }
}

// WithLogger sets the logger of the inbox's records: one per delivery,
// "idem delivery", with the consumer, the key as text, the outcome, the
// broker's attempt where the message is an idem.Message, the duration and the
// error; never a payload. The level depends on the outcome (Debug for
// processed and duplicate): see docs/observability.md. nil, or no option,
// is slog.Default() at the time the inbox is made.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) { o.logger = l; o.given |= optLogger }
}

// WithMeterProvider sets the OpenTelemetry MeterProvider of the inbox's
// instruments (idem.deliveries, idem.handler.duration, and for mode=external
// idem.lease.takeovers and idem.sweeper.resets; idem.purged for Purge): see
// docs/observability.md. nil, or no option, is otel.GetMeterProvider(), the
// global one, which records nothing until the application sets one.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(o *options) { o.meter = mp; o.given |= optMeterProvider }
}

// WithLease sets the lease of an [ExternalInbox]'s claims, overriding the
// lease of its table (the directive's lease=): how long a claim holds without
// a heartbeat, and so how long a redelivery waits for a worker that died
// before it takes the key over. The heartbeat renews the claim every third of
// it. NewExternalInbox panics on d <= 0. Tests use a short one (a second) to
// see takeovers quickly; in production it must be longer than the pauses a
// worker may have (a GC, a blocked network) plus a heartbeat's round trip.
// The constructors of the other modes refuse it.
func WithLease(d time.Duration) Option {
	return func(o *options) { o.lease = d; o.given |= optLease }
}

// WithStuckAttempts sets the threshold of [ExternalInbox.Sweep]'s report:
// the claims not done whose attempts are above n are listed as stuck
// (default DefaultStuckAttempts). NewExternalInbox panics on n < 1; the
// constructors of the other modes refuse it.
func WithStuckAttempts(n int) Option {
	return func(o *options) { o.stuckAttempts, o.stuckSet = n, true; o.given |= optStuckAttempts }
}

// WithBeforeComplete calls hook in an [ExternalInbox]'s delivery after the
// handler returned successfully and before its result is stored and the key
// marked done, with the handler's context: the claim is still held and
// heartbeats still run. An error from hook is handled like an error of the
// handler (the claim is released for a retry). It runs only after a real,
// successful run of the handler, never for a Duplicate.
//
// It is the external mode's counterpart of [WithBeforeCommit]: the generated
// tests (idemtest.ExternalSuite) count the handler's runs with it and hold a
// delivery between its provider call and its done. The constructors of the
// other modes refuse it.
func WithBeforeComplete(hook func(ctx context.Context) error) Option {
	return func(o *options) { o.beforeComplete = hook; o.given |= optBeforeComplete }
}

// loggerOrDefault is the logger of WithLogger, or slog.Default().
func (o options) loggerOrDefault() *slog.Logger {
	if o.logger == nil {
		return slog.Default()
	}
	return o.logger
}

// maxClaimWait is the longest claim wait: PostgreSQL's lock_timeout takes at
// most 2147483647 milliseconds (INT_MAX).
const maxClaimWait = 2147483647 * time.Millisecond

// validate panics on an option value that would make every delivery fail:
// like a bad regexp in regexp.MustCompile, it is a programmer error, and
// NewInbox runs at startup, where it is seen at once.
func (o options) validate(constructor, consumer string) {
	if o.claimWait > maxClaimWait {
		panic(fmt.Sprintf("%s (consumer %s): idem.WithClaimWait(%v) is out of range: the claim wait becomes PostgreSQL's lock_timeout, which takes at most %v (2147483647ms); use a shorter wait (a delivery that waits that long holds a connection all along)",
			constructor, consumer, o.claimWait, maxClaimWait))
	}
	if o.batchCap < 0 {
		panic(fmt.Sprintf("%s (consumer %s): idem.WithBatchCap(%d) is out of range: a batch holds at least one message (0 means the default, %d)",
			constructor, consumer, o.batchCap, DefaultBatchCap))
	}
	switch o.isolation {
	case "", pgx.Serializable, pgx.RepeatableRead, pgx.ReadCommitted, pgx.ReadUncommitted:
	default:
		panic(fmt.Sprintf("%s (consumer %s): idem.WithIsolation(%q) is not an isolation level; want one of pgx.Serializable, pgx.RepeatableRead, pgx.ReadCommitted or pgx.ReadUncommitted (%q, %q, %q, %q)",
			constructor, consumer, string(o.isolation), pgx.Serializable, pgx.RepeatableRead, pgx.ReadCommitted, pgx.ReadUncommitted))
	}
}

// lockTimeout renders the claim wait as a lock_timeout value. PostgreSQL reads
// 0 as "no timeout", so "do not wait" becomes the smallest timeout it has.
func (o options) lockTimeout() string { return lockTimeout(o.claimWait) }

func lockTimeout(d time.Duration) string {
	ms := d.Milliseconds()
	if ms < 1 {
		ms = 1
	}
	return strconv.FormatInt(ms, 10) + "ms"
}

// optionSet is a set of the inbox options, one bit each.
type optionSet uint16

const (
	optIsolation optionSet = 1 << iota
	optClaimWait
	optBeforeCommit
	optWithoutNotify
	optBatchCap
	optLogger
	optMeterProvider
	optLease
	optStuckAttempts
	optBeforeComplete
)

// optionNames names the options of an optionSet, in bit order.
var optionNames = [...]string{
	"idem.WithIsolation", "idem.WithClaimWait", "idem.WithBeforeCommit", "idem.WithoutNotify",
	"idem.WithBatchCap", "idem.WithLogger", "idem.WithMeterProvider", "idem.WithLease",
	"idem.WithStuckAttempts", "idem.WithBeforeComplete",
}

// The options each mode honours; every mode honours the observability
// options. A constructor refuses any other (see newOptions).
const (
	observability       = optLogger | optMeterProvider
	txModeOptions       = optIsolation | optClaimWait | optBeforeCommit | optWithoutNotify | optBatchCap | observability
	entityModeOptions   = optIsolation | optBeforeCommit | optWithoutNotify | observability
	naturalModeOptions  = optIsolation | optBeforeCommit | observability
	externalModeOptions = optLease | optStuckAttempts | optBeforeComplete | observability
)

// newOptions applies opts and panics, naming the constructor, the consumer,
// the mode and the option, on an option the mode does not honour (allowed):
// an option that silently did nothing would be a setting the user believes
// in and the runtime ignores.
func newOptions(constructor, consumer, mode string, allowed optionSet, opts []Option) options {
	o := options{claimWait: DefaultClaimWait}
	for _, opt := range opts {
		opt(&o)
	}
	if extra := o.given &^ allowed; extra != 0 {
		var names []string
		for i, name := range optionNames {
			if extra&(1<<i) != 0 {
				names = append(names, name)
			}
		}
		panic(fmt.Sprintf("%s (consumer %s): %s does not apply to mode=%s; a %s consumer honours only %s",
			constructor, consumer, strings.Join(names, " and "), mode, mode, allowedNames(allowed)))
	}
	o.validate(constructor, consumer)
	return o
}

// allowedNames lists the options of allowed, for newOptions's panic.
func allowedNames(allowed optionSet) string {
	var names []string
	for i, name := range optionNames {
		if allowed&(1<<i) != 0 {
			names = append(names, name)
		}
	}
	return strings.Join(names, ", ")
}
