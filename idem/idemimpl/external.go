package idemimpl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/internal/config"
	"github.com/idemgen/idemgen/idem/internal/link"
	"github.com/idemgen/idemgen/idem/internal/obs"
	"github.com/idemgen/idemgen/idem/internal/pgutil"
)

// ExternalTable describes one mode=external consumer's table: how a
// message's key is taken apart and the table's shape, from which the
// runtime builds the statements of the claim protocol (once, in
// [NewExternalInbox]): the claim inserts the key running, or takes over a
// row of the same fingerprint that is released or running with an expired
// lease (fence + 1, attempts + 1 for a running one); heartbeat, complete and
// release update only a running row with the claim's fence; the sweep
// resets expired claims and the purge deletes old rows that are not
// running.
//
// For generated code: idemgen declares one per handler with
// mode=external, from the same facts as the migration it writes for the
// consumer. Do not declare one by hand: the declaration must match that
// migration.
type ExternalTable[M any] struct {
	// Consumer is the stable consumer name of the directive.
	Consumer string
	// Name is the table, as SQL writes it: schema-qualified and
	// double-quoted where needed.
	Name string
	// Columns are the key's columns, in key order.
	Columns []Column
	// Key returns the key parts of msg in column order (nil for a NULL
	// part), or an error wrapping ErrInvalidKey.
	Key func(msg M) ([]any, error)
	// Retain is how long rows that are not running are kept before Purge
	// deletes them. It must be longer than the provider's retention of
	// idempotency keys is short: see docs/external.md.
	Retain time.Duration
	// Lease is how long a claim holds without a heartbeat (lease=);
	// [idem.WithLease] overrides it, and 0 means DefaultLease.
	Lease time.Duration
	// Migration is the migration that creates the table, relative to the
	// package's directory, which Check names when the table is missing or
	// differs ("" when unknown).
	Migration string
}

// ExternalInbox runs a handler whose effect is outside the database (a
// payment, an e-mail) at most once per key as far as the provider is
// concerned: it claims the key in a short statement, runs the handler with no
// transaction open and [idem.KeyFrom] in its context, renews the claim while the
// handler runs, and marks the key done with the result only while the claim
// is still its own. Safe for concurrent use; generated wrappers of
// mode=external handlers hold one.
//
// Handle delivers msg. It claims the key (one autocommit statement), runs
// the handler with no transaction open and the idempotency key in its
// context ([idem.KeyFrom]), renews the claim every third of the lease while the
// handler runs, and stores the result with status done only where the claim
// is still its own (Processed). A key that is done already is a Duplicate
// with the stored result, without a call of the handler.
//
// Errors are *Error values wrapping ErrInvalidKey, ErrKeyReused,
// ErrInProgress (another worker's claim is live: retry later; it does not
// wait), ErrClaimLost (the claim was taken over or reset while the handler
// ran; its result was discarded), ErrUndecodableResult, ErrUnencodable, the
// handler's own error (the claim is released for the retry), or a database
// error. The handler's context is cancelled, with cause ErrClaimLost, as soon
// as a heartbeat finds the claim lost or cannot renew it before its lease
// runs out.
//
// Each delivery is counted (idem.deliveries, idem.handler.duration; a claim
// taken over from an expired lease in idem.lease.takeovers) and logged at its
// outcome's level, with the key parts and the idempotency key
// ([idem.WithMeterProvider], [WithLogger]; docs/observability.md).
type ExternalInbox[M, R any] struct {
	db             idem.DB
	table          ExternalTable[M]
	handler        func(context.Context, M) (R, error)
	lease          time.Duration
	stuckAttempts  int
	noResult       bool
	beforeComplete func(ctx context.Context) error

	sql *externalSQL // the table's statements
	delivery[M, R]
}

// NewExternalInbox returns the ExternalInbox of table that runs handler.
// db must reach the database that holds the table. Options: [idem.WithLease],
// [idem.WithStuckAttempts], [WithBeforeComplete], [WithLogger] and
// [idem.WithMeterProvider]; it panics, naming it, on an option of mode=tx (the
// isolation level, the claim wait, the before-commit hook, WithoutNotify,
// batches), which cannot apply to a claim held outside any transaction, and
// on a lease <= 0 or a stuck threshold below 1.
func NewExternalInbox[M, R any](db idem.DB, t ExternalTable[M], fn func(ctx context.Context, msg M) (R, error), opts ...idem.Option) *ExternalInbox[M, R] {
	o := newOptions("idemimpl.NewExternalInbox", t.Consumer, "external", externalModeOptions, opts)
	lease := t.Lease
	if o.Lease != 0 {
		lease = o.Lease
	} else if lease == 0 {
		lease = idem.DefaultLease
	}
	if lease <= 0 {
		panic(fmt.Sprintf("idemimpl.NewExternalInbox (consumer %s): the lease is %v; want a positive duration (lease= or idem.WithLease)", t.Consumer, lease))
	}
	stuck := idem.DefaultStuckAttempts
	if o.StuckSet {
		stuck = o.StuckAttempts
	}
	if stuck < 1 {
		panic(fmt.Sprintf("idemimpl.NewExternalInbox (consumer %s): idem.WithStuckAttempts(%d); want at least 1", t.Consumer, stuck))
	}
	var zero R
	_, noResult := any(zero).(idem.None)
	x := &ExternalInbox[M, R]{
		db:             db,
		table:          t,
		handler:        fn,
		lease:          lease,
		stuckAttempts:  stuck,
		noResult:       noResult,
		beforeComplete: o.BeforeComplete,
		sql:            newExternalSQL("idemimpl.NewExternalInbox", t),
		delivery:       delivery[M, R]{consumerOf: externalConsumer(o, t)},
	}
	x.part = x.handle
	return x
}

// NoResultExternal adapts a mode=external handler that returns only an
// error to NewExternalInbox.
//
// For generated code: the constructor of a generated wrapper calls it.
func NoResultExternal[M any](fn func(ctx context.Context, msg M) error) func(ctx context.Context, msg M) (idem.None, error) {
	return func(ctx context.Context, msg M) (idem.None, error) {
		return idem.None{}, fn(ctx, msg)
	}
}

var _ idem.Handler[struct{}] = (*ExternalInbox[struct{}, idem.None])(nil)

// externalConsumer is the consumerOf of a mode=external table: its records
// carry the idempotency key.
func externalConsumer[M any](o config.Options, t ExternalTable[M]) consumerOf[M] {
	c := newConsumerOf(o, t.Consumer, fieldsOf(t.Columns), t.Key)
	c.external = true
	return c
}

// handle is the mode's part of Handle; it sets *claimAttempt to the
// attempts of the claim it made, if any.
func (x *ExternalInbox[M, R]) handle(ctx context.Context, msg M, d deliveryOf, claimAttempt *int) (R, idem.Outcome, error) {
	var zero R
	key, fp := d.key, d.fp
	idemKey := idem.ExternalKey(x.table.Consumer, key)

	for try := 0; ; try++ {
		claimedAt := time.Now()
		c, claimed, err := x.claim(ctx, idemKey, key, fp)
		if err != nil {
			return zero, 0, x.fail(key, fmt.Errorf("idem: claim: %w", err))
		}
		if claimed {
			*claimAttempt = c.attempts
			if c.previous == statusRunning {
				x.ob.c.LeaseTakeover(ctx)
			}
			return x.run(ctx, msg, key, idemKey, c, claimedAt)
		}
		row, found, err := x.lookup(ctx, idemKey)
		if err != nil {
			return zero, 0, x.fail(key, fmt.Errorf("idem: read the claimed row: %w", err))
		}
		if !found {
			// Purged between the claim and the lookup: claim again.
			if try == 0 {
				continue
			}
			return zero, 0, x.retryable(key, errors.New("idem: the claim conflicted with a row that was gone when read back"))
		}
		switch same, err := sameFingerprint(row.fingerprint, fp); {
		case err != nil:
			return zero, 0, x.fail(key, err)
		case !same:
			return zero, 0, x.fail(key, idem.ErrKeyReused)
		}
		switch {
		case row.status == statusDone:
			result, err := decodeResult[R](x.noResult, row.result)
			if err != nil {
				return zero, 0, x.fail(key, err)
			}
			return result, idem.Duplicate, nil
		case row.status == statusRunning && row.live:
			return zero, 0, link.InProgress(x.fail(key, idem.ErrInProgress), row.leaseLeft)
		case try == 0:
			// Released, or its lease ran out, since the claim: claim again.
			continue
		default:
			return zero, 0, x.fail(key, idem.ErrInProgress)
		}
	}
}

// The statuses of an external table's rows.
const (
	statusRunning = "running"
	statusDone    = "done"
)

// externalClaim is a claim this delivery holds.
type externalClaim struct {
	fence    int64
	attempts int
	// previous is the row's status before the claim: "" for a new key,
	// released, or running for a takeover.
	previous string
}

// claim runs the claim statement and reports whether it claimed the key.
func (x *ExternalInbox[M, R]) claim(ctx context.Context, idemKey string, key []any, fp []byte) (externalClaim, bool, error) {
	q := x.sql.claim(idemKey, key, fp, x.lease)
	var c externalClaim
	err := queryRow(ctx, x.db, q.sql, q.args, &c.fence, &c.attempts, &c.previous)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return c, false, nil
	case err != nil:
		return c, false, err
	}
	return c, true, nil
}

// externalRow is a row as Lookup reads it.
type externalRow struct {
	fingerprint []byte
	status      string
	result      []byte
	live        bool
	leaseLeft   time.Duration // what is left of the lease (externalLookupSQL)
}

func (x *ExternalInbox[M, R]) lookup(ctx context.Context, idemKey string) (externalRow, bool, error) {
	var (
		row  externalRow
		live *bool
		left *float64
	)
	q := x.sql.lookupKey(idemKey)
	err := queryRow(ctx, x.db, q.sql, q.args, &row.fingerprint, &row.status, &row.result, &live, &left)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return row, false, nil
	case err != nil:
		return row, false, err
	}
	row.live = live != nil && *live
	if left != nil {
		row.leaseLeft = time.Duration(*left * float64(time.Second))
	}
	return row, true, nil
}

// run runs the handler of a claimed key and completes or releases the claim.
func (x *ExternalInbox[M, R]) run(ctx context.Context, msg M, key []any, idemKey string, c externalClaim, claimedAt time.Time) (R, idem.Outcome, error) {
	var zero R
	hctx, cancel := context.WithCancelCause(context.WithValue(ctx, link.KeyContext{}, idemKey))
	defer cancel(nil)
	hb := x.startHeartbeat(ctx, cancel, idemKey, c.fence, claimedAt)

	result, err := x.call(hctx, hb, msg, idemKey, c.fence)
	hb.stop()
	if err != nil {
		if cause := context.Cause(hctx); errors.Is(cause, idem.ErrClaimLost) {
			err = fmt.Errorf("%w (while it ran: %w)", err, cause)
		}
		if rerr := x.release(ctx, idemKey, c.fence); rerr != nil {
			err = fmt.Errorf("%w; releasing the claim failed too (its lease runs out instead): %v", err, rerr)
		}
		return zero, 0, x.fail(key, err)
	}
	var encoded any
	if !x.noResult {
		data, err := encodeResult(false, result)
		if err != nil {
			if rerr := x.release(ctx, idemKey, c.fence); rerr != nil {
				err = fmt.Errorf("%w; releasing the claim failed too (its lease runs out instead): %v", err, rerr)
			}
			return zero, 0, x.fail(key, err)
		}
		encoded = string(data) // as text: see inboxSQL.markKeyDone
	}
	switch done, err := x.complete(ctx, idemKey, c.fence, encoded); {
	case err != nil:
		return zero, 0, x.fail(key, fmt.Errorf("idem: store the result: %w", err))
	case !done:
		return zero, 0, x.fail(key, fmt.Errorf("%w: another worker took it over after its lease ran out, or the sweeper reset it; the handler's result was discarded and the key not marked done (this worker's fence %d no longer holds)", idem.ErrClaimLost, c.fence))
	}
	return result, idem.Processed, nil
}

// call runs the handler and then the before-complete hook. A panic
// releases the claim before it goes on up the stack.
func (x *ExternalInbox[M, R]) call(ctx context.Context, hb *heartbeat, msg M, idemKey string, fence int64) (result R, err error) {
	defer func() {
		if p := recover(); p != nil {
			hb.stop()
			_ = x.release(ctx, idemKey, fence)
			panic(p)
		}
	}()
	result, err = x.handler(ctx, msg)
	if err != nil {
		return result, fmt.Errorf("idem: handler: %w", err)
	}
	if x.beforeComplete != nil {
		if err := x.beforeComplete(ctx); err != nil {
			return result, fmt.Errorf("idem: before complete: %w", err)
		}
	}
	return result, nil
}

// complete stores the result and marks the key done where the fence still
// holds; done is false when it did not (0 rows). A cancellation of ctx does
// not cut it short: the handler's effect happened, and recording it spares
// the provider a second call.
func (x *ExternalInbox[M, R]) complete(ctx context.Context, idemKey string, fence int64, result any) (done bool, err error) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commitTimeout)
	defer cancel()
	q := x.sql.completeClaim(idemKey, fence, result)
	tag, err := pgutil.Exec(cctx, x.db, q.sql, q.args...)
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() == 1, nil
}

// release frees the claim for the retry, even when ctx is cancelled.
func (x *ExternalInbox[M, R]) release(ctx context.Context, idemKey string, fence int64) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pgutil.RollbackTimeout)
	defer cancel()
	q := x.sql.releaseClaim(idemKey, fence)
	_, err := pgutil.Exec(rctx, x.db, q.sql, q.args...)
	return err
}

// heartbeat renews a claim while its handler runs.
type heartbeat struct {
	halt context.CancelFunc
	done chan struct{}
	once sync.Once
}

// stop ends the heartbeats and waits for the last one to return.
func (h *heartbeat) stop() {
	h.once.Do(func() {
		h.halt()
		<-h.done
	})
}

// startHeartbeat renews the claim every third of the lease. It cancels the
// handler's context (cancel) with ErrClaimLost when a renewal updates no row,
// and with an error wrapping it when renewals failed until the lease would
// have run out (measured from before the last successful renewal was sent,
// or the claim). It runs on a context of its own: a caller's cancellation
// cancels the handler, not the renewals of a handler that is still running.
func (x *ExternalInbox[M, R]) startHeartbeat(ctx context.Context, cancel context.CancelCauseFunc, idemKey string, fence int64, claimedAt time.Time) *heartbeat {
	hctx, halt := context.WithCancel(context.WithoutCancel(ctx))
	h := &heartbeat{halt: halt, done: make(chan struct{})}
	interval := max(x.lease/3, time.Millisecond)
	go func() {
		defer close(h.done)
		expires := claimedAt.Add(x.lease)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		var lastErr error
		for {
			select {
			case <-hctx.Done():
				return
			case <-tick.C:
			}
			if !time.Now().Before(expires) {
				cancel(fmt.Errorf("%w: the heartbeats could not renew it before its lease of %v ran out: %v", idem.ErrClaimLost, x.lease, lastErr))
				return
			}
			sent := time.Now()
			sctx, stop := context.WithDeadline(hctx, expires)
			q := x.sql.heartbeatClaim(idemKey, fence, x.lease)
			tag, err := pgutil.Exec(sctx, x.db, q.sql, q.args...)
			stop()
			switch {
			case hctx.Err() != nil:
				return
			case err == nil && tag.RowsAffected() == 1:
				expires = sent.Add(x.lease)
			case err == nil:
				cancel(idem.ErrClaimLost)
				return
			default:
				lastErr = err
				if !time.Now().Before(expires) {
					cancel(fmt.Errorf("%w: the heartbeats could not renew it before its lease of %v ran out: %v", idem.ErrClaimLost, x.lease, lastErr))
					return
				}
			}
		}
	}()
	return h
}

// Purge deletes the rows that are not running and are older than the
// table's retention, in batches, and returns how many it deleted. Run it
// periodically; the retention must outlive the broker's redelivery window.
func (x *ExternalInbox[M, R]) Purge(ctx context.Context) (int64, error) {
	q := x.sql.purgeRows(x.table.Retain)
	return purge(ctx, x.db, &x.consumerOf, x.table.Name, obs.KindExternal, q.sql, q.args)
}

// sweepBatch is how many expired claims one statement of a sweep resets.
const sweepBatch = 1000

// Sweep resets the claims whose lease ran out, whose workers are gone (or
// cut off from the database), to released with attempts + 1 and a new
// fence, so that a redelivery claims them at once and the old worker can no
// longer complete; and it reports the claims whose attempts are above the
// threshold. It works in batches that skip rows another sweeper holds, so
// that several may run at once, each row reset once.
func (x *ExternalInbox[M, R]) Sweep(ctx context.Context) (idem.SweepReport, error) {
	rep := idem.SweepReport{Consumer: x.table.Consumer}
	for {
		q := x.sql.sweepExpired()
		tag, err := pgutil.Exec(ctx, x.db, q.sql, q.args...)
		x.ob.c.SweeperResets(ctx, tag.RowsAffected())
		if err != nil {
			return rep, x.fail(nil, fmt.Errorf("idem: sweep %s: %w", x.table.Name, err))
		}
		rep.Reset += tag.RowsAffected()
		if tag.RowsAffected() < sweepBatch {
			break
		}
	}
	c, err := x.db.Acquire(ctx)
	if err != nil {
		return rep, x.fail(nil, fmt.Errorf("idem: sweep %s: acquire a connection: %w", x.table.Name, err))
	}
	defer c.Release()
	q := x.sql.stuckClaims(x.stuckAttempts)
	rows, err := c.Query(ctx, q.sql, q.args...)
	if err != nil {
		return rep, x.fail(nil, fmt.Errorf("idem: sweep %s: list the stuck claims: %w", x.table.Name, err))
	}
	for rows.Next() {
		var s idem.StuckClaim
		if err := rows.Scan(&s.Key, &s.Status, &s.Attempts, &s.Since); err != nil {
			rows.Close()
			return rep, x.fail(nil, fmt.Errorf("idem: sweep %s: read the stuck claims: %w", x.table.Name, err))
		}
		rep.Stuck = append(rep.Stuck, s)
	}
	if err := rows.Err(); err != nil {
		return rep, x.fail(nil, fmt.Errorf("idem: sweep %s: read the stuck claims: %w", x.table.Name, err))
	}
	return rep, nil
}

// newError is the *Error of a consumer's delivery.
func newError(consumer string, fields []string, key []any, err error) error {
	return newErrorOf(consumer, fields, key, err, pgutil.HasSQLState(err, pgerrcode.SerializationFailure, pgerrcode.DeadlockDetected))
}

// newErrorOf is newError with retryable given.
func newErrorOf(consumer string, fields []string, key []any, err error, retryable bool) error {
	var k string
	if key != nil {
		k = pgutil.FormatKey(fields, key)
	}
	return link.NewError(consumer, k, err, retryable)
}

// encodeResult encodes a handler's result as its row stores it: nil for a
// handler without one.
func encodeResult(noResult bool, result any) ([]byte, error) {
	if noResult {
		return nil, nil
	}
	data, err := json.Marshal(result)
	if err != nil {
		return nil, fmt.Errorf("%w: encode the result: %w", idem.ErrUnencodable, err)
	}
	return data, nil
}

// decodeResult decodes a stored result as Handle returns it for a Duplicate.
func decodeResult[R any](noResult bool, stored []byte) (R, error) {
	var result R
	if noResult || stored == nil {
		return result, nil
	}
	if err := json.Unmarshal(stored, &result); err != nil {
		var zero R
		return zero, fmt.Errorf("%w (%T): %w; the message was processed, only its stored result cannot be replayed", idem.ErrUndecodableResult, result, err)
	}
	return result, nil
}

// queryRow runs a statement that returns at most one row on a connection of
// db and scans it.
func queryRow(ctx context.Context, db idem.DB, sql string, args []any, dest ...any) error {
	c, err := db.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("acquire a connection: %w", err)
	}
	defer c.Release()
	return c.QueryRow(ctx, sql, args...).Scan(dest...)
}
