// Package ledger is the consumer the benchmarks (go run ./bench) measure. Its
// business change is one statement, UPDATE accounts SET balance = balance +
// $1 WHERE id = $2, delivered three ways: without deduplication (Apply on its
// own), through a hand-written inbox (HandWritten) and through the wrapper
// idemgen generates for Post (PostIdem in idem_gen.go); PostAll makes the
// change of a whole batch in one statement, a set-based handler
// (PostAllIdem).
package ledger

//go:generate go run github.com/idemgen/idemgen/cmd/idemgen -migrations migrations .

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Deposit credits an account. MessageID is the broker's message id, unique
// per message and the same on every redelivery.
type Deposit struct {
	MessageID string `json:"message_id"`
	Account   int64  `json:"account"`
	Amount    int64  `json:"amount"`
}

// Posted is the result of a deposit, stored in the inbox and returned to
// every redelivery.
type Posted struct {
	Account int64 `json:"account"`
	Amount  int64 `json:"amount"`
}

// UpdateBalance is the business change, the same statement in every scenario
// (and in the pgbench scripts).
const UpdateBalance = `UPDATE accounts SET balance = balance + $1 WHERE id = $2`

// ErrUnknownAccount is returned for a deposit to an account that does not
// exist.
var ErrUnknownAccount = errors.New("ledger: unknown account")

// Execer is what Apply needs: a pgx.Tx inside an inbox, or a pool for the
// change on its own.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Apply makes the business change through db: one UPDATE, one round trip.
func Apply(ctx context.Context, db Execer, msg Deposit) (Posted, error) {
	tag, err := db.Exec(ctx, UpdateBalance, msg.Amount, msg.Account)
	if err != nil {
		return Posted{}, fmt.Errorf("ledger: post: %w", err)
	}
	if tag.RowsAffected() != 1 {
		return Posted{}, fmt.Errorf("%w %d", ErrUnknownAccount, msg.Account)
	}
	return Posted{Account: msg.Account, Amount: msg.Amount}, nil
}

// Post is the handler idemgen wraps: Apply in the inbox's transaction.
//
//idem:handler consumer=bench.ledger key=MessageID fixture=postFixture
func Post(ctx context.Context, tx pgx.Tx, msg Deposit) (Posted, error) {
	return Apply(ctx, tx, msg)
}

// UpdateBalances is PostAll's change: every deposit of a batch in one
// statement. The deposits are summed per account first, since an UPDATE ...
// FROM changes each account once however many rows of FROM match it, and the
// accounts are locked in id order (FOR UPDATE applies after the ORDER BY)
// before any is updated: the order the UPDATE would visit them in is the
// plan's (a hash join visits the table in its physical order, which every
// update changes), and two batches that lock shared accounts in different
// orders deadlock.
const UpdateBalances = `WITH d AS (
  SELECT id, sum(amount)::bigint AS amount
  FROM unnest($1::bigint[], $2::bigint[]) AS m (id, amount)
  GROUP BY id
),
locked AS MATERIALIZED (
  SELECT a.id, d.amount FROM accounts AS a JOIN d ON a.id = d.id
  ORDER BY a.id
  FOR UPDATE OF a
)
UPDATE accounts AS a SET balance = a.balance + locked.amount
FROM locked
WHERE a.id = locked.id
RETURNING a.id`

// PostAll is Post for a whole batch: the handler idemgen wraps as a
// set-based one (its message parameter is a slice), so that HandleBatch
// calls it once with every message whose key it freshly claimed, and it
// makes their change in one statement, one round trip, however many they
// are. It returns one Posted a deposit, in the order of msgs. A deposit to
// an unknown account fails the batch with ErrUnknownAccount; the wrapper
// then delivers each message alone, so that only that one fails.
//
//idem:handler consumer=bench.ledger.all key=MessageID fixture=postAllFixture
func PostAll(ctx context.Context, tx pgx.Tx, msgs []Deposit) ([]Posted, error) {
	accounts, amounts := make([]int64, len(msgs)), make([]int64, len(msgs))
	want := make(map[int64]bool, len(msgs))
	for i, msg := range msgs {
		accounts[i], amounts[i] = msg.Account, msg.Amount
		want[msg.Account] = true
	}
	rows, err := tx.Query(ctx, UpdateBalances, accounts, amounts)
	if err != nil {
		return nil, fmt.Errorf("ledger: post %d deposits: %w", len(msgs), err)
	}
	updated, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("ledger: post %d deposits: %w", len(msgs), err)
	}
	for _, id := range updated {
		delete(want, id)
	}
	for _, msg := range msgs {
		if want[msg.Account] {
			return nil, fmt.Errorf("%w %d", ErrUnknownAccount, msg.Account)
		}
	}
	posted := make([]Posted, len(msgs))
	for i, msg := range msgs {
		posted[i] = Posted{Account: msg.Account, Amount: msg.Amount}
	}
	return posted, nil
}

//go:embed migrations/*.sql
var migrations embed.FS

// Migrations returns the goose migrations of the benchmark's tables: the
// accounts, the hand-written inbox and the generated inboxes.
func Migrations() fs.FS {
	sub, err := fs.Sub(migrations, "migrations")
	if err != nil {
		panic(err) // the embedded folder is fixed at build time
	}
	return sub
}
