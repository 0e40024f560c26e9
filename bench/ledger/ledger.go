// Package ledger is the consumer the benchmarks (go run ./bench) measure. Its
// business change is one statement, UPDATE accounts SET balance = balance +
// $1 WHERE id = $2, delivered three ways: without deduplication (Apply on its
// own), through a hand-written inbox (HandWritten) and through the wrapper
// idemgen generates for Post (PostIdem in idem_gen.go).
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

//go:embed migrations/*.sql
var migrations embed.FS

// Migrations returns the goose migrations of the benchmark's tables: the
// accounts, the hand-written inbox and the generated inbox.
func Migrations() fs.FS {
	sub, err := fs.Sub(migrations, "migrations")
	if err != nil {
		panic(err) // the embedded folder is fixed at build time
	}
	return sub
}
