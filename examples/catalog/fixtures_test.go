package catalog

import (
	"context"
	"testing"

	"github.com/idemgen/idemgen/idem/idemtest"
)

// placeOrderFixture seeds a price and returns an order of it, with a coupon
// that Conflict lets another order redeem first.
func placeOrderFixture(t testing.TB, db *idemtest.DB) idemtest.Fixture[*Service, OrderPlaced] {
	sku := idemtest.UniqueString[string]()
	if _, err := db.Pool.Exec(context.Background(), `INSERT INTO prices (sku, cents, currency) VALUES ($1, 450, 'EUR')`, sku); err != nil {
		t.Fatal(err)
	}
	return idemtest.Fixture[*Service, OrderPlaced]{
		Receiver: &Service{},
		Message:  OrderPlaced{OrderID: idemtest.UniqueString[string](), Customer: "c-17", SKU: sku, Quantity: 3, Coupon: idemtest.UniqueString[string]()},
		Effect: func(ctx context.Context, db *idemtest.DB, msg OrderPlaced) (int, error) {
			var n int
			err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM orders WHERE id = $1`, msg.OrderID).Scan(&n)
			return n, err
		},
		Conflict: func(ctx context.Context, db *idemtest.DB, msg OrderPlaced) error {
			_, err := db.Pool.Exec(ctx, `INSERT INTO orders (id, customer, sku, quantity, total_cents, coupon) VALUES ($1, 'c-99', $2, 1, 450, $3)`,
				"other-"+msg.OrderID, msg.SKU, msg.Coupon)
			return err
		},
	}
}

// setPriceFixture sets a price, then another SKU's, and snapshots the
// prices without updated_at, which every run sets anew (not the handler's
// effect, and no harm).
func setPriceFixture(t testing.TB, db *idemtest.DB) idemtest.NaturalFixture[*Service, PriceSet] {
	return idemtest.NaturalFixture[*Service, PriceSet]{
		Receiver: &Service{},
		Message:  PriceSet{SKU: "sku-1", Cents: 450, Currency: "EUR"},
		Second:   &PriceSet{SKU: "sku-2", Cents: 1290, Currency: "EUR"},
		Snapshot: `SELECT sku, cents, currency FROM prices ORDER BY sku`,
	}
}
