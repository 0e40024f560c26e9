package idemimpl

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemgen/idemgen/idem/internal/pgutil"
)

// The transaction status of a connection, as the server reports it in every
// ReadyForQuery message and pgconn.PgConn.TxStatus returns it.
const (
	txIdle   byte = 'I' // not inside a transaction block
	txActive byte = 'T' // inside a transaction block
	txFailed byte = 'E' // inside a failed transaction block: statements are refused until it ends
)

// errTxOwned is returned when a handler tries to end the transaction it was
// given: the inbox row and the result must commit with the handler's writes.
var errTxOwned = errors.New("idem: the inbox commits or rolls back the handler's transaction; return an error to roll back")

// handlerTx is the pgx.Tx a handler receives. It refuses Commit and Rollback,
// and once the inbox has ended the transaction every method fails with
// pgx.ErrTxClosed, so a handler that keeps the Tx beyond its return cannot
// write through a connection that is back in the pool.
//
// A handler can try to end the transaction through SQL (tx.Exec(ctx,
// "COMMIT"), END, ROLLBACK, ABORT, or a BEGIN): such a statement is refused
// before it is sent (transactionControl), even inside a string of several
// statements. What gets around that (a statement sent through tx.Conn(), or
// by the name of a prepared statement) is caught after the fact: after every
// statement handlerTx looks at the connection's transaction status, which
// pgx tracks from the server's replies, and once the connection is outside
// the transaction it refuses every statement, so that nothing the handler
// writes afterwards commits on its own. Either way the delivery fails saying
// what the handler did. Nested transactions (savepoints, through Begin) are
// checked the same way; large objects are those of the real pgx
// transaction.
type handlerTx struct {
	pgx.Tx
	conn      *pgx.Conn
	s         *txState
	savepoint bool // a nested transaction: Commit and Rollback are its own
	// lazy, for a mode=entity or an optimistic mode=tx delivery, begins
	// the transaction with the handler's first statement: until then the
	// connection is idle on purpose.
	lazy *lazyTx
}

// txState is shared by a handler's Tx and the savepoints it begins.
type txState struct {
	// ended: the inbox ended the transaction (the handler returned).
	ended bool
	// escaped: the handler ended it; what it did.
	escaped error
}

func newHandlerTx(tx pgx.Tx, conn *pgx.Conn) *handlerTx {
	t := &handlerTx{Tx: tx, conn: conn, s: &txState{}}
	if l, ok := tx.(*lazyTx); ok {
		t.lazy = l
	}
	return t
}

// before is checked before every statement: the Tx is usable only while the
// inbox's transaction is open and the connection is inside it.
func (t *handlerTx) before() error {
	switch {
	case t.s.ended:
		return pgx.ErrTxClosed
	case t.s.escaped != nil:
		return t.s.escaped
	case t.lazy != nil && t.lazy.stop != nil:
		return t.lazy.stop
	case t.lazy != nil && !t.lazy.begun():
	case !t.conn.IsClosed() && t.conn.PgConn().TxStatus() == txIdle:
		// Ended by a statement that did not go through this Tx (through
		// tx.Conn(), say).
		t.s.escaped = errors.New("idem: the connection was outside the inbox's transaction before a statement of the handler: a statement sent around the handler's Tx (through tx.Conn()) ended it; " + escapeAdvice)
		return t.s.escaped
	}
	return nil
}

// beforeSending is before, and then refuse for sql.
func (t *handlerTx) beforeSending(sql string) error {
	if err := t.before(); err != nil {
		return err
	}
	return t.refuse(sql)
}

// refuse refuses, before it is sent, a statement that would end the
// inbox's transaction or begin another (transactionControl): the Tx is then
// unusable, as after a statement that ended the transaction, and the
// delivery fails.
func (t *handlerTx) refuse(sql string) error {
	words, effect := transactionControl(sql)
	if words == "" {
		return nil
	}
	what := fmt.Sprintf("statement %s %s: it was not sent", quoteSQL(sql), effect)
	if end := statementEnd(sql, 0); strings.TrimSpace(sql[min(end+1, len(sql)):]) != "" {
		what = fmt.Sprintf("statements %s hold a %s, which %s: none of them was sent", quoteSQL(sql), words, effect)
	}
	t.s.escaped = fmt.Errorf("idem: the handler's %s; %s", what, escapeAdvice)
	return t.s.escaped
}

const escapeAdvice = "the inbox's transaction must commit the inbox row with the handler's writes, so every later statement of the handler was refused and the delivery fails (return an error to roll back; use tx.Begin for a savepoint)"

// after is checked after every statement: a statement that left the
// connection outside any transaction (or began a new one, as "ROLLBACK;
// BEGIN" does) ended the inbox's transaction.
func (t *handlerTx) after(sql string, tag pgconn.CommandTag) {
	if t.s.escaped != nil || t.conn.IsClosed() {
		return
	}
	outside := t.conn.PgConn().TxStatus() == txIdle
	began := tag.String() == "BEGIN" || tag.String() == "START TRANSACTION"
	if !outside && !began {
		return
	}
	var what string
	switch {
	case began:
		what = "began a transaction of its own (a BEGIN inside the inbox's transaction is either a mistake or follows a statement that ended it): nothing of it is committed"
	case tag.String() == "COMMIT":
		what = "committed the inbox's transaction: what the handler wrote before it is committed"
	case tag.String() == "ROLLBACK":
		what = "rolled the inbox's transaction back: nothing of it is committed"
	default:
		what = "left the connection outside the inbox's transaction"
	}
	t.s.escaped = fmt.Errorf("idem: the handler's statement %s %s; %s", quoteSQL(sql), what, escapeAdvice)
}

// quoteSQL quotes a statement for an error message, shortened.
func quoteSQL(sql string) string {
	const max = 80
	if len(sql) > max {
		return fmt.Sprintf("%q...", sql[:max])
	}
	return fmt.Sprintf("%q", sql)
}

func (t *handlerTx) Begin(ctx context.Context) (pgx.Tx, error) {
	if err := t.before(); err != nil {
		return nil, err
	}
	sp, err := t.Tx.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &handlerTx{Tx: sp, conn: t.conn, s: t.s, savepoint: true, lazy: t.lazy}, nil
}

func (t *handlerTx) Commit(ctx context.Context) error {
	return t.endSavepoint(ctx, t.Tx.Commit, "RELEASE SAVEPOINT")
}

func (t *handlerTx) Rollback(ctx context.Context) error {
	return t.endSavepoint(ctx, t.Tx.Rollback, "ROLLBACK TO SAVEPOINT")
}

// endSavepoint ends a savepoint the handler began (with end, its Commit or
// Rollback); the inbox's own transaction is the inbox's to end.
func (t *handlerTx) endSavepoint(ctx context.Context, end func(context.Context) error, what string) error {
	if t.s.ended {
		return pgx.ErrTxClosed
	}
	if !t.savepoint {
		return errTxOwned
	}
	if err := t.before(); err != nil {
		return err
	}
	err := end(ctx)
	t.after(what, pgconn.CommandTag{})
	return err
}

func (t *handlerTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	if err := t.before(); err != nil {
		return 0, err
	}
	n, err := t.Tx.CopyFrom(ctx, table, columns, src)
	t.after("COPY "+table.Sanitize(), pgconn.CommandTag{})
	if err == nil {
		err = t.s.escaped
	}
	return n, err
}

func (t *handlerTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if err := t.before(); err != nil {
		return pgx.FailedBatchResults(b, err)
	}
	for _, q := range b.QueuedQueries {
		if err := t.refuse(q.SQL); err != nil {
			return pgx.FailedBatchResults(b, err)
		}
	}
	return &checkedBatch{BatchResults: t.Tx.SendBatch(ctx, b), t: t}
}

func (t *handlerTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if err := t.beforeSending(sql); err != nil {
		return nil, err
	}
	return t.Tx.Prepare(ctx, name, sql)
}

func (t *handlerTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if err := t.beforeSending(sql); err != nil {
		return pgconn.CommandTag{}, err
	}
	tag, err := t.Tx.Exec(ctx, sql, args...)
	t.after(sql, tag)
	if err == nil {
		err = t.s.escaped
	}
	return tag, err
}

func (t *handlerTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if err := t.beforeSending(sql); err != nil {
		return pgutil.Fail(err), err
	}
	rows, err := t.Tx.Query(ctx, sql, args...)
	if err != nil {
		t.after(sql, pgconn.CommandTag{})
		return rows, err
	}
	return &checkedRows{Rows: rows, t: t, sql: sql}, nil
}

func (t *handlerTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if err := t.before(); err != nil {
		return pgutil.Fail(err)
	}
	rows, err := t.Query(ctx, sql, args...)
	if err != nil {
		return pgutil.Fail(err)
	}
	return checkedRow{rows.(*checkedRows)}
}

// checkedRows checks the transaction status once the statement's rows are
// read (the status arrives with the end of the statement).
type checkedRows struct {
	pgx.Rows
	t   *handlerTx
	sql string
}

func (r *checkedRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.t.after(r.sql, r.Rows.CommandTag())
	return false
}

func (r *checkedRows) Close() {
	r.Rows.Close()
	r.t.after(r.sql, r.Rows.CommandTag())
}

func (r *checkedRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.t.s.escaped
}

// checkedRow is QueryRow's row: pgx's Row semantics over checkedRows.
type checkedRow struct{ rows *checkedRows }

func (r checkedRow) Scan(dest ...any) error { return scanOne(r.rows, dest) }

// scanOne is pgx.Row's Scan over rows: the first row into dest,
// pgx.ErrNoRows without one, and rows closed, whose error wins.
func scanOne(rows pgx.Rows, dest []any) error {
	defer rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := rows.Scan(dest...); err != nil {
		return err
	}
	rows.Close()
	return rows.Err()
}

// checkedBatch checks the transaction status when the batch is closed.
type checkedBatch struct {
	pgx.BatchResults
	t      *handlerTx
	closed bool
}

func (b *checkedBatch) Close() error {
	err := b.BatchResults.Close()
	if !b.closed {
		b.closed = true
		b.t.after("a statement of the batch", pgconn.CommandTag{})
	}
	if err == nil {
		err = b.t.s.escaped
	}
	return err
}

// stillInTransaction verifies, before the commit, that the connection is
// still inside the delivery's transaction (even when something ended it
// around the handler's Tx, through tx.Conn()): committing whatever
// transaction it is in now would commit the handler's later writes without
// the inbox row.
func stillInTransaction(conn *pgx.Conn) error {
	if s := conn.PgConn().TxStatus(); s != txActive && s != txFailed && !conn.IsClosed() {
		return errOutsideBeforeCommit
	}
	return nil
}

// errOutsideBeforeCommit is what stillInTransaction reports.
var errOutsideBeforeCommit = errors.New("idem: the connection was outside the inbox's transaction before the commit: the handler ended it through SQL sent around its Tx (through tx.Conn()); nothing was committed by the inbox")
