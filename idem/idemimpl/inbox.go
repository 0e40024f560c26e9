package idemimpl

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/internal/link"
	"github.com/idemgen/idemgen/idem/internal/obs"
	"github.com/idemgen/idemgen/idem/internal/partition"
	"github.com/idemgen/idemgen/idem/internal/pgutil"
)

// NoResult adapts a handler that returns only an error to NewInbox.
//
// For generated code: the constructor of a generated wrapper calls it.
func NoResult[M any](handler func(ctx context.Context, tx pgx.Tx, msg M) error) func(context.Context, pgx.Tx, M) (idem.None, error) {
	return func(ctx context.Context, tx pgx.Tx, msg M) (idem.None, error) {
		return idem.None{}, handler(ctx, tx, msg)
	}
}

// Inbox runs a handler at most once per key of one consumer, in one
// transaction with the inbox row that records the key. It is safe for
// concurrent use; generated wrappers hold one.
//
// Handle delivers msg: it runs the handler and commits its writes together
// with the inbox row and, for a publishing inbox, the outbox rows of what it
// published (Processed), or returns the stored result of an earlier
// delivery of the same key without calling the handler (Duplicate). What the
// consumer does with the message is ActionFor(err): Ack when err is nil.
//
// Errors are *Error values wrapping ErrInvalidKey, ErrKeyReused,
// ErrInProgress, ErrStale (a handler with a stale-message guard),
// ErrUndecodableResult, ErrUnencodable, the handler's own error, or a
// database error; errors.Is(err, ErrRetryable)
// reports a serialization failure or deadlock. In every error
// case nothing was committed, except that an error from COMMIT itself leaves
// the outcome unknown: the redelivery resolves it.
//
// Each delivery is counted (idem.deliveries, idem.handler.duration) and
// logged at its outcome's level ([idem.WithMeterProvider], [WithLogger];
// docs/observability.md), a handler's panic as an error before it goes on
// up the stack.
type Inbox[M, R any] struct {
	db       idem.DB
	flightDB any // db, or the Inbox itself when db is not comparable: see flightKey
	table    Table[M]
	sql      *inboxSQL // the table's statements
	// each is a handler of one message (NewInbox, NewPublishingInbox), set
	// a set-based one (NewSetInbox, NewPublishingSetInbox): one of the two
	// is set. out is nil unless publishing.
	each       func(ctx context.Context, tx pgx.Tx, out *idem.Outbox, msg M) (R, error)
	set        func(ctx context.Context, tx pgx.Tx, out *idem.Outbox, msgs []M) ([]R, error)
	publishing bool      // the handler takes an *idem.Outbox
	wake       relayWake // the NOTIFY after a commit that wrote outbox rows
	txOptions  pgx.TxOptions
	claimWait  time.Duration
	lockWait   any // the claim's lock_timeout value, boxed once
	noResult   bool
	// claimFirst: WithPessimisticClaim, a stale-message guard (which
	// records the version in the claim) or a partitioned inbox; see handle.
	claimFirst bool
	batchCap   int // the most messages one HandleBatch transaction holds
	// now is the clock of a partitioned inbox's window.
	now func() time.Time

	beforeCommit func(ctx context.Context, tx pgx.Tx) error

	delivery[M, R]
}

// NewInbox returns the Inbox of table that runs handler. db (a
// *pgxpool.Pool, or any [idem.DB]) must reach the database that holds both the
// inbox table and the handler's own tables.
//
// NewInbox panics on an option that would make every delivery fail (a claim
// wait beyond PostgreSQL's lock_timeout range, an unknown isolation level),
// naming the option, the value and the bound: call it at startup.
func NewInbox[M, R any](db idem.DB, table Table[M], handler func(ctx context.Context, tx pgx.Tx, msg M) (R, error), opts ...idem.Option) *Inbox[M, R] {
	if handler == nil {
		panic(fmt.Sprintf("idemimpl.NewInbox (consumer %s): the handler is nil", table.Consumer))
	}
	in := newInbox[M, R]("idemimpl.NewInbox", db, table, opts)
	in.each = func(ctx context.Context, tx pgx.Tx, _ *idem.Outbox, msg M) (R, error) { return handler(ctx, tx, msg) }
	return in
}

// newInbox is NewInbox without the handler.
func newInbox[M, R any](constructor string, db idem.DB, table Table[M], opts []idem.Option) *Inbox[M, R] {
	o := newOptions(constructor, table.Consumer, "tx", txModeOptions, opts)
	now := o.Now
	if now == nil {
		now = time.Now
	}
	if table.Partition != "" {
		checkPartition(constructor, table)
		table.Key = bucketed(table, now)
	}
	var zero R
	_, noResult := any(zero).(idem.None)
	in := &Inbox[M, R]{
		db:        db,
		flightDB:  db,
		table:     table,
		sql:       newInboxSQL(constructor, table, !noResult),
		txOptions: pgx.TxOptions{IsoLevel: o.Isolation},
		claimWait: o.ClaimWait,
		lockWait:  lockTimeout(o.ClaimWait),
		noResult:  noResult,
		batchCap:  o.BatchCap,
		// The guard's claim decides whether the message is fresh before
		// the handler runs; a partitioned inbox's claim finds a dropped
		// partition (ErrOutsideWindow) before the handler writes again.
		claimFirst: o.Pessimistic || table.Order != nil || table.Partition != "",
		now:        now,

		beforeCommit: o.BeforeCommit,
		delivery:     delivery[M, R]{consumerOf: newConsumerOf(o, table.Consumer, fieldsOf(table.Columns), table.Key)},
	}
	if in.batchCap == 0 {
		in.batchCap = idem.DefaultBatchCap
	}
	if table.Partition != "" {
		// Its partitions are dropped whole (Purge): the statement that
		// deletes rows by ctid is for a table that is not partitioned,
		// where a ctid names one row.
		in.sql.purge = ""
	}

	// A key in progress can be claimed again, at the earliest, once another
	// claim wait has passed (RetryAfter).
	in.wait = o.ClaimWait
	if !reflect.ValueOf(db).Comparable() {
		in.flightDB = in
	}
	in.wake = newRelayWake(!o.NoNotify, db, in.flightDB, in.ob.log)
	in.part = in.handle
	return in
}

// handle delivers msg. By default it is optimistic: it runs the handler
// before it writes the key's row, in 2 round trips.
//
//  1. BEGIN, then the key's lookup, which also marks the transaction
//     (markLookupSQL), go in front of the handler's first statement (see
//     lazyTx). A committed row stops the delivery: the handler's statements
//     get errProcessed, the transaction rolls back, and the row decides
//     (Duplicate with its result, or ErrKeyReused).
//  2. Once the handler returned: the INSERT of the key's row, done with its
//     result (insertSQL), the outbox rows and COMMIT. A concurrent
//     delivery's row fails the INSERT, and the COMMIT behind it rolls
//     back: that row decides, read in a fresh snapshot (readBack).
//
// A handler's error rolls back, and a row committed meanwhile by another
// delivery decides. So a concurrent copy may run the handler, but it never
// commits. handleClaimFirst is the protocol of WithPessimisticClaim.
func (in *Inbox[M, R]) handle(ctx context.Context, msg M, d deliveryOf, n *int) (R, idem.Outcome, error) {
	if in.claimFirst {
		return in.handleClaimFirst(ctx, msg, d, n)
	}
	var zero R
	key, fp := d.key, d.fp

	flight := flightKey{db: in.flightDB, consumer: in.table.Consumer, key: keyID(key)}
	contended := enterFlight(flight)
	defer leaveFlight(flight)
	pooled, lockWait, err := in.acquire(ctx, contended)
	if err != nil {
		return zero, 0, in.fail(key, err)
	}
	defer pooled.Release()
	conn := pooled.Conn()

	var row storedRow
	tx := &lazyTx{conn: conn, opts: in.txOptions, setup: in.sql.markLookupKey(key),
		scan: func(rows pgx.Rows) error { return row.scan(rows) }}
	results, outs, err := in.runHandler(ctx, conn, tx, []M{msg})
	if err != nil {
		err = fmt.Errorf("idem: handler: %w", err)
	} else {
		// The last steps before the commit: the hook, and BEGIN with the
		// lookup for a handler that sent no statement.
		err = in.beforeInsert(ctx, conn, tx)
	}
	switch {
	case row.found:
		pgutil.Rollback(ctx, conn)
		if row.status == statusRunning {
			// A handler ended its transaction through SQL before a
			// claim-first delivery marked the row done: take it over.
			return in.handleClaimFirst(ctx, msg, d, n)
		}
		return in.decideRow(key, fp, row)
	case err != nil:
		// Rolled back: a row committed meanwhile by another delivery
		// decides, else the error stands.
		return in.afterError(ctx, conn, msg, d, n, err)
	}
	encoded, err := encodeResult(in.noResult, results[0])
	if err != nil {
		pgutil.Rollback(ctx, conn)
		return zero, 0, in.fail(key, err)
	}
	if in.noResult {
		encoded = nil
	}
	switch err := in.insertAndCommit(ctx, conn, key, fp, encoded, lockWait, outs[0]); {
	case err == nil:
		return results[0], idem.Processed, nil
	case pgutil.HasSQLState(err, pgerrcode.UniqueViolation, pgerrcode.SerializationFailure, pgerrcode.DeadlockDetected):
		// Another delivery of the key committed its row first (under
		// SERIALIZABLE the conflict may come as a serialization failure):
		// its row decides.
		result, o, err := in.readBack(ctx, conn, key, fp, msg, err)
		if errors.Is(err, errRunningRow) {
			return in.handleClaimFirst(ctx, msg, d, n)
		}
		return result, o, err
	case pgutil.HasSQLState(err, pgerrcode.LockNotAvailable):
		pgutil.Rollback(ctx, conn)
		return zero, 0, in.fail(key, idem.ErrInProgress)
	case in.table.Partition != "" && isNoPartition(err):
		pgutil.Rollback(ctx, conn)
		return zero, 0, in.fail(key, in.noPartition(msg, err))
	default:
		pgutil.Rollback(ctx, conn)
		return zero, 0, in.fail(key, err)
	}
}

// storedRow is a key's committed inbox row, as the optimistic delivery's
// lookup reads it.
type storedRow struct {
	found      bool
	fp, result []byte
	status     string
}

// errProcessed is what the handler's statements get once the lookup found
// the key's row committed: the handler is to return it.
var errProcessed = errors.New("idem: the message's key was processed already; return this error: the delivery rolls back and answers from the stored row")

// scan reads markLookupSQL's one row; it returns errProcessed when the key
// has a committed row.
func (r *storedRow) scan(rows pgx.Rows) error {
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return err
		}
		return errors.New("idem: the key's lookup returned no row")
	}
	var status *string
	if err := rows.Scan(&r.fp, &status, &r.result); err != nil {
		return err
	}
	if status == nil {
		return nil
	}
	r.found, r.status = true, *status
	return errProcessed
}

// decideRow is the outcome of a delivery whose key's row was committed
// before it: Duplicate with the stored result, or ErrKeyReused.
func (in *Inbox[M, R]) decideRow(key []any, fp []byte, row storedRow) (R, idem.Outcome, error) {
	var zero R
	switch same, err := sameFingerprint(row.fp, fp); {
	case err != nil:
		return zero, 0, in.fail(key, err)
	case !same:
		return zero, 0, in.fail(key, idem.ErrKeyReused)
	case row.status != statusDone:
		return zero, 0, in.fail(key, idem.ErrInProgress)
	}
	result, err := decodeResult[R](in.noResult, row.result)
	if err != nil {
		return zero, 0, in.fail(key, err)
	}
	return result, idem.Duplicate, nil
}

// beforeInsert begins the transaction of a handler that sent no statement
// (with the lookup), runs the WithBeforeCommit hook, and checks that the
// connection is still in the delivery's transaction.
func (in *Inbox[M, R]) beforeInsert(ctx context.Context, conn *pgx.Conn, tx *lazyTx) error {
	// The lookup first: the hook never runs for a Duplicate.
	if err := tx.begin(ctx); err != nil {
		return err
	}
	if in.beforeCommit != nil {
		if err := runBeforeCommit(ctx, conn, tx, in.beforeCommit); err != nil {
			return fmt.Errorf("idem: before commit: %w", err)
		}
	}
	return stillInTransaction(conn)
}

// afterError rolls back a delivery that failed before its INSERT, and reads
// the key's row in the same round trip: a row committed meanwhile by
// another delivery decides (the handler's error may come from that
// delivery's writes); without one, cause stands.
func (in *Inbox[M, R]) afterError(ctx context.Context, conn *pgx.Conn, msg M, d deliveryOf, n *int, cause error) (R, idem.Outcome, error) {
	var zero R
	key := d.key
	result, o, rerr := in.readBack(ctx, conn, key, d.fp, msg, cause)
	switch {
	case rerr == nil:
		return result, o, nil
	case errors.Is(rerr, errRunningRow):
		return in.handleClaimFirst(ctx, msg, d, n)
	case errors.Is(rerr, idem.ErrKeyReused):
		return zero, 0, rerr
	default:
		// No row (or none could be read): the delivery's own error.
		return zero, 0, in.fail(key, cause)
	}
}

// insertAndCommit writes the key's row with its result (insertSQL) and the
// outgoing messages of out (one INSERT), and commits, all in one round
// trip; then, unless WithoutNotify, it has the relays woken (relayWake).
// An error from the INSERT is returned as it is (the caller reads a
// concurrent delivery's row); the transaction is then aborted.
func (in *Inbox[M, R]) insertAndCommit(ctx context.Context, conn *pgx.Conn, key []any, fp, result []byte, lockWait any, out *idem.Outbox) error {
	if conn.PgConn().TxStatus() == txFailed {
		// A statement of the handler failed, and the handler returned nil.
		pgutil.Rollback(ctx, conn)
		return errAborted
	}
	firstErr, err := in.commitKey(ctx, conn, key, in.sql.insertKey(key, fp, result, lockWait), out)
	if firstErr != nil {
		return firstErr
	}
	return err
}

// handleClaimFirst is the claim-first delivery of WithPessimisticClaim (and
// of a table with a stale-message guard): BEGIN and the claim of the key in
// one round trip, the handler, then the result, the outbox rows and the
// COMMIT in one more. A concurrent copy waits at its claim and never runs
// the handler.
func (in *Inbox[M, R]) handleClaimFirst(ctx context.Context, msg M, d deliveryOf, _ *int) (R, idem.Outcome, error) {
	var zero R
	key, fp := d.key, d.fp

	var order []any
	if in.table.Order != nil {
		entity, version, err := in.table.Order(msg)
		if err != nil {
			return zero, 0, in.fail(key, err)
		}
		order = []any{entity, version}
	}

	flight := flightKey{db: in.flightDB, consumer: in.table.Consumer, key: keyID(key)}
	contended := enterFlight(flight)
	defer leaveFlight(flight)
	pooled, lockWait, err := in.acquire(ctx, contended)
	if err != nil {
		return zero, 0, in.fail(key, err)
	}
	defer pooled.Release()
	conn := pooled.Conn()

	tx, claimed, fresh, err := in.claim(ctx, conn, key, fp, lockWait, order)
	switch {
	case err == nil && claimed && !fresh:
		// A version as new or newer of the entity was applied already.
		pgutil.Rollback(ctx, conn)
		return zero, 0, in.fail(key, idem.ErrStale)
	case err == nil && claimed:
	case err == nil || pgutil.HasSQLState(err, pgerrcode.SerializationFailure, pgerrcode.DeadlockDetected):
		// Another delivery holds or held the key. Under REPEATABLE READ and
		// SERIALIZABLE a conflict with a row committed after our snapshot
		// is a serialization failure rather than a silent DO NOTHING; either
		// way the committed row decides, read in a fresh snapshot.
		result, o, err := in.readBack(ctx, conn, key, fp, msg, err)
		if !errors.Is(err, errRunningRow) {
			return result, o, err
		}
		var took bool
		if tx, took, err = in.takeOver(ctx, conn, key, fp, lockWait); err != nil {
			return zero, 0, err
		}
		if !took {
			// Another delivery took it over first and is done: its row
			// decides.
			result, o, err := in.readBack(ctx, conn, key, fp, msg, nil)
			if errors.Is(err, errRunningRow) {
				err = in.fail(key, idem.ErrInProgress)
			}
			return result, o, err
		}
	case pgutil.HasSQLState(err, pgerrcode.LockNotAvailable):
		pgutil.Rollback(ctx, conn)
		return zero, 0, in.fail(key, idem.ErrInProgress)
	case in.table.Partition != "" && isNoPartition(err):
		pgutil.Rollback(ctx, conn)
		return zero, 0, in.fail(key, in.noPartition(msg, err))
	default:
		pgutil.Rollback(ctx, conn)
		return zero, 0, in.fail(key, fmt.Errorf("idem: claim: %w", err))
	}

	results, outs, err := in.runHandler(ctx, conn, tx, []M{msg})
	if err != nil {
		pgutil.Rollback(ctx, conn)
		return zero, 0, in.fail(key, fmt.Errorf("idem: handler: %w", err))
	}
	result, out := results[0], outs[0]
	if err := readyToCommit(ctx, conn, tx, in.beforeCommit); err != nil {
		return zero, 0, in.fail(key, err)
	}
	encoded, err := encodeResult(in.noResult, result)
	if err != nil {
		pgutil.Rollback(ctx, conn)
		return zero, 0, in.fail(key, err)
	}
	if err := in.complete(ctx, conn, key, encoded, out); err != nil {
		pgutil.Rollback(ctx, conn)
		return zero, 0, in.fail(key, err)
	}
	return result, idem.Processed, nil
}

// claim begins the transaction and claims the key, in one round trip. It
// reports whether this delivery inserted the inbox row and, for a table with
// a stale-message guard, whether the message's version is newer than the
// entity's last applied one (the claim statement records it in the same
// statement, so that two concurrent versions cannot both win).
func (in *Inbox[M, R]) claim(ctx context.Context, conn *pgx.Conn, key []any, fp []byte, lockWait any, order []any) (tx pgx.Tx, claimed, fresh bool, err error) {
	// The claim statement bounds its own wait with lock_timeout and
	// restores the session's value before it returns (see claimSQL in statements.go).
	b := pgutil.NewBatch(2)
	b.BeginTx(in.txOptions)
	q := in.sql.claim(key, fp, lockWait, order)
	b.Queue(q.sql, q.args...)
	br := conn.SendBatch(ctx, b)
	claimed, fresh, err = readClaim(br)
	if closeErr := br.Close(); err == nil {
		err = closeErr
	}
	return br.Tx(), claimed, fresh, err
}

// takeOver claims a key whose committed row a handler left running (it ended
// its transaction through SQL), so that this delivery runs the handler in
// full: BEGIN and the take-over in one round trip, waiting for a concurrent
// take-over within the claim wait. It returns the transaction when it took
// the key over; took is false, and the transaction rolled back, when another
// delivery took it over and finished first; err is ErrInProgress when that
// one is still at it after the claim wait.
func (in *Inbox[M, R]) takeOver(ctx context.Context, conn *pgx.Conn, key []any, fp []byte, lockWait any) (tx pgx.Tx, took bool, err error) {
	b := pgutil.NewBatch(2)
	b.BeginTx(in.txOptions)
	q := in.sql.takeOverKey(key, fp, lockWait)
	b.Queue(q.sql, q.args...)
	br := conn.SendBatch(ctx, b)
	claimed, _, err := readClaim(br)
	if closeErr := br.Close(); err == nil {
		err = closeErr
	}
	switch {
	case err == nil && claimed:
		return br.Tx(), true, nil
	case err == nil:
		pgutil.Rollback(ctx, conn)
		return nil, false, nil
	case pgutil.HasSQLState(err, pgerrcode.LockNotAvailable, pgerrcode.SerializationFailure, pgerrcode.DeadlockDetected):
		pgutil.Rollback(ctx, conn)
		return nil, false, in.fail(key, idem.ErrInProgress)
	default:
		pgutil.Rollback(ctx, conn)
		return nil, false, in.fail(key, fmt.Errorf("idem: take over the key's running row: %w", err))
	}
}

// readClaim reads the claim batch. The claim statement returns a row only
// when it inserted the key; its one column says whether the message is fresh
// (always true without a stale-message guard).
func readClaim(br pgx.BatchResults) (claimed, fresh bool, err error) {
	if _, err := br.Exec(); err != nil { // BEGIN
		return false, false, err
	}
	switch err := br.QueryRow().Scan(&fresh); {
	case errors.Is(err, pgx.ErrNoRows):
		return false, false, nil
	case err != nil:
		return false, false, err
	}
	return true, fresh, nil
}

// runHandler runs the handler on tx for msgs (one, for Handle), in input
// order: a set-based handler once with all of them, a handler of one message
// once for each, each run with a Tx (and, publishing, an Outbox) of its own
// (see callHandler). It returns the result and the Outbox (nil unless
// publishing) of each message. A set-based handler's results must be one a
// message: other than that is an error naming the handler and both lengths.
func (in *Inbox[M, R]) runHandler(ctx context.Context, conn *pgx.Conn, tx pgx.Tx, msgs []M) ([]R, []*idem.Outbox, error) {
	outs := make([]*idem.Outbox, len(msgs))
	if in.set != nil {
		var set *idem.Outbox
		if in.publishing {
			s, each := link.NewSetOutbox(len(msgs))
			set = s.(*idem.Outbox)
			for i, o := range each {
				outs[i] = o.(*idem.Outbox)
			}
		}
		results, err := callHandler(ctx, conn, newHandlerTx(tx, conn), func(ctx context.Context, tx pgx.Tx) ([]R, error) {
			return in.set(ctx, tx, set, msgs)
		}, set)
		if err == nil && len(results) != len(msgs) {
			noun := "messages"
			if len(msgs) == 1 {
				noun = "message"
			}
			err = fmt.Errorf("idem: the set-based handler %s returned %d results for %d %s; it must return one result a message, in the order of msgs",
				in.handlerName(), len(results), len(msgs), noun)
		}
		return results, outs, err
	}
	results := make([]R, len(msgs))
	for i, msg := range msgs {
		if in.publishing {
			outs[i] = &idem.Outbox{}
		}
		r, err := callHandler(ctx, conn, newHandlerTx(tx, conn), func(ctx context.Context, tx pgx.Tx) (R, error) {
			return in.each(ctx, tx, outs[i], msg)
		}, outs[i])
		if err != nil {
			return nil, nil, err
		}
		results[i] = r
	}
	return results, outs, nil
}

// handlerName names the handler in errors: the table's Handler, or else the
// consumer's.
func (in *Inbox[M, R]) handlerName() string {
	if in.table.Handler != "" {
		return in.table.Handler
	}
	return "of the consumer " + in.table.Consumer
}

// errAborted explains a transaction that a handler's failed statement aborted
// although the handler returned no error.
var errAborted = errors.New("idem: a statement of the handler failed but the handler returned nil; the transaction was rolled back")

// claimLostMessage is the text of the error that markDoneSQL and claimCheck
// raise outside the claim's transaction.
const claimLostMessage = "idem: not the transaction of the claim"

// claimCheck runs right before the COMMIT of a batch, and of a single
// delivery without a result, in the same round trip. It fails, and so turns the COMMIT queued after it into a rollback,
// unless the connection is still inside the transaction that the claim
// began: the claim statement sets idem.lock_timeout for its transaction only
// (see claimSQL), so the setting is empty in any other transaction. That
// catches what no check on the client can see: a handler that sent
// "ROLLBACK; BEGIN; ..." around its Tx, which leaves the connection inside a
// transaction again, but one without the inbox rows. The ELSE branch reads
// the setting so that the planner cannot fold it into a constant error. (A
// single delivery's markDoneSQL makes the same check, for a handler with a
// result.)
const claimCheck = "SELECT CASE WHEN coalesce(current_setting('idem.lock_timeout', true), '') <> '' THEN true " +
	"ELSE ('" + claimLostMessage + "' || coalesce(current_setting('idem.lock_timeout', true), ''))::boolean END"

// errClaimLost is what a failed claimCheck or markDone means.
var errClaimLost = errors.New("idem: at the commit the connection was in another transaction than the one that claimed the key, or the key's inbox row was gone: the handler ended the inbox's transaction through SQL sent around its Tx (through tx.Conn()) and began another, or deleted the row; that transaction was rolled back")

// isClaimCheckFailure reports whether err is the error of claimCheck or
// markDoneSQL (an invalid boolean whose text is claimLostMessage).
func isClaimCheckFailure(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == pgerrcode.InvalidTextRepresentation && strings.Contains(pgErr.Message, claimLostMessage)
}

// complete marks the key's inbox row done with the handler's result, if it
// has one, where the connection is still in the claim's transaction (else
// it fails: markDoneSQL; a row without a result was born done, and
// claimCheck makes the same check of the transaction), writes the outgoing messages of out (one INSERT),
// and commits, all in one round trip; then, unless WithoutNotify, it has the
// relays woken (relayWake).
func (in *Inbox[M, R]) complete(ctx context.Context, conn *pgx.Conn, key []any, result []byte, out *idem.Outbox) error {
	first := query{sql: claimCheck} // a row without a result was born done
	if in.sql.result {
		first = in.sql.markKeyDone(key, result)
	}
	firstErr, err := in.commitKey(ctx, conn, key, first, out)
	if firstErr == nil {
		return err
	}
	// Treated as a failed COMMIT, whose outcome the redelivery finds out:
	// wake the relays for what it may have committed.
	if out != nil {
		in.wake.committed(len(link.OutboxBuffer(out).Msgs))
	}
	return fmt.Errorf("idem: store the result and commit: %w", firstErr)
}

// commitKey is the commit's round trip of a single delivery: first (the
// statement that writes or checks the key's row), the outgoing messages of
// out (one INSERT) and COMMIT. Then, unless WithoutNotify, it has the relays
// woken (relayWake). firstErr is first's own error, as the server sent it,
// when it is neither the check of the delivery's transaction (errClaimLost)
// nor a statement in an aborted transaction (errAborted): nothing after it
// ran. err is what became of the rest, those two included.
func (in *Inbox[M, R]) commitKey(ctx context.Context, conn *pgx.Conn, key []any, first query, out *idem.Outbox) (firstErr, err error) {
	b := pgutil.NewBatch(3)
	b.Queue(first.sql, first.args...)
	var published int
	if out != nil { // a publishing inbox's: the rows of what the handler published
		published = queueOutgoing(b, in.table.Consumer, in.fields, [][]any{key}, []*idem.Outbox{out})
	}
	br, done, err := sendCommit(ctx, conn, b)
	if err != nil {
		return nil, fmt.Errorf("idem: %w before the commit; the transaction was rolled back", err)
	}
	defer done()
	var committed pgconn.CommandTag
	var outboxErr error
	_, firstErr = br.Exec()
	err = firstErr
	if err == nil && published > 0 {
		if _, err = br.Exec(); err != nil && !pgutil.HasSQLState(err, pgerrcode.InFailedSQLTransaction) {
			outboxErr = errOutboxInsert(published, err)
		}
	}
	if err == nil {
		committed, err = br.Exec()
	}
	if closeErr := br.Close(); err == nil {
		err = closeErr
	}
	switch {
	case isClaimCheckFailure(firstErr):
		return nil, errClaimLost
	case pgutil.HasSQLState(firstErr, pgerrcode.InFailedSQLTransaction):
		return nil, errAborted
	case firstErr != nil:
		return firstErr, nil
	case outboxErr != nil:
		// Nothing was committed: the batch stopped at the failed statement.
		return nil, outboxErr
	case pgutil.HasSQLState(err, pgerrcode.InFailedSQLTransaction) || (err == nil && committed.String() == "ROLLBACK"):
		return nil, errAborted
	case err != nil:
		// A failed COMMIT may or may not have committed: the redelivery
		// finds out, as a Duplicate or by processing the message. If it
		// did, its rows are to be published: wake the relays.
		in.wake.committed(published)
		return nil, fmt.Errorf("idem: store the result and commit: %w", err)
	}
	in.wake.committed(published)
	return nil, nil
}

// errRunningRow is what readBack returns for a committed row that is still
// running: the caller takes the key over (takeOver).
var errRunningRow = errors.New("idem: the key's committed inbox row is running")

// readBack resolves a claim that this delivery did not win: it rolls back and
// reads the key's committed row in a fresh snapshot, in one round trip. A
// committed running row is errRunningRow, for the caller to take over.
func (in *Inbox[M, R]) readBack(ctx context.Context, conn *pgx.Conn, key []any, fp []byte, msg M, claimErr error) (R, idem.Outcome, error) {
	var zero R
	if conn.PgConn().TxStatus() == txFailed {
		// A failed claim aborted the transaction, and an aborted transaction
		// refuses even the Parse of the lookup that pgx may send ahead of
		// the batch: roll back on its own first. (The claim fails this way
		// only under REPEATABLE READ or SERIALIZABLE.)
		pgutil.Rollback(ctx, conn)
	}
	b := pgutil.NewBatch(2)
	if conn.PgConn().TxStatus() != txIdle {
		b.Queue("rollback")
	}
	q := in.sql.lookupKey(key)
	b.Queue(q.sql, q.args...)
	br := conn.SendBatch(ctx, b)
	var (
		storedFP []byte
		status   string
		stored   []byte
		err      error
	)
	if b.Len() == 2 {
		_, err = br.Exec()
	}
	if err == nil {
		err = br.QueryRow().Scan(&storedFP, &status, &stored)
	}
	if closeErr := br.Close(); err == nil {
		err = closeErr
	}

	switch {
	case errors.Is(err, pgx.ErrNoRows):
		if claimErr == nil {
			claimErr = errors.New("idem: the claim conflicted with an inbox row that was gone when read back")
		}
		return zero, 0, in.retryable(key, claimErr)
	case err != nil:
		pgutil.Rollback(ctx, conn)
		return zero, 0, in.fail(key, fmt.Errorf("idem: read the processed row: %w", err))
	}
	switch same, err := sameFingerprint(storedFP, fp); {
	case err != nil:
		return zero, 0, in.fail(key, err)
	case !same:
		return zero, 0, in.fail(key, idem.ErrKeyReused)
	case status == statusRunning:
		// Committed, yet running: a handler ended its transaction through
		// SQL before the row was marked done (a delivery in progress holds
		// its row uncommitted, and the claim waited for it).
		return zero, 0, errRunningRow
	case status != statusDone:
		return zero, 0, in.fail(key, idem.ErrInProgress)
	}
	result, err := decodeResult[R](in.noResult, stored)
	if err != nil {
		return zero, 0, in.fail(key, err)
	}
	return result, idem.Duplicate, nil
}

// Purge deletes the inbox rows older than the table's retention, in batches so
// that no statement holds its locks for long, and returns how many it deleted.
// Run it periodically; rows must outlive the broker's redelivery window and
// any dead-letter replay, which is what the retention is for.
//
// On a partitioned inbox (Table.Partition) it deletes no rows: it drops the
// partitions wholly past the retention, creates those of the kept window
// and the buckets ahead (as idem.Janitor does), and returns the rows the
// dropped partitions held, by the server's statistics (an estimate).
func (in *Inbox[M, R]) Purge(ctx context.Context) (int64, error) {
	if in.table.Partition != "" {
		res, err := partition.Maintain(ctx, in.db, in.partitions(), in.now())
		in.ob.ins.Purged(ctx, in.table.Name, obs.KindInbox, res.DroppedRows)
		if err != nil {
			return res.DroppedRows, in.fail(nil, fmt.Errorf("idem: keep the partitions of %s: %w", in.table.Name, err))
		}
		return res.DroppedRows, nil
	}
	q := in.sql.purgeRows(in.table.Retain)
	return purge(ctx, in.db, &in.consumerOf, in.table.Name, obs.KindInbox, q.sql, q.args)
}

// commitTimeout bounds the commit round trip, which runs even when the
// caller's context is cancelled once it was sent (see complete).
const commitTimeout = 30 * time.Second
