package idemimpl

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/internal/pgutil"
)

// FingerprintSetting is the transaction-local setting through which the
// wrapper of a mode=entity handler hands the delivery's payload fingerprint
// (hex) to the default of the entity table's FingerprintColumn: the
// handler's own INSERT records it, with no statement of its own.
const FingerprintSetting = "idem.fingerprint"

// FingerprintColumn is the column idemgen's migration adds to the entity
// table of a mode=entity handler: the fingerprint of the message that
// created the row, NULL for rows written outside the wrapper.
const FingerprintColumn = "idem_fingerprint"

// EntityTable describes a mode=entity consumer: the business table whose
// row, inserted by the handler, is the message's marker (docs/natural.md).
//
// For generated code: idemgen declares one per mode=entity handler. The
// runtime builds its statements from it (once, in [NewEntityInbox]): the
// lookup of a key's FingerprintColumn, and the check before COMMIT that
// fails, raising an invalid-boolean error whose text holds
// MarkerCheckMessage (so that the COMMIT after it rolls back), unless the
// row exists with the fingerprint of FingerprintSetting: that also proves
// the connection is still in the transaction that set it.
type EntityTable[M any] struct {
	// Consumer is the stable consumer name of the directive.
	Consumer string
	// Name is the entity table, as SQL writes it: schema-qualified and
	// double-quoted where needed.
	Name string
	// Columns are the entity table's columns that hold the key parts, in
	// key order, each with the Go field it is read from.
	Columns []Column
	// Constraint is the unique constraint (or unique index) over Columns
	// whose violation means "duplicate"; empty means the one that covers
	// exactly Columns, looked up in the catalog at the first unique
	// violation.
	Constraint string
	// Key returns the key parts of msg in column order, or an error
	// wrapping ErrInvalidKey.
	Key func(msg M) ([]any, error)
	// Migration is idemgen's migration that adds FingerprintColumn to the
	// table. OutboxMigration is the first of the outbox chain beside it,
	// for a publishing handler. Both are paths relative to the package's
	// directory, "" when unknown. Check names them when what they create is
	// missing.
	Migration       string
	OutboxMigration string
}

// EntityInbox runs a mode=entity handler: BEGIN and the fingerprint
// setting sent with the handler's first statement (one round trip), the
// handler's other statements, then the check that the marker row is there
// with COMMIT (one round trip). A unique violation of the table's
// constraint raised by the handler is the duplicate signal: the transaction
// rolls back and the row's fingerprint, read in a fresh snapshot, decides
// Duplicate or ErrKeyReused. It is safe for concurrent use; generated
// wrappers hold one.
//
// Handle delivers msg: the handler's insert of the entity row commits with
// the fingerprint (Processed), or collides with the row of an earlier
// delivery of the key (Duplicate, with the result read back, or
// ErrKeyReused when the row records another payload). Any other error of the
// handler, including a unique violation of another constraint, is returned
// as the handler's error; nothing was committed. ActionFor(err) says what to
// do with the message.
//
// Each delivery is counted (idem.deliveries, idem.handler.duration) and
// logged at its outcome's level, as in every mode ([idem.WithMeterProvider],
// [idem.WithLogger]; docs/observability.md).
type EntityInbox[M, R any] struct {
	db         idem.DB
	table      EntityTable[M]
	sql        *entitySQL // the table's statements
	handler    func(context.Context, pgx.Tx, *idem.Outbox, M) (R, error)
	publishing bool
	result     func(context.Context, pgx.Tx, M) (R, error)
	txOptions  pgx.TxOptions
	wake       relayWake // the NOTIFY after a commit that wrote outbox rows

	beforeCommit func(ctx context.Context, tx pgx.Tx) error
	delivery[M, R]

	mu         sync.Mutex
	constraint string // resolved table.Constraint
	relname    string // the table's name without schema, as PostgreSQL reports it
}

// NewEntityInbox returns the EntityInbox of table that runs handler. result
// reads a processed message's result back for its duplicates (the
// directive's result=); it is nil for a handler that returns only an error
// (R None). Options: WithIsolation, WithBeforeCommit, WithoutNotify,
// WithLogger, WithMeterProvider; it panics on any other, naming it: the claim
// wait does not apply (the handler's INSERT waits for a concurrent delivery
// of its key to commit or roll back, as any INSERT does), nor do batches or
// the options of mode=external.
func NewEntityInbox[M, R any](db idem.DB, table EntityTable[M], handler func(ctx context.Context, tx pgx.Tx, msg M) (R, error), result func(ctx context.Context, tx pgx.Tx, msg M) (R, error), opts ...idem.Option) *EntityInbox[M, R] {
	in := newEntityInbox("idemimpl.NewEntityInbox", db, table, result, opts)
	in.handler = func(ctx context.Context, tx pgx.Tx, _ *idem.Outbox, msg M) (R, error) { return handler(ctx, tx, msg) }
	return in
}

// NewPublishingEntityInbox is NewEntityInbox for a handler that publishes
// outgoing messages through an *Outbox, written to idem_outbox in the
// commit's round trip.
func NewPublishingEntityInbox[M, R any](db idem.DB, table EntityTable[M], handler func(ctx context.Context, tx pgx.Tx, out *idem.Outbox, msg M) (R, error), result func(ctx context.Context, tx pgx.Tx, msg M) (R, error), opts ...idem.Option) *EntityInbox[M, R] {
	in := newEntityInbox("idemimpl.NewPublishingEntityInbox", db, table, result, opts)
	in.handler, in.publishing = handler, true
	return in
}

func newEntityInbox[M, R any](constructor string, db idem.DB, table EntityTable[M], result func(context.Context, pgx.Tx, M) (R, error), opts []idem.Option) *EntityInbox[M, R] {
	o := newOptions(constructor, table.Consumer, "entity", entityModeOptions, opts)
	var zero R
	if _, none := any(zero).(idem.None); !none && result == nil {
		panic(fmt.Sprintf("idem: consumer %s: a mode=entity handler with a result (%T) needs a function that reads it back for duplicates (result=)", table.Consumer, zero))
	}
	name := table.Name
	if i := strings.LastIndexByte(name, '.'); i >= 0 {
		name = name[i+1:]
	}
	in := &EntityInbox[M, R]{
		db: db, table: table, result: result, sql: newEntitySQL(constructor, table),
		txOptions:    pgx.TxOptions{IsoLevel: o.Isolation},
		beforeCommit: o.BeforeCommit,
		delivery:     delivery[M, R]{consumerOf: newConsumerOf(o, table.Consumer, fieldsOf(table.Columns), table.Key), connOf: db},
		constraint:   table.Constraint,
		relname:      strings.Trim(name, `"`),
	}
	in.wake = newRelayWake(!o.NoNotify, db, in, in.ob.log)
	in.part = in.handle
	return in
}

func (in *EntityInbox[M, R]) handle(ctx context.Context, msg M, d deliveryOf, _ *int) (R, idem.Outcome, error) {
	var zero R
	key, fp, conn := d.key, d.fp, d.conn

	// BEGIN and the setting go with the handler's first statement.
	tx := &lazyTx{conn: conn, opts: in.txOptions, setup: query{setFingerprint, []any{hex.EncodeToString(fp)}}}
	var out *idem.Outbox
	if in.publishing {
		out = &idem.Outbox{}
	}
	htx := newHandlerTx(tx, conn)
	result, err := callHandler(ctx, conn, htx, func(ctx context.Context, tx pgx.Tx) (R, error) { return in.handler(ctx, tx, out, msg) }, out)
	if err != nil {
		dup, derr := in.isDuplicate(ctx, conn, err)
		if derr != nil {
			pgutil.Rollback(ctx, conn)
			return zero, 0, in.fail(key, fmt.Errorf("idem: %w (after the handler's error: %v)", derr, err))
		}
		if dup {
			return in.readBack(ctx, conn, key, fp, msg)
		}
		pgutil.Rollback(ctx, conn)
		return zero, 0, in.classify(key, fmt.Errorf("idem: handler: %w", err))
	}
	if in.beforeCommit != nil {
		if err := runBeforeCommit(ctx, conn, tx, in.beforeCommit); err != nil {
			pgutil.Rollback(ctx, conn)
			return zero, 0, in.fail(key, fmt.Errorf("idem: before commit: %w", err))
		}
	}
	if !tx.begun() {
		return zero, 0, in.fail(key, in.noRow(key, errNoStatement))
	}
	if err := stillInTransaction(conn); err != nil {
		pgutil.Rollback(ctx, conn)
		return zero, 0, in.fail(key, err)
	}
	if err := in.commit(ctx, conn, key, out); err != nil {
		pgutil.Rollback(ctx, conn)
		return zero, 0, in.classify(key, err)
	}
	return result, idem.Processed, nil
}

// setFingerprint sets FingerprintSetting for the transaction only.
const setFingerprint = "SELECT set_config('" + FingerprintSetting + "', $1::text, true)"

// isDuplicate reports whether the handler's error is a unique violation of
// the entity table's constraint: the duplicate signal. Any other error, a
// unique violation of another constraint included, is the handler's.
func (in *EntityInbox[M, R]) isDuplicate(ctx context.Context, conn *pgx.Conn, err error) (bool, error) {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != pgerrcode.UniqueViolation || pgErr.TableName != in.relname {
		return false, nil
	}
	constraint, cerr := in.resolveConstraint(ctx, conn)
	if cerr != nil {
		return false, cerr
	}
	return pgErr.ConstraintName == constraint, nil
}

// resolveConstraint returns the name of the table's unique constraint over
// its key columns: EntityTable.Constraint, or the one the catalog has (found
// once, after the aborted transaction is rolled back).
func (in *EntityInbox[M, R]) resolveConstraint(ctx context.Context, conn *pgx.Conn) (string, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.constraint != "" {
		return in.constraint, nil
	}
	pgutil.Rollback(ctx, conn)
	var names []string
	columns := make([]string, len(in.table.Columns))
	for i, c := range in.table.Columns {
		columns[i] = unquote(c.Name)
	}
	rows, err := conn.Query(ctx, findConstraint, in.table.Name, columns)
	if err == nil {
		names, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	switch {
	case err != nil:
		return "", fmt.Errorf("look up the unique constraint of %s over (%s): %w", in.table.Name, strings.Join(columns, ", "), err)
	case len(names) == 0:
		return "", fmt.Errorf("%s has no unique constraint or unique index over exactly (%s), so a duplicate delivery cannot be told from another unique violation: "+
			"add one (PRIMARY KEY or UNIQUE over those columns), or name one with constraint= in the directive", in.table.Name, strings.Join(columns, ", "))
	}
	in.constraint = names[0]
	return in.constraint, nil
}

// findConstraint lists the unique indexes (those of PRIMARY KEY and UNIQUE
// constraints included: a constraint and its index share their name) of
// table $1 whose columns are exactly $2, in any order, without a predicate
// or an expression; the primary key first.
const findConstraint = `SELECT c.relname::text FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
WHERE i.indrelid = $1::text::regclass AND i.indisunique AND i.indpred IS NULL AND i.indexprs IS NULL
  AND (SELECT array_agg(a.attname::text ORDER BY a.attname) FROM unnest(i.indkey) AS k(n) JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.n)
    = (SELECT array_agg(x ORDER BY x) FROM unnest($2::text[]) AS x)
ORDER BY i.indisprimary DESC, c.relname`

// commit writes the outgoing messages, checks that the marker row is there
// with this delivery's fingerprint (a handler that did not insert it, or
// inserted it with ON CONFLICT DO NOTHING, would leave the message
// unrecorded: the check fails and the COMMIT after it rolls back), and
// commits, in one round trip; then, unless WithoutNotify, it has the relays
// woken (relayWake).
func (in *EntityInbox[M, R]) commit(ctx context.Context, conn *pgx.Conn, key []any, out *idem.Outbox) error {
	b := pgutil.NewBatch(4)
	published := queueOutgoing(b, in.table.Consumer, in.fields, [][]any{key}, []*idem.Outbox{out})
	q := in.sql.checkMarker(key)
	b.Queue(q.sql, q.args...)
	br, done, err := sendCommit(ctx, conn, b)
	if err != nil {
		return fmt.Errorf("idem: %w before the commit; the transaction was rolled back", err)
	}
	defer done()
	if published > 0 {
		if _, err = br.Exec(); err != nil && !pgutil.HasSQLState(err, pgerrcode.InFailedSQLTransaction) {
			err = errOutboxInsert(published, err)
		}
	}
	if err == nil {
		if _, err = br.Exec(); isMarkerCheckFailure(err) {
			err = in.noRow(key, nil)
		}
	}
	var committed pgconn.CommandTag
	if err == nil {
		committed, err = br.Exec()
	}
	if closeErr := br.Close(); err == nil {
		err = closeErr
	}
	switch {
	case pgutil.HasSQLState(err, pgerrcode.InFailedSQLTransaction) || (err == nil && committed.String() == "ROLLBACK"):
		return errAborted
	case err != nil && strings.HasPrefix(err.Error(), "idem:"):
		return err
	case err != nil:
		in.wake.committed(published) // the COMMIT's outcome is unknown
		return fmt.Errorf("idem: check the entity row and commit: %w", err)
	}
	in.wake.committed(published)
	return nil
}

// noRow explains a handler that returned without inserting its row.
func (in *EntityInbox[M, R]) noRow(key []any, why error) error {
	what := "did it use ON CONFLICT DO NOTHING, or another key?"
	if why != nil {
		what = "it " + why.Error()
	}
	return fmt.Errorf("idem: the handler returned without inserting the row of key %s into %s with this delivery's fingerprint (%s); "+
		"in mode=entity that row is the message's only record, so nothing was committed", pgutil.FormatKey(in.fields, key), in.table.Name, what)
}

// MarkerCheckMessage is the text of the error the check before COMMIT of an
// EntityInbox raises.
const MarkerCheckMessage = "idem: no entity row with this fingerprint"

func isMarkerCheckFailure(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == pgerrcode.InvalidTextRepresentation && strings.Contains(pgErr.Message, MarkerCheckMessage)
}

// readBack resolves a delivery whose insert collided with the key's row: it
// rolls back and reads the row's fingerprint in a fresh snapshot, in one
// round trip once the lookup is prepared on the connection, and for an equal
// one reads the result back (result=) in a read-only transaction.
func (in *EntityInbox[M, R]) readBack(ctx context.Context, conn *pgx.Conn, key []any, fp []byte, msg M) (R, idem.Outcome, error) {
	var zero R
	stored, err := in.lookup(ctx, conn, key)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) && !conn.IsClosed() && conn.PgConn().TxStatus() != txIdle {
		// The aborted transaction refused the lookup's Parse, which pgx
		// sends ahead of the pipeline for a statement it has not prepared
		// on this connection yet: roll back on its own, then look up.
		pgutil.Rollback(ctx, conn)
		stored, err = in.lookup(ctx, conn, key)
	}
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return zero, 0, in.retryable(key, fmt.Errorf("idem: the handler's insert collided with a row of %s that was gone when read back", in.table.Name))
	case err != nil:
		pgutil.Rollback(ctx, conn)
		return zero, 0, in.fail(key, fmt.Errorf("idem: read the entity row's fingerprint: %w", err))
	case stored == nil:
		return zero, 0, in.fail(key, fmt.Errorf("%w: the row of %s has no fingerprint (%s is NULL: it was written outside the wrapper, or before the migration that added the column), so the message cannot be told a duplicate", idem.ErrKeyReused, in.table.Name, FingerprintColumn))
	}
	switch same, err := sameFingerprint(stored, fp); {
	case err != nil:
		return zero, 0, in.fail(key, err)
	case !same:
		return zero, 0, in.fail(key, idem.ErrKeyReused)
	}
	if in.result == nil {
		return zero, idem.Duplicate, nil
	}
	result, err := in.readResult(ctx, conn, msg)
	if err != nil {
		return zero, 0, in.fail(key, fmt.Errorf("idem: read the result back (result=): %w", err))
	}
	return result, idem.Duplicate, nil
}

// lookup reads the fingerprint of key's row, after rolling back the
// connection's transaction in the same round trip (the collision aborted it).
func (in *EntityInbox[M, R]) lookup(ctx context.Context, conn *pgx.Conn, key []any) ([]byte, error) {
	b := pgutil.NewBatch(2)
	rb := conn.PgConn().TxStatus() != txIdle
	if rb {
		b.Queue("rollback")
	}
	q := in.sql.lookupKey(key)
	b.Queue(q.sql, q.args...)
	br := conn.SendBatch(ctx, b)
	var stored []byte
	var err error
	if rb {
		_, err = br.Exec()
	}
	if err == nil {
		err = br.QueryRow().Scan(&stored)
	}
	if closeErr := br.Close(); err == nil {
		err = closeErr
	}
	return stored, err
}

// readResult runs the result= function in a read-only transaction.
func (in *EntityInbox[M, R]) readResult(ctx context.Context, conn *pgx.Conn, msg M) (r R, err error) {
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		return r, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	return in.result(ctx, tx, msg)
}

// classify wraps err for key, marking serialization failures and deadlocks
// retryable.
func (in *EntityInbox[M, R]) classify(key []any, err error) error {
	if pgutil.HasSQLState(err, pgerrcode.SerializationFailure, pgerrcode.DeadlockDetected) {
		return in.retryable(key, err)
	}
	return in.fail(key, err)
}
