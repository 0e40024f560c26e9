package ledger

import (
	"context"
	"testing"

	"github.com/idemgen/idemgen/idem/idemtest"
)

// postFixture is the fixture of the generated TestPostIdem: an account with
// balance 0, a deposit to it, and the effect counted as the number of times
// the deposit's amount was credited.
func postFixture(t testing.TB, db *idemtest.DB) idemtest.Fixture[idemtest.NoReceiver, Deposit] {
	account := idemtest.UniqueInt[int64]()
	if _, err := db.Pool.Exec(context.Background(), `INSERT INTO accounts (id, balance) VALUES ($1, 0)`, account); err != nil {
		t.Fatal(err)
	}
	return idemtest.Fixture[idemtest.NoReceiver, Deposit]{
		Message: Deposit{MessageID: idemtest.UniqueString[string](), Account: account, Amount: 5},
		Variant: func(msg Deposit) Deposit {
			msg.Amount++
			return msg
		},
		Effect: func(ctx context.Context, db *idemtest.DB, msg Deposit) (int, error) {
			var credited int
			err := db.Pool.QueryRow(ctx, `SELECT balance / $2 FROM accounts WHERE id = $1`, msg.Account, msg.Amount).Scan(&credited)
			return credited, err
		},
	}
}

// postAllFixture is the fixture of the generated TestPostAllIdem: Post's,
// for PostAll's consumer (the same tables, the same effect).
func postAllFixture(t testing.TB, db *idemtest.DB) idemtest.Fixture[idemtest.NoReceiver, Deposit] {
	return postFixture(t, db)
}
