package idem

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// callBeforeCommit runs the WithBeforeCommit hook with the handler's
// transaction, under the same rules as the handler: it cannot end the
// transaction or use it after returning, and a panic rolls back before it
// goes on up the stack. A transaction that a failed statement of the handler
// aborted is left to complete, which reports it.
func (in *Inbox[M, R]) callBeforeCommit(ctx context.Context, conn *pgx.Conn, tx pgx.Tx) (err error) {
	if conn.PgConn().TxStatus() == txFailed {
		return nil
	}
	htx := newHandlerTx(tx, conn)
	defer func() {
		htx.s.ended = true
		if p := recover(); p != nil {
			rollback(ctx, conn)
			panic(p)
		}
		if htx.s.escaped != nil {
			err = htx.s.escaped
		}
	}()
	return in.beforeCommit(ctx, htx)
}
