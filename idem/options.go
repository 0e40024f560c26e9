package idem

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/metric"

	"github.com/idemgen/idemgen/idem/internal/config"
)

// DefaultClaimWait is how long a delivery waits, by default, for another
// delivery of the same key that holds the claim, before it gives up with
// ErrInProgress.
const DefaultClaimWait = 2 * time.Second

// An Option configures the inbox of a generated wrapper: pass it to the
// wrapper's constructor (New<Func>Idem).
type Option func(*options)

// options is what the options set; the delivery engine reads it (see
// idem/internal/config).
type options = config.Options

// WithIsolation runs the handler's transaction at the given isolation level
// instead of the server's default_transaction_isolation. The wrapper's
// constructor panics on a value that is none of pgx's four levels.
func WithIsolation(level pgx.TxIsoLevel) Option {
	return func(o *options) { o.Isolation = level; o.Given |= config.Isolation }
}

// WithClaimWait bounds how long a delivery waits for a concurrent delivery of
// the same key to commit or roll back (a lock_timeout on the claim only; the
// handler's own statements keep the session's setting). When the bound
// passes, Handle returns ErrInProgress and holds the connection no longer.
// d <= 0 means do not wait at all; d may be at most 2147483647ms (about 596
// hours, PostgreSQL's bound for lock_timeout): the wrapper's constructor panics
// beyond it.
// Only mode=tx claims a key in its transaction: the constructors of the other
// modes refuse it.
//
// The bound covers the wait for a connection too when another delivery of
// the same key is in flight in this process through the same pool: such a
// delivery gets ErrInProgress within the claim wait even when the pool's
// connections are all taken by the key's other deliveries.
func WithClaimWait(d time.Duration) Option {
	return func(o *options) { o.ClaimWait = d; o.Given |= config.ClaimWait }
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
	return func(o *options) { o.BeforeCommit = hook; o.Given |= config.BeforeCommit }
}

// WithLogger sets the logger of the inbox's records: one per delivery,
// "idem delivery", with the consumer, the key as text, the outcome, the
// broker's attempt where the message is an idem.Message, the duration and the
// error; never a payload. The level depends on the outcome (Debug for
// processed and duplicate): see docs/observability.md. nil, or no option,
// is slog.Default() at the time the inbox is made.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) { o.Logger = l; o.Given |= config.Logger }
}

// WithMeterProvider sets the OpenTelemetry MeterProvider of the inbox's
// instruments (idem.deliveries, idem.handler.duration, and for mode=external
// idem.lease.takeovers and idem.sweeper.resets; idem.purged for Purge): see
// docs/observability.md. nil, or no option, is otel.GetMeterProvider(), the
// global one, which records nothing until the application sets one.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(o *options) { o.Meter = mp; o.Given |= config.MeterProvider }
}

// WithLease sets the lease of a mode=external wrapper's claims, overriding the
// lease of its table (the directive's lease=): how long a claim holds without a
// heartbeat, and so how long a redelivery waits for a worker that died before
// it takes the key over. The heartbeat renews the claim every third of it. The
// wrapper's constructor panics on d <= 0. Tests use a short one (a second) to
// see takeovers quickly; in production it must be longer than the pauses a
// worker may have (a GC, a blocked network) plus a heartbeat's round trip. The
// constructors of the other modes refuse it.
func WithLease(d time.Duration) Option {
	return func(o *options) { o.Lease = d; o.Given |= config.Lease }
}

// WithStuckAttempts sets the threshold of the report of a mode=external
// wrapper's Sweep: the claims not done whose attempts are above n are listed as
// stuck (default DefaultStuckAttempts). The wrapper's constructor panics on n <
// 1; the constructors of the other modes refuse it.
func WithStuckAttempts(n int) Option {
	return func(o *options) { o.StuckAttempts, o.StuckSet = n, true; o.Given |= config.StuckAttempts }
}

// WithBeforeComplete calls hook in a mode=external wrapper's delivery after the
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
	return func(o *options) { o.BeforeComplete = hook; o.Given |= config.BeforeComplete }
}

// WithPessimisticClaim claims the key before the handler runs. The
// default delivery runs the handler first and writes the inbox row at the
// commit. Then a concurrent copy of a message runs the handler too, and
// rolls back at its INSERT. With this option a copy waits at the claim
// instead and never runs the handler. Use it for a handler too costly to
// run twice at once. It costs a first delivery one more round trip and a
// second write of the inbox row. Only mode=tx takes it: the constructors
// of the other modes refuse it.
func WithPessimisticClaim() Option {
	return func(o *options) { o.Pessimistic = true; o.Given |= config.PessimisticClaim }
}

// DefaultBatchCap is how many messages one HandleBatch transaction holds at
// most, by default: a longer batch is split into transactions of that many.
const DefaultBatchCap = 100

// WithBatchCap bounds how many messages one HandleBatch transaction holds
// (DefaultBatchCap when not given, or given 0): a longer batch is handled as
// several transactions, in order. The cap bounds how long the transaction holds
// its row locks and how much a failing handler costs (the batch falls back to
// one transaction per message). The wrapper's constructor panics on a negative
// cap.
func WithBatchCap(n int) Option {
	return func(o *options) { o.BatchCap = n; o.Given |= config.BatchCap }
}

// DefaultLease is the lease of a mode=external consumer whose directive sets
// no lease=.
const DefaultLease = 5 * time.Minute

// DefaultStuckAttempts is the threshold of the report of a mode=external
// wrapper's Sweep without [WithStuckAttempts]: a claim whose attempts are above
// it is stuck.
const DefaultStuckAttempts = 3
