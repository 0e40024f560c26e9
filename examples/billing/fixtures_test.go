package billing

import (
	"context"
	"testing"

	"github.com/idemgen/idemgen/idem/idemtest"
)

// The fixtures of the generated tests in idem_gen_test.go, named by the
// fixture= option of each handler's directive. Each is called once per
// scenario with the scenario's fresh schema: it seeds what the handler needs,
// returns a message the handler processes, and counts the handler's business
// effect, so that every scenario proves the effect happened exactly once.

func chargeFixture(t testing.TB, db *idemtest.DB) idemtest.Fixture[*Service, OrderPlaced] {
	account := seedAccount(t, db)
	return idemtest.Fixture[*Service, OrderPlaced]{
		Receiver: &Service{},
		Message:  OrderPlaced{OrderID: idemtest.UniqueString[string](), AccountID: account, AmountCents: 1200},
		Variant: func(msg OrderPlaced) OrderPlaced {
			msg.AmountCents++
			return msg
		},
		Effect: func(ctx context.Context, db *idemtest.DB, msg OrderPlaced) (int, error) {
			return count(ctx, db, `SELECT count(*) FROM charges WHERE order_id = $1`, msg.OrderID)
		},
		Conflict: func(ctx context.Context, db *idemtest.DB, msg OrderPlaced) error {
			// The order was charged by another path: the handler's INSERT
			// violates charges_order_id_key.
			_, err := db.Pool.Exec(ctx, `INSERT INTO charges (order_id, account_id, amount_cents) VALUES ($1, $2, 1)`, msg.OrderID, msg.AccountID)
			return err
		},
	}
}

func bookPaymentFixture(t testing.TB, db *idemtest.DB) idemtest.Fixture[*Service, *PaymentReceived] {
	account := seedAccount(t, db)
	return idemtest.Fixture[*Service, *PaymentReceived]{
		Receiver: &Service{},
		Message:  &PaymentReceived{Provider: "stripe", PaymentID: idemtest.UniqueString[string](), AccountID: account, AmountCents: 500},
		Variant: func(msg *PaymentReceived) *PaymentReceived {
			v := *msg
			v.AmountCents++
			return &v
		},
		Effect: func(ctx context.Context, db *idemtest.DB, msg *PaymentReceived) (int, error) {
			return count(ctx, db, `SELECT count(*) FROM payments WHERE provider = $1 AND payment_id = $2`, msg.Provider, msg.PaymentID)
		},
		Conflict: func(ctx context.Context, db *idemtest.DB, msg *PaymentReceived) error {
			// The payment was booked by another path: the handler's INSERT
			// violates payments_pkey.
			_, err := db.Pool.Exec(ctx, `INSERT INTO payments (provider, payment_id, account_id, amount_cents) VALUES ($1, $2, $3, 1)`,
				msg.Provider, msg.PaymentID, msg.AccountID)
			return err
		},
	}
}

func openAccountFixture(t testing.TB, db *idemtest.DB) idemtest.Fixture[idemtest.NoReceiver, OpenAccountRequested] {
	return idemtest.Fixture[idemtest.NoReceiver, OpenAccountRequested]{
		Message: OpenAccountRequested{RequestID: idemtest.UniqueUUID[[16]byte](), AccountID: idemtest.UniqueString[string](), Owner: "Ada"},
		Variant: func(msg OpenAccountRequested) OpenAccountRequested {
			msg.Owner = "Grace"
			return msg
		},
		Effect: func(ctx context.Context, db *idemtest.DB, msg OpenAccountRequested) (int, error) {
			return count(ctx, db, `SELECT count(*) FROM accounts WHERE id = $1`, msg.AccountID)
		},
		Conflict: func(ctx context.Context, db *idemtest.DB, msg OpenAccountRequested) error {
			// The account id is taken: the handler's INSERT violates
			// accounts_pkey.
			_, err := db.Pool.Exec(ctx, `INSERT INTO accounts (id, owner) VALUES ($1, 'someone else')`, msg.AccountID)
			return err
		},
	}
}

// seedAccount opens an account with enough balance for any charge and
// returns its id.
func seedAccount(t testing.TB, db *idemtest.DB) string {
	t.Helper()
	id := idemtest.UniqueString[string]()
	if _, err := db.Pool.Exec(context.Background(), `INSERT INTO accounts (id, owner, balance_cents) VALUES ($1, 'Ada', 1000000)`, id); err != nil {
		t.Fatalf("seed account: %v", err)
	}
	return id
}

func count(ctx context.Context, db *idemtest.DB, sql string, args ...any) (int, error) {
	var n int
	err := db.Pool.QueryRow(ctx, sql, args...).Scan(&n)
	return n, err
}
