package idemimpl

import (
	"context"
	"fmt"

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

// queueOutgoing queues on b, for the commit's round trip, the outbox rows of
// what the deliveries of keys published (outs[k], nil for a handler without
// an outbox), and returns how many rows it queued. The NOTIFY that wakes the
// relays is not in the round trip: once the commit is acknowledged, the
// caller hands it to the DB's notifier (notifyCommitted), which coalesces it
// with those of the other commits.
func queueOutgoing(b *pgx.Batch, consumer string, fields []string, keys [][]any, outs []*idem.Outbox) (published int) {
	msgs := make([][]link.Message, len(outs))
	for k, out := range outs {
		if out != nil {
			msgs[k] = link.OutboxBuffer(out).Msgs
		}
	}
	return queueOutbox(b, consumer, fields, keys, msgs)
}

// sendCommit queues COMMIT on b and sends the round trip, unless ctx is done
// already: then nothing is sent, the transaction is to be rolled back and
// the outcome is known, and it returns ctx's error. Once the COMMIT is on its
// way, the caller's cancellation must not cut the round trip short: a COMMIT
// whose reply is never read has an unknown outcome, and a consumer that
// stops (cancelling its deliveries) would leave a committed message
// unacked, to come back as a Duplicate. So the round trip runs to its end,
// bounded by commitTimeout instead; call done when its results are read.
func sendCommit(ctx context.Context, conn *pgx.Conn, b *pgx.Batch) (br pgx.BatchResults, done context.CancelFunc, err error) {
	b.Queue("commit")
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commitTimeout)
	return conn.SendBatch(cctx, b), cancel, nil
}

// readyToCommit runs the WithBeforeCommit hook, if there is one
// (runBeforeCommit), and checks that the connection is still in the
// delivery's transaction (stillInTransaction): the last steps before a
// commit round trip. On an error it rolls back.
func readyToCommit(ctx context.Context, conn *pgx.Conn, tx pgx.Tx, hook func(context.Context, pgx.Tx) error) error {
	if hook != nil {
		if err := runBeforeCommit(ctx, conn, tx, hook); err != nil {
			pgutil.Rollback(ctx, conn)
			return fmt.Errorf("idem: before commit: %w", err)
		}
	}
	if err := stillInTransaction(conn); err != nil {
		pgutil.Rollback(ctx, conn)
		return err
	}
	return nil
}
