package idemimpl

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemgen/idemgen/idem/internal/pgutil"
)

// lazyTx is a transaction that begins with the handler's first statement:
// BEGIN and the statement the delivery needs first are not sent on their
// own but in front of that statement, in the same pipeline. A mode=entity
// delivery sends the fingerprint setting there (one round trip for BEGIN,
// set_config and the INSERT, as the bare business transaction has for
// BEGIN and its INSERT). An optimistic mode=tx delivery sends the key's
// lookup there, which also marks the delivery's transaction (see
// Inbox.handle). A first use that cannot carry them (SendBatch, CopyFrom,
// Prepare, a savepoint, large objects) sends them in a round trip of their
// own first.
type lazyTx struct {
	conn *pgx.Conn
	opts pgx.TxOptions
	// setup is queued right after BEGIN. When scan is set, it reads the
	// setup's rows: an error from it stops the delivery (stop).
	setup query
	scan  func(pgx.Rows) error
	tx    pgx.Tx // nil until the transaction began
	// stop, once set, is what every later statement gets: the lookup
	// found the key processed, and the handler is to return.
	stop error
}

func (l *lazyTx) begun() bool { return l.tx != nil }

// queue queues BEGIN and the setup on b.
func (l *lazyTx) queue(b *pgx.Batch) {
	b.BeginTx(l.opts)
	b.Queue(l.setup.sql, l.setup.args...)
}

// read reads what queue queued. An error of scan is stop: the
// transaction began all the same, and the caller rolls it back.
func (l *lazyTx) read(br pgx.BatchResults) error {
	l.tx = br.Tx()
	if _, err := br.Exec(); err != nil { // BEGIN
		return err
	}
	if l.scan == nil {
		_, err := br.Exec()
		return err
	}
	rows, err := br.Query()
	if err != nil {
		return err
	}
	if err := l.scan(rows); err != nil {
		rows.Close()
		l.stop = err
		return err
	}
	rows.Close()
	return rows.Err()
}

// begin begins the transaction on its own, if it has not begun.
func (l *lazyTx) begin(ctx context.Context) error {
	if l.tx != nil {
		return l.stop
	}
	b := pgutil.NewBatch(2)
	l.queue(b)
	br := l.conn.SendBatch(ctx, b)
	err := l.read(br)
	if closeErr := br.Close(); err == nil {
		err = closeErr
	}
	return err
}

// send sends BEGIN, the setup and the statement in one pipeline
// and returns the batch with the statement's result next to read.
func (l *lazyTx) send(ctx context.Context, sql string, args []any) (pgx.BatchResults, error) {
	b := pgutil.NewBatch(3)
	l.queue(b)
	b.Queue(sql, args...)
	br := l.conn.SendBatch(ctx, b)
	if err := l.read(br); err != nil {
		_ = br.Close()
		return nil, err
	}
	return br, nil
}

func (l *lazyTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if l.tx != nil {
		return l.tx.Exec(ctx, sql, args...)
	}
	br, err := l.send(ctx, sql, args)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	tag, err := br.Exec()
	if closeErr := br.Close(); err == nil {
		err = closeErr
	}
	return tag, err
}

func (l *lazyTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if l.tx != nil {
		return l.tx.Query(ctx, sql, args...)
	}
	br, err := l.send(ctx, sql, args)
	if err != nil {
		return pgutil.Fail(err), err
	}
	rows, err := br.Query()
	if err != nil {
		_ = br.Close()
		return rows, err
	}
	return &batchRows{Rows: rows, br: br}, nil
}

func (l *lazyTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	rows, err := l.Query(ctx, sql, args...)
	if err != nil {
		return pgutil.Fail(err)
	}
	return firstRow{rows}
}

func (l *lazyTx) Begin(ctx context.Context) (pgx.Tx, error) {
	if err := l.begin(ctx); err != nil {
		return nil, err
	}
	return l.tx.Begin(ctx)
}

func (l *lazyTx) Commit(ctx context.Context) error {
	if l.tx == nil {
		return nil
	}
	return l.tx.Commit(ctx)
}

func (l *lazyTx) Rollback(ctx context.Context) error {
	if l.tx == nil {
		return nil
	}
	return l.tx.Rollback(ctx)
}

func (l *lazyTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	if err := l.begin(ctx); err != nil {
		return 0, err
	}
	return l.tx.CopyFrom(ctx, table, columns, src)
}

func (l *lazyTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if err := l.begin(ctx); err != nil {
		return pgx.FailedBatchResults(b, err)
	}
	return l.tx.SendBatch(ctx, b)
}

func (l *lazyTx) LargeObjects() pgx.LargeObjects {
	_ = l.begin(context.Background())
	return l.tx.LargeObjects()
}

func (l *lazyTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if err := l.begin(ctx); err != nil {
		return nil, err
	}
	return l.tx.Prepare(ctx, name, sql)
}

func (l *lazyTx) Conn() *pgx.Conn { return l.conn }

// batchRows are the rows of the handler's first statement, read from the
// pipeline that began the transaction: the pipeline is closed (its
// ReadyForQuery read, so that the connection's transaction status is known)
// when the rows end.
type batchRows struct {
	pgx.Rows
	br     pgx.BatchResults
	closed bool
	err    error
}

func (r *batchRows) finish() {
	if !r.closed {
		r.closed = true
		r.err = r.br.Close()
	}
}

func (r *batchRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.finish()
	return false
}

func (r *batchRows) Close() {
	r.Rows.Close()
	r.finish()
}

func (r *batchRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.err
}

// firstRow is QueryRow's row over rows: pgx's Row semantics.
type firstRow struct{ rows pgx.Rows }

func (r firstRow) Scan(dest ...any) error { return scanOne(r.rows, dest) }

// errNoStatement is what a mode=entity handler that sent no statement at
// all gets: it cannot have inserted its row.
var errNoStatement = errors.New("sent no statement")
