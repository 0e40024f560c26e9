package idem_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemtest"
)

// The publishing handler of these tests: an order keyed by (Shop, Number)
// whose handler records the order and publishes what the order asks for,
// as the generated wrapper of a handler that takes an *idem.Outbox does.

type order struct {
	Shop   string `json:"shop"`
	Number int64  `json:"number"`
	// Publish is how many messages the handler publishes.
	Publish int `json:"publish"`
}

type placed struct {
	Shop   string `json:"shop"`
	Number int64  `json:"number"`
	Seq    int    `json:"seq"`
}

const orderMigration = `-- +goose Up
CREATE TABLE orders (shop text NOT NULL, number bigint NOT NULL, runs integer NOT NULL DEFAULT 1, PRIMARY KEY (shop, number));
CREATE TABLE idem_test_order (
    key_shop     text        NOT NULL,
    key_number   bigint      NOT NULL,
    fingerprint  bytea       NOT NULL,
    status       text        NOT NULL DEFAULT 'done',
    result       json,
    attempts     integer     NOT NULL DEFAULT 1,
    created_at   timestamptz NOT NULL DEFAULT now(),
    completed_at timestamptz,
    PRIMARY KEY (key_shop, key_number)
);
-- +goose Down
DROP TABLE idem_test_order;
DROP TABLE orders;
`

var orderTable = idem.Table[order]{
	Consumer:  "test.order",
	Name:      "idem_test_order",
	KeyFields: []string{"Shop", "Number"},
	Key: func(msg order) ([]any, error) {
		if err := idem.CheckString("Shop", msg.Shop); err != nil {
			return nil, err
		}
		if err := idem.CheckInt("Number", msg.Number); err != nil {
			return nil, err
		}
		return []any{msg.Shop, msg.Number}, nil
	},
	Retain: 720 * time.Hour,
	Claim: `WITH wait AS MATERIALIZED (SELECT set_config('lock_timeout', $4::text, true)
		FROM (SELECT set_config('idem.lock_timeout', current_setting('lock_timeout'), true) OFFSET 0) AS saved)
		INSERT INTO idem_test_order (key_shop, key_number, fingerprint) SELECT $1::text, $2::bigint, $3::bytea FROM wait
		ON CONFLICT DO NOTHING
		RETURNING set_config('lock_timeout', current_setting('idem.lock_timeout'), true) IS NOT NULL`,
	Complete: `UPDATE idem_test_order SET result = $3 WHERE key_shop = $1 AND key_number = $2`,
	Lookup:   `SELECT fingerprint, status, result FROM idem_test_order WHERE key_shop = $1 AND key_number = $2`,
	Purge:    `DELETE FROM idem_test_order WHERE ctid = ANY (ARRAY(SELECT ctid FROM idem_test_order WHERE created_at < now() - make_interval(secs => $1) LIMIT $2))`,
}

// orderDB is a test schema with the outbox and the order tables.
func orderDB(t testing.TB) *idemtest.DB {
	return idemtest.New(t, outboxFS(t, map[string]string{"00100_orders.sql": orderMigration}))
}

// placeOrder records the order and publishes msg.Publish messages to
// "test.placed", the i-th with ordering key Shop and header seq=i.
func placeOrder(ctx context.Context, tx pgx.Tx, out *idem.Outbox, msg order) (int, error) {
	if _, err := tx.Exec(ctx, `INSERT INTO orders (shop, number) VALUES ($1, $2)`, msg.Shop, msg.Number); err != nil {
		return 0, err
	}
	for i := range msg.Publish {
		if err := out.Publish("test.placed", placed{Shop: msg.Shop, Number: msg.Number, Seq: i},
			idem.WithOrderingKey(msg.Shop), idem.WithHeader("seq", fmt.Sprint(i))); err != nil {
			return 0, err
		}
	}
	return msg.Publish, nil
}

// storedMessage is an outbox row as the tests read it.
type storedMessage struct {
	ID, Consumer, Key, Destination, OrderingKey string
	Headers                                     map[string]string
	Payload                                     []byte
}

// outboxRows reads the outbox rows in id order.
func outboxRows(t testing.TB, pool *pgxpool.Pool) []storedMessage {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT message_id::text, consumer, key, destination, ordering_key, headers::text, payload FROM idem_outbox ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	var got []storedMessage
	for rows.Next() {
		var m storedMessage
		var headers string
		if err := rows.Scan(&m.ID, &m.Consumer, &m.Key, &m.Destination, &m.OrderingKey, &headers, &m.Payload); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(headers), &m.Headers); err != nil {
			t.Fatalf("headers %s: %v", headers, err)
		}
		got = append(got, m)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return got
}

// wantOutboxIDs fails the test unless the outbox holds exactly the rows of
// msg's run that published n messages, in order, with the ids
// OutgoingMessageID computes.
func wantOutboxIDs(t testing.TB, pool *pgxpool.Pool, msg order, n int, when string) {
	t.Helper()
	got := outboxRows(t, pool)
	var ids []string
	for _, m := range got {
		ids = append(ids, m.ID)
	}
	var want []string
	for i := range n {
		want = append(want, idem.OutgoingMessageID(orderTable.Consumer, []any{msg.Shop, msg.Number}, i))
	}
	if fmt.Sprint(ids) != fmt.Sprint(want) {
		t.Fatalf("%s: outbox message ids %v, want %v", when, ids, want)
	}
}

func TestPublishingInboxWritesRowsWithTheResult(t *testing.T) {
	db := orderDB(t)
	ctx := context.Background()
	in := idem.NewPublishingInbox(db.Pool, orderTable, placeOrder)
	msg := order{Shop: "s1", Number: 1, Publish: 2}
	n, o, err := in.Handle(ctx, msg)
	if err != nil || o != idem.Processed || n != 2 {
		t.Fatalf("Handle: %v, %v, %v; want 2, Processed", n, o, err)
	}
	wantOutboxIDs(t, db.Pool, msg, 2, "after the first delivery")
	rows := outboxRows(t, db.Pool)
	for i, m := range rows {
		var p placed
		if err := json.Unmarshal(m.Payload, &p); err != nil || p != (placed{Shop: "s1", Number: 1, Seq: i}) {
			t.Errorf("row %d: payload %s (%v)", i, m.Payload, err)
		}
		if m.Consumer != "test.order" || m.Key != `Shop="s1",Number=1` || m.Destination != "test.placed" || m.OrderingKey != "s1" || m.Headers["seq"] != fmt.Sprint(i) {
			t.Errorf("row %d: %+v", i, m)
		}
	}
}
