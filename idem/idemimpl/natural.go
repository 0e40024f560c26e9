package idemimpl

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/internal/pgutil"
)

// NaturalTable describes a mode=natural consumer: it records nothing, so it
// has no table; the key is taken apart only to refuse an invalid one and to
// name it in errors.
//
// For generated code: idemgen declares one per mode=natural handler.
type NaturalTable[M any] struct {
	// Consumer is the stable consumer name of the directive.
	Consumer string
	// KeyFields are the Go field paths of the key parts.
	KeyFields []string
	// Key returns the key parts of msg, or an error wrapping ErrInvalidKey.
	Key func(msg M) ([]any, error)
}

// NaturalAttempts is how many times a NaturalInbox runs a delivery whose
// transaction fails with a serialization failure or a deadlock before it
// returns the (retryable) error.
const NaturalAttempts = 10

// NaturalInbox runs a mode=natural handler, one that is idempotent by
// construction (an upsert on the natural key, absolute values): in a
// transaction, retried on serialization failures and deadlocks, with
// nothing recorded. Every delivery, a redelivery included, runs the handler
// and is Processed; the generated test (idemtest.NaturalSuite) proves that
// running it again leaves the state as one run did. It is safe for
// concurrent use; generated wrappers hold one.
//
// Handle runs the handler in a transaction and commits it (Processed). A
// serialization failure or deadlock is retried, up to NaturalAttempts runs
// in all, and then returned marked retryable (errors.Is(err,
// ErrRetryable)); any other error is the handler's, and nothing committed.
//
// Each delivery is counted (idem.deliveries, idem.handler.duration) and
// logged at its outcome's level, as in every mode ([idem.WithMeterProvider],
// [idem.WithLogger]; docs/observability.md).
type NaturalInbox[M, R any] struct {
	db           idem.DB
	table        NaturalTable[M]
	handler      func(context.Context, pgx.Tx, M) (R, error)
	txOptions    pgx.TxOptions
	beforeCommit func(ctx context.Context, tx pgx.Tx) error
	delivery[M, R]
}

// NewNaturalInbox returns the NaturalInbox of table that runs handler.
// Options: WithIsolation (a handler that reads before it writes may need
// REPEATABLE READ or SERIALIZABLE to stay idempotent under concurrency; the
// retries make that cheap), WithBeforeCommit, WithLogger, WithMeterProvider;
// it panics on any other, naming it (a natural consumer claims nothing, so
// has no claim wait, and publishes nothing).
func NewNaturalInbox[M, R any](db idem.DB, table NaturalTable[M], handler func(ctx context.Context, tx pgx.Tx, msg M) (R, error), opts ...idem.Option) *NaturalInbox[M, R] {
	o := newOptions("idemimpl.NewNaturalInbox", table.Consumer, "natural", naturalModeOptions, opts)
	in := &NaturalInbox[M, R]{db: db, table: table, handler: handler,
		txOptions: pgx.TxOptions{IsoLevel: o.Isolation}, beforeCommit: o.BeforeCommit,
		delivery: delivery[M, R]{consumerOf: newConsumerOf(o, table.Consumer, table.KeyFields, table.Key), noFingerprint: true, connOf: db}}
	in.part = in.handle
	return in
}

func (in *NaturalInbox[M, R]) handle(ctx context.Context, msg M, d deliveryOf, _ *int) (R, idem.Outcome, error) {
	var zero R
	key, conn := d.key, d.conn
	for attempt := 1; ; attempt++ {
		result, err := in.run(ctx, conn, msg)
		if err == nil {
			return result, idem.Processed, nil
		}
		retry := pgutil.HasSQLState(err, pgerrcode.SerializationFailure, pgerrcode.DeadlockDetected)
		if !retry || attempt == NaturalAttempts || ctx.Err() != nil || conn.IsClosed() {
			return zero, 0, in.fail(key, err)
		}
		// Full jitter over a window that doubles: 2ms, 4ms, ... 512ms.
		backoff := rand.N(time.Duration(2<<min(attempt, 8)) * time.Millisecond)
		select {
		case <-ctx.Done():
			return zero, 0, in.fail(key, err)
		case <-time.After(backoff):
		}
	}
}

// run is one attempt: BEGIN, the handler, the before-commit hook, COMMIT.
func (in *NaturalInbox[M, R]) run(ctx context.Context, conn *pgx.Conn, msg M) (R, error) {
	var zero R
	tx, err := conn.BeginTx(ctx, in.txOptions)
	if err != nil {
		return zero, fmt.Errorf("idem: begin: %w", err)
	}
	result, err := callHandler(ctx, conn, newHandlerTx(tx, conn), func(ctx context.Context, tx pgx.Tx) (R, error) { return in.handler(ctx, tx, msg) }, nil)
	if err != nil {
		pgutil.Rollback(ctx, conn)
		return zero, fmt.Errorf("idem: handler: %w", err)
	}
	if err := readyToCommit(ctx, conn, tx, in.beforeCommit); err != nil {
		return zero, err
	}
	br, done, err := sendCommit(ctx, conn, pgutil.NewBatch(1))
	if err != nil {
		pgutil.Rollback(ctx, conn)
		return zero, fmt.Errorf("idem: %w before the commit; the transaction was rolled back", err)
	}
	defer done()
	tag, err := br.Exec()
	if closeErr := br.Close(); err == nil {
		err = closeErr
	}
	switch {
	case err != nil:
		pgutil.Rollback(ctx, conn)
		return zero, fmt.Errorf("idem: commit: %w", err)
	case tag.String() == "ROLLBACK":
		return zero, errAborted
	}
	return result, nil
}
