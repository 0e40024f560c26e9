package idem

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

	"github.com/idemgen/idemgen/idem/internal/obs"
)

// None is the result type of handlers that return only an error: their inbox
// rows store no result.
//
// For generated code: it appears in the Inbox type of a generated wrapper
// whose handler has no result; the wrapper's Handle returns no result.
type None struct{}

// NoResult adapts a handler that returns only an error to NewInbox.
//
// For generated code: the constructor of a generated wrapper calls it.
func NoResult[M any](handler func(ctx context.Context, tx pgx.Tx, msg M) error) func(context.Context, pgx.Tx, M) (None, error) {
	return func(ctx context.Context, tx pgx.Tx, msg M) (None, error) {
		return None{}, handler(ctx, tx, msg)
	}
}

// Fingerprinter lets a message type choose the bytes its payload fingerprint is
// computed from. By default the fingerprint is the SHA-256 of the message's
// canonical encoding: its fields as encoding/json names them, sorted, with
// every field at its zero value left out (so that a message type that gains a
// field keeps its fingerprints while the field is zero). A message that
// carries fields which differ between deliveries of the same message (a
// delivery count, a receive time) must leave them out here, or every
// redelivery would be ErrKeyReused.
type Fingerprinter interface {
	IdemFingerprint() []byte
}

// Inbox runs a handler at most once per key of one consumer, in one
// transaction with the inbox row that records the key. It is safe for
// concurrent use; generated wrappers hold one.
type Inbox[M, R any] struct {
	db       DB
	flightDB any // db, or the Inbox itself when db is not comparable: see flightKey
	table    Table[M]
	handler  func(context.Context, pgx.Tx, M) (R, error)
	// publishing is the handler of NewPublishingInbox (handler is nil then).
	publishing func(context.Context, pgx.Tx, *Outbox, M) (R, error)
	notify     bool // send NOTIFY OutboxChannel with outbox rows (not WithoutNotify)
	txOptions  pgx.TxOptions
	claimWait  time.Duration
	lockWait   any // the claim's lock_timeout value, boxed once
	noResult   bool
	batchCap   int // the most messages one HandleBatch transaction holds

	beforeCommit func(ctx context.Context, tx pgx.Tx) error

	ob observer
}

// NewInbox returns the Inbox of table that runs handler. db (a
// *pgxpool.Pool, or any [DB]) must reach the database that holds both the
// inbox table and the handler's own tables.
//
// NewInbox panics on an option that would make every delivery fail (a claim
// wait beyond PostgreSQL's lock_timeout range, an unknown isolation level),
// naming the option, the value and the bound: call it at startup.
func NewInbox[M, R any](db DB, table Table[M], handler func(ctx context.Context, tx pgx.Tx, msg M) (R, error), opts ...Option) *Inbox[M, R] {
	in := newInbox[M, R](db, table, opts)
	in.handler = handler
	return in
}

// newInbox is NewInbox without the handler.
func newInbox[M, R any](db DB, table Table[M], opts []Option) *Inbox[M, R] {
	o := options{claimWait: DefaultClaimWait}
	for _, opt := range opts {
		opt(&o)
	}
	o.validate(table.Consumer)
	var zero R
	_, noResult := any(zero).(None)
	in := &Inbox[M, R]{
		db:        db,
		flightDB:  db,
		table:     table,
		notify:    !o.noNotify,
		txOptions: pgx.TxOptions{IsoLevel: o.isolation},
		claimWait: o.claimWait,
		lockWait:  o.lockTimeout(),
		noResult:  noResult,
		batchCap:  o.batchCap,

		beforeCommit: o.beforeCommit,
		ob:           newObserver(o, table.Consumer),
	}
	if in.batchCap == 0 {
		in.batchCap = DefaultBatchCap
	}
	if !reflect.ValueOf(db).Comparable() {
		in.flightDB = in
	}
	return in
}

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
// logged at its outcome's level ([WithMeterProvider], [WithLogger];
// docs/observability.md), a handler's panic as an error before it goes on
// up the stack.
func (in *Inbox[M, R]) Handle(ctx context.Context, msg M) (result R, o Outcome, err error) {
	start := time.Now()
	observed := false
	defer func() {
		if !observed { // the handler panicked
			observeDelivery(ctx, &in.ob, msg, 0, errPanicked, time.Since(start), 0, func() (string, string) { return in.keyText(msg, nil), "" })
		}
	}()
	result, o, err = in.handle(ctx, msg)
	observed = true
	observeDelivery(ctx, &in.ob, msg, o, err, time.Since(start), 0, func() (string, string) { return in.keyText(msg, err), "" })
	return result, o, err
}

// keyText is the key of msg as the log record shows it: the key parts as
// Field=value pairs, or "" when they cannot be taken from msg.
func (in *Inbox[M, R]) keyText(msg M, err error) string {
	var e *Error
	if errors.As(err, &e) && e.Key != "" {
		return e.Key
	}
	key, kerr := in.table.Key(msg)
	if kerr != nil {
		return ""
	}
	return formatKey(in.table.KeyFields, key)
}

func (in *Inbox[M, R]) handle(ctx context.Context, msg M) (R, Outcome, error) {
	var zero R
	key, err := validKey(msg, in.table.Key, in.table.KeyFields)
	if err != nil {
		return zero, 0, in.fail(nil, err)
	}
	fp, err := fingerprint(msg)
	if err != nil {
		return zero, 0, in.fail(key, err)
	}

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
		rollback(ctx, conn)
		return zero, 0, in.fail(key, ErrStale)
	case err == nil && claimed:
	case err == nil || hasSQLState(err, pgerrcode.SerializationFailure, pgerrcode.DeadlockDetected):
		// Another delivery holds or held the key. Under REPEATABLE READ and
		// SERIALIZABLE a conflict with a row committed after our snapshot
		// is a serialization failure rather than a silent DO NOTHING; either
		// way the committed row decides, read in a fresh snapshot.
		return in.readBack(ctx, conn, key, fp, msg, err)
	case hasSQLState(err, pgerrcode.LockNotAvailable):
		rollback(ctx, conn)
		return zero, 0, in.fail(key, ErrInProgress)
	default:
		rollback(ctx, conn)
		return zero, 0, in.fail(key, fmt.Errorf("idem: claim: %w", err))
	}

	var out *Outbox
	if in.publishing != nil {
		out = &Outbox{}
	}
	result, err := in.call(ctx, conn, newHandlerTx(tx, conn), out, msg)
	if err != nil {
		rollback(ctx, conn)
		return zero, 0, in.fail(key, fmt.Errorf("idem: handler: %w", err))
	}
	if in.beforeCommit != nil {
		if err := in.callBeforeCommit(ctx, conn, tx); err != nil {
			rollback(ctx, conn)
			return zero, 0, in.fail(key, fmt.Errorf("idem: before commit: %w", err))
		}
	}
	if err := stillInTransaction(conn); err != nil {
		rollback(ctx, conn)
		return zero, 0, in.fail(key, err)
	}
	encoded, err := encodeResult(in.noResult, result)
	if err != nil {
		rollback(ctx, conn)
		return zero, 0, in.fail(key, err)
	}
	if err := in.complete(ctx, conn, key, encoded, out); err != nil {
		rollback(ctx, conn)
		return zero, 0, in.fail(key, err)
	}
	return result, Processed, nil
}

// claim begins the transaction and claims the key, in one round trip. It
// reports whether this delivery inserted the inbox row and, for a table with
// a stale-message guard, whether the message's version is newer than the
// entity's last applied one (the claim statement records it in the same
// statement, so that two concurrent versions cannot both win).
func (in *Inbox[M, R]) claim(ctx context.Context, conn *pgx.Conn, key []any, fp []byte, lockWait any, order []any) (tx pgx.Tx, claimed, fresh bool, err error) {
	// The claim statement bounds its own wait with lock_timeout and
	// restores the session's value before it returns (see idem.Table).
	b := newBatch(2)
	b.BeginTx(in.txOptions)
	sql, args := in.table.claimStatement(key, fp, lockWait, order)
	b.Queue(sql, args...)
	br := conn.SendBatch(ctx, b)
	claimed, fresh, err = readClaim(br)
	if closeErr := br.Close(); err == nil {
		err = closeErr
	}
	return br.Tx(), claimed, fresh, err
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

// call runs the handler, with out for a publishing one. A panic rolls the
// transaction back before it goes on up the stack. A handler that ended the
// transaction through SQL fails with what it did, whatever it returned. Once
// it returned, out refuses Publish.
func (in *Inbox[M, R]) call(ctx context.Context, conn *pgx.Conn, tx *handlerTx, out *Outbox, msg M) (result R, err error) {
	defer func() {
		tx.s.ended = true
		if out != nil {
			out.closed = true
		}
		if p := recover(); p != nil {
			rollback(ctx, conn)
			panic(p)
		}
		if tx.s.escaped != nil {
			var zero R
			result, err = zero, tx.s.escaped
		}
	}()
	if in.publishing != nil {
		return in.publishing(ctx, tx, out, msg)
	}
	return in.handler(ctx, tx, msg)
}

// errAborted explains a transaction that a handler's failed statement aborted
// although the handler returned no error.
var errAborted = errors.New("idem: a statement of the handler failed but the handler returned nil; the transaction was rolled back")

// claimCheck runs right before the COMMIT, in the same round trip. It fails,
// and so turns the COMMIT queued after it into a rollback, unless the
// connection is still inside the transaction that the claim began: the claim
// statement sets idem.lock_timeout for its transaction only (see Table), so
// the setting is empty in any other transaction. That catches what no check
// on the client can see: a handler that sent "ROLLBACK; BEGIN; ..." around
// its Tx, which leaves the connection inside a transaction again, but one
// without the inbox row. The ELSE branch reads the setting so that the
// planner cannot fold it into a constant error.
const claimCheck = "SELECT CASE WHEN coalesce(current_setting('idem.lock_timeout', true), '') <> '' THEN true " +
	"ELSE ('idem: not the transaction of the claim' || coalesce(current_setting('idem.lock_timeout', true), ''))::boolean END"

// errClaimLost is what a failed claimCheck means.
var errClaimLost = errors.New("idem: at the commit the connection was in another transaction than the one that claimed the key: the handler ended the inbox's transaction through SQL sent around its Tx (through tx.Conn()) and began another; that transaction was rolled back")

// isClaimCheckFailure reports whether err is claimCheck's own error (an
// invalid boolean whose text is claimCheck's).
func isClaimCheckFailure(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == pgerrcode.InvalidTextRepresentation && strings.Contains(pgErr.Message, "idem: not the transaction of the claim")
}

// complete stores the result in the inbox row, if the handler has one,
// writes the outgoing messages of out (one INSERT, and the NOTIFY unless
// WithoutNotify), checks that the connection is still in the claim's
// transaction, and commits, all in one round trip.
func (in *Inbox[M, R]) complete(ctx context.Context, conn *pgx.Conn, key []any, result []byte, out *Outbox) error {
	var msgs []outgoing
	if out != nil {
		msgs = out.msgs
	}
	b := newBatch(5)
	if !in.noResult {
		// The claim inserted the row done; only a result is left to store
		// (as text: see completeStatement).
		sql, args := in.table.completeStatement(key, result)
		b.Queue(sql, args...)
	}
	notify := len(msgs) > 0 && in.notify
	if len(msgs) > 0 {
		sql, args := outboxStatement(in.table.Consumer, in.table.KeyFields, key, msgs)
		b.Queue(sql, args...)
		if notify {
			b.Queue(notifyOutbox)
		}
	}
	b.Queue(claimCheck)
	b.Queue("commit")
	// A cancellation that comes before the commit round trip rolls back: the
	// outcome is known, nothing committed. Once the COMMIT is on its way, the
	// caller's cancellation must not cut the round trip short: a COMMIT whose
	// reply is never read has an unknown outcome, and a consumer that stops
	// (cancelling its deliveries) would leave a committed message unacked, to
	// come back as a Duplicate. So the round trip runs to its end, bounded by
	// commitTimeout instead.
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("idem: %w before the commit; the transaction was rolled back", err)
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commitTimeout)
	defer cancel()
	br := conn.SendBatch(cctx, b)
	var updated, committed pgconn.CommandTag
	var err, outboxErr error
	if !in.noResult {
		updated, err = br.Exec()
	}
	if err == nil && len(msgs) > 0 {
		if _, err = br.Exec(); err != nil && !hasSQLState(err, pgerrcode.InFailedSQLTransaction) {
			outboxErr = errOutboxInsert(len(msgs), err)
		}
		if err == nil && notify {
			if _, err = br.Exec(); err != nil && !hasSQLState(err, pgerrcode.InFailedSQLTransaction) {
				outboxErr = fmt.Errorf("idem: NOTIFY %s: %w", OutboxChannel, err)
			}
		}
	}
	if err == nil {
		if _, err = br.Exec(); isClaimCheckFailure(err) {
			err = errClaimLost
		}
	}
	if err == nil {
		committed, err = br.Exec()
	}
	if closeErr := br.Close(); err == nil {
		err = closeErr
	}
	switch {
	case outboxErr != nil:
		// Nothing was committed: the batch stopped at the failed statement.
		return outboxErr
	case errors.Is(err, errClaimLost):
		return err
	case hasSQLState(err, pgerrcode.InFailedSQLTransaction) || (err == nil && committed.String() == "ROLLBACK"):
		return errAborted
	case err != nil:
		// A failed COMMIT may or may not have committed: the redelivery
		// finds out, as a Duplicate or by processing the message.
		return fmt.Errorf("idem: store the result and commit: %w", err)
	case !in.noResult && updated.RowsAffected() != 1:
		return fmt.Errorf("idem: the inbox row was gone when the result was stored (%d rows updated); did the handler delete it?", updated.RowsAffected())
	}
	return nil
}

// readBack resolves a claim that this delivery did not win: it rolls back and
// reads the key's committed row in a fresh snapshot, in one round trip.
func (in *Inbox[M, R]) readBack(ctx context.Context, conn *pgx.Conn, key []any, fp []byte, msg M, claimErr error) (R, Outcome, error) {
	var zero R
	if conn.PgConn().TxStatus() == txFailed {
		// A failed claim aborted the transaction, and an aborted transaction
		// refuses even the Parse of the lookup that pgx may send ahead of
		// the batch: roll back on its own first. (The claim fails this way
		// only under REPEATABLE READ or SERIALIZABLE.)
		rollback(ctx, conn)
	}
	b := newBatch(2)
	if conn.PgConn().TxStatus() != txIdle {
		b.Queue("rollback")
	}
	sql, args := in.table.lookupStatement(key)
	b.Queue(sql, args...)
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
		rollback(ctx, conn)
		return zero, 0, in.fail(key, fmt.Errorf("idem: read the processed row: %w", err))
	}
	switch same, err := sameFingerprint(storedFP, fp, msg); {
	case err != nil:
		return zero, 0, in.fail(key, err)
	case !same:
		return zero, 0, in.fail(key, ErrKeyReused)
	case status != "done":
		return zero, 0, in.fail(key, ErrInProgress)
	}
	result, err := decodeResult[R](in.noResult, stored)
	if err != nil {
		return zero, 0, in.fail(key, err)
	}
	return result, Duplicate, nil
}

// Purge deletes the inbox rows older than the table's retention, in batches so
// that no statement holds its locks for long, and returns how many it deleted.
// Run it periodically; rows must outlive the broker's redelivery window and
// any dead-letter replay, which is what the retention is for.
func (in *Inbox[M, R]) Purge(ctx context.Context) (int64, error) {
	var total int64
	for {
		sql, args := in.table.purgeStatement()
		tag, err := exec(ctx, in.db, sql, args...)
		in.ob.ins.Purged(ctx, in.table.Name, obs.KindInbox, tag.RowsAffected())
		if err != nil {
			return total, in.fail(nil, fmt.Errorf("idem: purge %s: %w", in.table.Name, err))
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < purgeBatch {
			return total, nil
		}
	}
}

func (in *Inbox[M, R]) fail(key []any, err error) error {
	// A key in progress can be claimed again, at the earliest, once another
	// claim wait has passed (RetryAfter).
	return inProgress(newError(in.table.Consumer, in.table.KeyFields, key, err), in.claimWait)
}

func (in *Inbox[M, R]) retryable(key []any, err error) error {
	e := in.fail(key, err).(*Error)
	e.retryable = true
	return e
}

// rollbackTimeout bounds the rollback after a failure; it runs even when the
// caller's context is already cancelled.
const rollbackTimeout = 5 * time.Second

// commitTimeout bounds the commit round trip, which runs even when the
// caller's context is cancelled once it was sent (see complete).
const commitTimeout = 30 * time.Second

// rollback ends the connection's transaction, if it has one. When even that
// fails the connection's state is unknown, so it is closed: the server rolls
// back, and the pool discards the connection.
func rollback(ctx context.Context, conn *pgx.Conn) {
	if conn.IsClosed() || conn.PgConn().TxStatus() == txIdle {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
	defer cancel()
	if _, err := conn.Exec(ctx, "rollback"); err != nil {
		_ = conn.Close(ctx)
	}
}

// newBatch returns a batch with room for n queries, so that queueing them
// does not grow the slice step by step.
func newBatch(n int) *pgx.Batch {
	return &pgx.Batch{QueuedQueries: make([]*pgx.QueuedQuery, 0, n)}
}

func hasSQLState(err error, codes ...string) bool {
	if err == nil {
		return false // without the allocation of pgErr, which escapes
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	for _, code := range codes {
		if pgErr.Code == code {
			return true
		}
	}
	return false
}
