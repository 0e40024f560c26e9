package idem

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// errTxOwned is returned when a handler tries to end the transaction it was
// given: the inbox row and the result must commit with the handler's writes.
var errTxOwned = errors.New("idem: the inbox commits or rolls back the handler's transaction; return an error to roll back")

// handlerTx is the pgx.Tx a handler receives. It refuses Commit and Rollback,
// and once the inbox has ended the transaction every method fails with
// pgx.ErrTxClosed, so a handler that keeps the Tx beyond its return cannot
// write through a connection that is back in the pool. Nested transactions
// (savepoints) and large objects are those of the real pgx transaction.
type handlerTx struct {
	pgx.Tx
	ended bool
}

func (t *handlerTx) Begin(ctx context.Context) (pgx.Tx, error) {
	if t.ended {
		return nil, pgx.ErrTxClosed
	}
	return t.Tx.Begin(ctx)
}

func (t *handlerTx) Commit(context.Context) error {
	if t.ended {
		return pgx.ErrTxClosed
	}
	return errTxOwned
}

func (t *handlerTx) Rollback(context.Context) error {
	if t.ended {
		return pgx.ErrTxClosed
	}
	return errTxOwned
}

func (t *handlerTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	if t.ended {
		return 0, pgx.ErrTxClosed
	}
	return t.Tx.CopyFrom(ctx, table, columns, src)
}

func (t *handlerTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if t.ended {
		return pgx.FailedBatchResults(b, pgx.ErrTxClosed)
	}
	return t.Tx.SendBatch(ctx, b)
}

func (t *handlerTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if t.ended {
		return nil, pgx.ErrTxClosed
	}
	return t.Tx.Prepare(ctx, name, sql)
}

func (t *handlerTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if t.ended {
		return pgconn.CommandTag{}, pgx.ErrTxClosed
	}
	return t.Tx.Exec(ctx, sql, args...)
}

func (t *handlerTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if t.ended {
		return closedRows{}, pgx.ErrTxClosed
	}
	return t.Tx.Query(ctx, sql, args...)
}

func (t *handlerTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if t.ended {
		return closedRows{}
	}
	return t.Tx.QueryRow(ctx, sql, args...)
}

// closedRows is what Query and QueryRow return once the transaction ended.
type closedRows struct{}

func (closedRows) Close()                                       {}
func (closedRows) Err() error                                   { return pgx.ErrTxClosed }
func (closedRows) CommandTag() pgconn.CommandTag                { return pgconn.CommandTag{} }
func (closedRows) FieldDescriptions() []pgconn.FieldDescription { return nil }
func (closedRows) Next() bool                                   { return false }
func (closedRows) Scan(...any) error                            { return pgx.ErrTxClosed }
func (closedRows) Values() ([]any, error)                       { return nil, pgx.ErrTxClosed }
func (closedRows) RawValues() [][]byte                          { return nil }
func (closedRows) Conn() *pgx.Conn                              { return nil }
func (closedRows) TypeMap() *pgtype.Map                         { return nil }
