// Package catalog is a small catalog service with the two handlers that need
// no inbox table (docs/natural.md): PlaceOrder, whose orders row is itself the
// marker of its message (mode=entity), and SetPrice, an upsert of absolute
// values that is idempotent by construction (mode=natural).
package catalog

//go:generate go run github.com/idemgen/idemgen/cmd/idemgen -migrations migrations .

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// OrderPlaced is published by the storefront when a customer checks out.
type OrderPlaced struct {
	OrderID  string `json:"order_id"`
	Customer string `json:"customer"`
	SKU      string `json:"sku"`
	Quantity int64  `json:"quantity"`
	// Coupon, optional, can be redeemed by one order only (a UNIQUE column
	// of orders besides its key).
	Coupon string `json:"coupon,omitempty"`
}

// OrderReceipt is what PlaceOrder returns, and what a redelivery of the same
// order reads back (ReadOrder).
type OrderReceipt struct {
	OrderID    string `json:"order_id"`
	TotalCents int64  `json:"total_cents"`
}

// PriceSet is published by the pricing team's tool: the price of a SKU from
// now on, an absolute value.
type PriceSet struct {
	SKU      string `json:"sku"`
	Cents    int64  `json:"cents"`
	Currency string `json:"currency"`
}

// Service handles the catalog's messages.
type Service struct{}

// ErrUnknownSKU is returned for an order of a SKU that has no price.
var ErrUnknownSKU = errors.New("catalog: unknown SKU")

// PlaceOrder records an order at the SKU's current price. The orders row is
// the message's marker: its primary key is the order id, so a redelivery's
// INSERT collides with it, and the wrapper answers Duplicate with the
// receipt ReadOrder reads back.
//
//idem:handler consumer=catalog.order key=OrderID mode=entity table=orders columns=id result=ReadOrder fixture=placeOrderFixture
func (s *Service) PlaceOrder(ctx context.Context, tx pgx.Tx, msg OrderPlaced) (OrderReceipt, error) {
	var total int64
	err := tx.QueryRow(ctx,
		`INSERT INTO orders (id, customer, sku, quantity, total_cents, coupon)
		 SELECT $1, $2, p.sku, $4, p.cents * $4, NULLIF($5, '') FROM prices p WHERE p.sku = $3
		 RETURNING total_cents`,
		msg.OrderID, msg.Customer, msg.SKU, msg.Quantity, msg.Coupon).Scan(&total)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return OrderReceipt{}, fmt.Errorf("%w %s", ErrUnknownSKU, msg.SKU)
	case err != nil:
		return OrderReceipt{}, fmt.Errorf("insert order %s: %w", msg.OrderID, err)
	}
	return OrderReceipt{OrderID: msg.OrderID, TotalCents: total}, nil
}

// ReadOrder reads the receipt of a placed order back, for the duplicates of
// its message (result= of PlaceOrder).
func ReadOrder(ctx context.Context, tx pgx.Tx, orderID string) (OrderReceipt, error) {
	r := OrderReceipt{OrderID: orderID}
	err := tx.QueryRow(ctx, `SELECT total_cents FROM orders WHERE id = $1`, orderID).Scan(&r.TotalCents)
	return r, err
}

// SetPrice sets a SKU's price. It writes absolute values on the natural key
// (an upsert), so running it again changes nothing and it needs no marker;
// its generated test proves it against the fixture's snapshot of prices.
//
//idem:handler consumer=catalog.price key=SKU mode=natural fixture=setPriceFixture
func (s *Service) SetPrice(ctx context.Context, tx pgx.Tx, msg PriceSet) error {
	_, err := tx.Exec(ctx,
		`INSERT INTO prices (sku, cents, currency) VALUES ($1, $2, $3)
		 ON CONFLICT (sku) DO UPDATE SET cents = EXCLUDED.cents, currency = EXCLUDED.currency, updated_at = now()`,
		msg.SKU, msg.Cents, msg.Currency)
	return err
}
