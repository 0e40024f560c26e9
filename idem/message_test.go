package idem_test

import (
	"context"
	"errors"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemtest"
)

type shipment struct {
	Parcel string `json:"parcel"`
	Weight int    `json:"weight"`
}

const shipmentMigration = `-- +goose Up
CREATE TABLE shipped (parcel text PRIMARY KEY, n integer NOT NULL);
CREATE TABLE idem_test_shipment (
    key_id       text        PRIMARY KEY,
    fingerprint  bytea       NOT NULL,
    status       text        NOT NULL DEFAULT 'done',
    result       json,
    attempts     integer     NOT NULL DEFAULT 1,
    created_at   timestamptz NOT NULL DEFAULT now(),
    completed_at timestamptz
);
-- +goose Down
DROP TABLE idem_test_shipment;
DROP TABLE shipped;
`

// shipmentTable keys on the broker's message id (key=ID), as a generated
// wrapper of a handler of idem.Message[shipment] does.
var shipmentTable = idem.Table[idem.Message[shipment]]{
	Consumer:  "test.shipment",
	Name:      "idem_test_shipment",
	KeyFields: []string{"ID"},
	Key: func(msg idem.Message[shipment]) ([]any, error) {
		if err := idem.CheckString("ID", msg.ID); err != nil {
			return nil, err
		}
		return []any{msg.ID}, nil
	},
	Retain: 720 * time.Hour,
	Claim: `WITH wait AS MATERIALIZED (SELECT set_config('lock_timeout', $3::text, true)
		FROM (SELECT set_config('idem.lock_timeout', current_setting('lock_timeout'), true) OFFSET 0) AS saved)
		INSERT INTO idem_test_shipment (key_id, fingerprint) SELECT $1::text, $2::bytea FROM wait
		ON CONFLICT DO NOTHING
		RETURNING set_config('lock_timeout', current_setting('idem.lock_timeout'), true) IS NOT NULL`,
	Complete: `UPDATE idem_test_shipment SET result = $2 WHERE key_id = $1`,
	Lookup:   `SELECT fingerprint, status, result FROM idem_test_shipment WHERE key_id = $1`,
	Purge:    `DELETE FROM idem_test_shipment WHERE ctid = ANY (ARRAY(SELECT ctid FROM idem_test_shipment WHERE created_at < now() - make_interval(secs => $1) LIMIT $2))`,
}

// Both an Inbox and a decorator are Handlers, whatever the result type.
var (
	_ idem.Handler[idem.Message[shipment]] = (*idem.Inbox[idem.Message[shipment], idem.None])(nil)
	_ idem.Handler[deposit]                = (*idem.Inbox[deposit, receipt])(nil)
	_ idem.Handler[deposit]                = idem.HandlerFunc[deposit](nil)
)

// TestMessageRedeliveryIsDuplicate delivers an idem.Message through an Inbox
// keyed on its ID, as a broker adapter does: a redelivery with a higher
// attempt and other headers is a Duplicate, the same ID with another body is
// ErrKeyReused, and Deliver reports what Handle does.
func TestMessageRedeliveryIsDuplicate(t *testing.T) {
	db := idemtest.New(t, fstest.MapFS{"00001_shipment.sql": {Data: []byte(shipmentMigration)}})
	ctx := context.Background()
	var h idem.Handler[idem.Message[shipment]] = idem.NewInbox(db.Pool, shipmentTable, idem.NoResult(func(ctx context.Context, tx pgx.Tx, msg idem.Message[shipment]) error {
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
