package idem_test

import (
	"context"
	"errors"
	"testing"
	"testing/fstest"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemimpl"
	"github.com/idemgen/idemgen/idem/idemtest"
)

type shipment struct {
	Parcel string `json:"parcel"`
	Weight int    `json:"weight"`
}

const shipmentMigration = `-- +goose Up
CREATE TABLE shipped (parcel text PRIMARY KEY, n integer NOT NULL);
-- +goose Down
DROP TABLE shipped;
`

// shipmentTable keys on the broker's message id (key=ID), as a generated
// wrapper of a handler of idem.Message[shipment] does.
var shipmentTable, shipmentTableMigration = idemtest.TextKeyInbox("test.shipment", "idem_test_shipment", "ID",
	func(msg idem.Message[shipment]) string { return msg.ID })

// Both an Inbox and a decorator are Handlers, whatever the result type.
var (
	_ idem.Handler[idem.Message[shipment]] = (*idemimpl.Inbox[idem.Message[shipment], idem.None])(nil)
	_ idem.Handler[deposit]                = (*idemimpl.Inbox[deposit, receipt])(nil)
	_ idem.Handler[deposit]                = idem.HandlerFunc[deposit](nil)
)

// TestMessageRedeliveryIsDuplicate delivers an idem.Message through an Inbox
// keyed on its ID, as a broker adapter does: a redelivery with a higher
// attempt and other headers is a Duplicate, the same ID with another body is
// ErrKeyReused, and Deliver reports what Handle does.
func TestMessageRedeliveryIsDuplicate(t *testing.T) {
	db := idemtest.New(t, fstest.MapFS{"00001_shipment_inbox.sql": {Data: []byte(shipmentTableMigration)}, "00002_shipment.sql": {Data: []byte(shipmentMigration)}})
	ctx := context.Background()
	var h idem.Handler[idem.Message[shipment]] = idemimpl.NewInbox(db.Pool, shipmentTable, idemimpl.NoResult(func(ctx context.Context, tx pgx.Tx, msg idem.Message[shipment]) error {
		_, err := tx.Exec(ctx, `INSERT INTO shipped (parcel, n) VALUES ($1, 1) ON CONFLICT (parcel) DO UPDATE SET n = shipped.n + 1`, msg.Body.Parcel)
		return err
	}))

	msg := idem.Message[shipment]{ID: "amqp-1", Body: shipment{Parcel: "p-1", Weight: 3}, Attempt: 1}
	if o, err := h.Deliver(ctx, msg); o != idem.Processed || err != nil {
		t.Fatalf("first delivery: %v, %v; want processed", o, err)
	}
	msg.Attempt, msg.Headers = 2, map[string]string{"x-delivery-count": "1"}
	if o, err := h.Deliver(ctx, msg); o != idem.Duplicate || err != nil {
		t.Fatalf("redelivery (attempt 2, other headers): %v, %v; want duplicate", o, err)
	}
	msg.Body.Weight = 4
	if _, err := h.Deliver(ctx, msg); !errors.Is(err, idem.ErrKeyReused) || idem.ActionFor(err) != idem.DeadLetter {
		t.Fatalf("same ID, another body: %v; want ErrKeyReused (dead-letter)", err)
	}
	if n := count(t, db.Pool, `SELECT coalesce(sum(n), 0)::int FROM shipped`); n != 1 {
		t.Fatalf("the parcel was shipped %d times; want once", n)
	}
}
