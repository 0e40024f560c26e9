package idem_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemimpl"
	"github.com/idemgen/idemgen/idem/idemtest"
	"github.com/idemgen/idemgen/idem/internal/relaytest"
	"github.com/idemgen/idemgen/idem/relay"
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

var orderTable = idemimpl.Table[order]{
	Consumer: "test.order",
	Name:     "idem_test_order",
	Columns: []idemimpl.Column{
		{Field: "Shop", Name: "key_shop", Type: "text"},
		{Field: "Number", Name: "key_number", Type: "bigint"},
	},
	Key: func(msg order) ([]any, error) {
		if err := idemimpl.CheckString("Shop", msg.Shop); err != nil {
			return nil, err
		}
		if err := idemimpl.CheckInt("Number", msg.Number); err != nil {
			return nil, err
		}
		return []any{msg.Shop, msg.Number}, nil
	},
	Retain: 720 * time.Hour,
}

// orderDB is a test schema with the outbox and the order tables.
func orderDB(t testing.TB) *idemtest.DB {
	return idemtest.New(t, relaytest.OutboxFS(t, map[string]string{"00100_orders.sql": orderMigration}))
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

// outboxRows reads the outbox rows in id order. A row without an ordering
// key or headers stores NULL (the migration 00003); it reads as the relay
// reads it: an empty ordering key, no headers.
func outboxRows(t testing.TB, pool *pgxpool.Pool) []storedMessage {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT message_id::text, consumer, key, destination, coalesce(ordering_key, ''), coalesce(headers, '{}')::text, payload
		FROM idem_outbox ORDER BY id`)
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
	in := idemimpl.NewPublishingInbox(db.Pool, orderTable, placeOrder)
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

// capture is a publisher that confirms every message and keeps what it was
// given.
type capture struct {
	mu   sync.Mutex
	msgs []idem.OutgoingMessage
}

func (c *capture) Publish(_ context.Context, msgs []idem.OutgoingMessage) []error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.msgs = append(c.msgs, msgs...)
	return make([]error, len(msgs))
}

func (c *capture) published() []idem.OutgoingMessage {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]idem.OutgoingMessage(nil), c.msgs...)
}

// perID counts the publications of each message id.
func (c *capture) perID() map[string]int {
	n := map[string]int{}
	for _, m := range c.published() {
		n[m.ID]++
	}
	return n
}

// slowFirst is placeOrder, holding the claim for a while in the run of a
// message that publishes, so that concurrent deliveries pile up on it.
func slowFirst(ctx context.Context, tx pgx.Tx, out *idem.Outbox, msg order) (int, error) {
	time.Sleep(100 * time.Millisecond)
	return placeOrder(ctx, tx, out, msg)
}

// outboxScenarios is what a publishing inbox must do through pool (in any
// QueryExecMode, directly or through PgBouncer), for the message of shop:
// 16 concurrent deliveries of a message that publishes 2 write 2 rows with
// the ids OutgoingMessageID computes; a duplicate adds none; a handler
// error or panic and an unencodable payload write none; a relay publishes
// the rows with their ordering key, headers and payload, once each id.
// relayOpts are the relay's options (poll-only through PgBouncer).
func outboxScenarios(t *testing.T, db *idemtest.DB, pool *pgxpool.Pool, shop string, relayOpts ...relay.Option) {
	ctx := context.Background()
	in := idemimpl.NewPublishingInbox(pool, orderTable, slowFirst)
	msg := order{Shop: shop, Number: 1, Publish: 2}
	got := deliverAtOnce(t, pool, 16, func() (idem.Outcome, error) {
		_, o, err := in.Handle(ctx, msg)
		return o, err
	})
	if got[idem.Processed] != 1 || got[idem.Duplicate] != 15 {
		t.Fatalf("16 concurrent deliveries: %v; want 1 processed, 15 duplicates", got)
	}
	wantShopIDs(t, db, msg, 2, "after 16 concurrent deliveries")

	if n, o, err := in.Handle(ctx, msg); err != nil || o != idem.Duplicate || n != 2 {
		t.Fatalf("a later duplicate: %v, %v, %v; want Duplicate with 2", n, o, err)
	}
	wantShopIDs(t, db, msg, 2, "after a duplicate")

	boom := errors.New("boom")
	failing := idemimpl.NewPublishingInbox(pool, orderTable, func(ctx context.Context, tx pgx.Tx, out *idem.Outbox, msg order) (int, error) {
		if _, err := placeOrder(ctx, tx, out, msg); err != nil {
			return 0, err
		}
		if msg.Number == 3 {
			panic(boom)
		}
		return 0, boom
	})
	if _, _, err := failing.Handle(ctx, order{Shop: shop, Number: 2, Publish: 3}); !errors.Is(err, boom) {
		t.Fatalf("a handler that published 3 then failed: %v, want its error", err)
	}
	func() {
		defer func() {
			if p := recover(); p != boom {
				t.Fatalf("a handler that published 3 then panicked: recovered %v, want its panic", p)
			}
		}()
		_, _, _ = failing.Handle(ctx, order{Shop: shop, Number: 3, Publish: 3})
	}()
	wantShopIDs(t, db, msg, 2, "after a handler error and a panic")

	// Payloads as given ([]byte that is not UTF-8, json.RawMessage) and
	// several headers.
	raw := idemimpl.NewPublishingInbox(pool, orderTable, idemimpl.NoResultPublishing(func(ctx context.Context, tx pgx.Tx, out *idem.Outbox, msg order) error {
		if err := out.Publish("test.raw", []byte{0xff, 0x00, 'x'}, idem.WithHeader("a", "1"), idem.WithHeader("b", `"two"`), idem.WithOrderingKey(shop+"-raw")); err != nil {
			return err
		}
		return out.Publish("test.raw", json.RawMessage(`{"raw": true}`))
	}))
	rawMsg := order{Shop: shop, Number: 4}
	if _, o, err := raw.Handle(ctx, rawMsg); err != nil || o != idem.Processed {
		t.Fatalf("raw payloads: %v, %v", o, err)
	}

	recv := &capture{}
	opts := append([]relay.Option{relay.WithID("outbox-" + shop), relay.WithPollInterval(20 * time.Millisecond), relay.WithLogger(relaytest.Logger(t))}, relayOpts...)
	stop := relaytest.Run(t, relay.New(pool, recv, opts...))
	relaytest.WaitFor(t, 10*time.Second, "the relay to publish the 4 rows", func() bool { return len(recv.published()) >= 4 })
	stop()

	byID := map[string]idem.OutgoingMessage{}
	for _, m := range recv.published() {
		byID[m.ID] = m
	}
	for id, n := range recv.perID() {
		if n != 1 {
			t.Errorf("message %s published %d times, want once", id, n)
		}
	}
	if len(byID) != 4 {
		t.Fatalf("published %d messages, want 4: %+v", len(byID), recv.published())
	}
	for i := range 2 {
		m := byID[idem.OutgoingMessageID(orderTable.Consumer, []any{shop, int64(1)}, i)]
		want := fmt.Sprintf(`{"shop":%q,"number":1,"seq":%d}`, shop, i)
		if m.Destination != "test.placed" || m.OrderingKey != shop || !maps.Equal(m.Headers, map[string]string{"seq": fmt.Sprint(i)}) || string(m.Payload) != want || m.Attempt != 1 {
			t.Errorf("message %d of the order: %+v; want destination test.placed, ordering key %q, header seq=%d, payload %s, attempt 1", i, m, shop, i, want)
		}
	}
	m0 := byID[idem.OutgoingMessageID(orderTable.Consumer, []any{shop, int64(4)}, 0)]
	if !bytes.Equal(m0.Payload, []byte{0xff, 0x00, 'x'}) || m0.OrderingKey != shop+"-raw" || !maps.Equal(m0.Headers, map[string]string{"a": "1", "b": `"two"`}) {
		t.Errorf("the []byte message: %+v; want payload ff 00 78, ordering key %q, headers a=1 b=\"two\"", m0, shop+"-raw")
	}
	m1 := byID[idem.OutgoingMessageID(orderTable.Consumer, []any{shop, int64(4)}, 1)]
	if string(m1.Payload) != `{"raw": true}` || m1.OrderingKey != "" || m1.Headers != nil {
		t.Errorf("the json.RawMessage message: %+v; want payload {\"raw\": true} as given, no ordering key, no headers", m1)
	}

	// Seed 001's rule, after the publish: a duplicate still adds nothing
	// (the published rows are deleted, and stay so).
	if _, o, err := in.Handle(ctx, msg); err != nil || o != idem.Duplicate {
		t.Fatalf("a duplicate after the publish: %v, %v", o, err)
	}
	wantShopIDs(t, db, msg, 0, "after a duplicate of a published message")
}

// wantShopIDs is wantOutboxIDs for the rows of msg's shop only.
func wantShopIDs(t testing.TB, db *idemtest.DB, msg order, n int, when string) {
	t.Helper()
	var ids []string
	for _, m := range outboxRows(t, db.Pool) {
		if m.OrderingKey == msg.Shop {
			ids = append(ids, m.ID)
		}
	}
	var want []string
	for i := range n {
		want = append(want, idem.OutgoingMessageID(orderTable.Consumer, []any{msg.Shop, msg.Number}, i))
	}
	if fmt.Sprint(ids) != fmt.Sprint(want) {
		t.Fatalf("%s: outbox message ids of shop %s: %v, want %v", when, msg.Shop, ids, want)
	}
}

// TestOutboxEveryQueryExecMode runs outboxScenarios through a pool in each
// pgx.QueryExecMode.
func TestOutboxEveryQueryExecMode(t *testing.T) {
	db := orderDB(t)
	for _, mode := range execModes {
		t.Run(mode.String(), func(t *testing.T) {
			outboxScenarios(t, db, poolInMode(t, db.URL, mode), "shop-"+mode.String())
		})
	}
}

// TestOutboxThroughPgBouncer runs outboxScenarios behind a real PgBouncer in
// transaction pooling mode, with a poll-only relay, in the exec modes
// PgBouncer 1.18 supports.
func TestOutboxThroughPgBouncer(t *testing.T) {
	db := orderDB(t)
	bouncer := startPgBouncer(t, db)
	for _, mode := range []pgx.QueryExecMode{
		pgx.QueryExecModeSimpleProtocol,
		pgx.QueryExecModeExec,
		pgx.QueryExecModeCacheDescribe,
		pgx.QueryExecModeDescribeExec,
	} {
		t.Run(mode.String(), func(t *testing.T) {
			outboxScenarios(t, db, poolInMode(t, bouncer, mode), "bouncer-"+mode.String(), relay.WithPollOnly())
		})
	}
}
