package idemimpl

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/internal/link"
	"github.com/idemgen/idemgen/idem/internal/pgutil"
)

// The handler's part of a delivery in a transaction, the same in every mode
// that has one (tx, entity, natural, and the batches of mode=tx).

// callHandler runs a handler with the delivery's Tx: a panic rolls the
// transaction back before it goes on up the stack, a handler that ended the
// transaction through SQL fails with what it did, and once it returned, tx
// and out refuse further use.
func callHandler[R any](ctx context.Context, conn *pgx.Conn, tx *handlerTx, run func(context.Context, pgx.Tx) (R, error), out *idem.Outbox) (result R, err error) {
	defer func() {
		tx.s.ended = true
		if out != nil {
			link.OutboxBuffer(out).Closed = true
		}
		if p := recover(); p != nil {
			pgutil.Rollback(ctx, conn)
			panic(p)
		}
		if tx.s.escaped != nil {
			var zero R
			result, err = zero, tx.s.escaped
		}
	}()
	return run(ctx, tx)
}

// runBeforeCommit runs a WithBeforeCommit hook with the handler's
// transaction, under the same rules as the handler: it cannot end the
// transaction or use it after returning, and a panic rolls back before it
// goes on up the stack. A transaction that a failed statement of the handler
// aborted is left to the commit, which reports it.
func runBeforeCommit(ctx context.Context, conn *pgx.Conn, tx pgx.Tx, hook func(context.Context, pgx.Tx) error) (err error) {
	if conn.PgConn().TxStatus() == txFailed {
		return nil
	}
	htx := newHandlerTx(tx, conn)
	if l, ok := tx.(*lazyTx); ok {
		htx.lazy = l
	}
	defer func() {
		htx.s.ended = true
		if p := recover(); p != nil {
			pgutil.Rollback(ctx, conn)
			panic(p)
		}
		if htx.s.escaped != nil {
			err = htx.s.escaped
		}
	}()
	return hook(ctx, htx)
}
