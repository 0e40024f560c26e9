package idemtest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemimpl"
	"github.com/idemgen/idemgen/idem/idemtest"
)

// mode=entity and mode=natural against the real runtime: the suites pass on
// correct handlers and catch broken ones.

type order struct {
	ID       string `json:"id"`
	Customer string `json:"customer"`
	Amount   int64  `json:"amount"`
	Voucher  string `json:"voucher"`
}

type placed struct {
	Amount int64 `json:"amount"`
}

var entityMigrations = fstest.MapFS{
	"00001_orders.sql": {Data: []byte(`-- +goose Up
CREATE TABLE orders (id text PRIMARY KEY, customer text NOT NULL, amount bigint NOT NULL, voucher text UNIQUE);
-- +goose Down
DROP TABLE orders;
`)},
	// What idemgen's entity migration adds.
	"00002_orders_fingerprint.sql": {Data: []byte(`-- +goose Up
ALTER TABLE orders ADD COLUMN idem_fingerprint bytea DEFAULT decode(nullif(current_setting('idem.fingerprint', true), ''), 'hex');
-- +goose Down
ALTER TABLE orders DROP COLUMN idem_fingerprint;
`)},
}

var orderTable = idemimpl.EntityTable[order]{
	Consumer: "test.order",
	Name:     "orders",
	Columns:  []idemimpl.Column{{Field: "ID", Name: "id", Type: "text"}},
	Key: func(msg order) ([]any, error) {
		if err := idemimpl.CheckString("ID", msg.ID); err != nil {
			return nil, err
		}
		return []any{msg.ID}, nil
	},
}

func placeOrder(ctx context.Context, tx pgx.Tx, msg order) (placed, error) {
	_, err := tx.Exec(ctx, `INSERT INTO orders (id, customer, amount, voucher) VALUES ($1, $2, $3, NULLIF($4, ''))`, msg.ID, msg.Customer, msg.Amount, msg.Voucher)
	if err != nil {
		return placed{}, fmt.Errorf("insert order: %w", err)
	}
	return placed{Amount: msg.Amount}, nil
}

func readOrder(ctx context.Context, tx pgx.Tx, msg order) (placed, error) {
	var p placed
	err := tx.QueryRow(ctx, `SELECT amount FROM orders WHERE id = $1`, msg.ID).Scan(&p.Amount)
	return p, err
}

func orderFixture(t testing.TB, db *idemtest.DB) idemtest.Fixture[idemtest.NoReceiver, order] {
	return idemtest.Fixture[idemtest.NoReceiver, order]{
		Message: order{ID: idemtest.UniqueString[string](), Customer: "c-1", Amount: 1200, Voucher: idemtest.UniqueString[string]()},
		Variant: func(msg order) order { msg.Amount++; return msg },
		Effect: func(ctx context.Context, db *idemtest.DB, msg order) (int, error) {
			var n int
			err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM orders WHERE id = $1`, msg.ID).Scan(&n)
			return n, err
		},
		Conflict: func(ctx context.Context, db *idemtest.DB, msg order) error {
			// Another order redeemed the voucher: a row without a
			// fingerprint, as any write outside the wrapper.
			_, err := db.Pool.Exec(ctx, `INSERT INTO orders (id, customer, amount, voucher) VALUES ($1, 'c-2', 1, $2)`, "other-"+msg.ID, msg.Voucher)
			return err
		},
	}
}

func entitySuite(handler func(context.Context, pgx.Tx, order) (placed, error)) idemtest.EntitySuite[idemtest.NoReceiver, order, placed] {
	return idemtest.EntitySuite[idemtest.NoReceiver, order, placed]{
		Migrations: entityMigrations,
		Table:      "orders",
		New: func(_ idemtest.NoReceiver, pool *pgxpool.Pool, opts ...idem.Option) idemtest.HandleFunc[order, placed] {
			return idemimpl.NewEntityInbox(pool, orderTable, handler, readOrder, opts...).Handle
		},
		Fixture: orderFixture,
	}
}

// TestEntitySuite runs every scenario of EntitySuite against idemimpl.EntityInbox:
// 16 concurrent deliveries, a failure before the commit, a crash after it, a
// reused key, a duplicate, a unique violation of another constraint, and a
// process killed with SIGKILL inside its transaction.
func TestEntitySuite(t *testing.T) { entitySuite(placeOrder).Run(t) }

// TestEntitySuiteCatchesUpsert: a handler that inserts its row with ON
// CONFLICT DO NOTHING never raises the duplicate signal, so its redelivery
// runs again (Processed twice), which the suite catches.
func TestEntitySuiteCatchesUpsert(t *testing.T) {
	upsert := func(ctx context.Context, tx pgx.Tx, msg order) (placed, error) {
		_, err := tx.Exec(ctx, `INSERT INTO orders (id, customer, amount) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`, msg.ID, msg.Customer, msg.Amount)
		return placed{Amount: msg.Amount}, err
	}
	for _, sc := range entitySuite(upsert).Scenarios() {
		if sc.Name != idemtest.ScenarioSequentialDuplicate {
			continue
		}
		r := runRecorded(t, sc)
		if !r.failed() || !strings.Contains(r.report(), "want Duplicate") {
			t.Fatalf("%s passed or failed for another reason with an ON CONFLICT DO NOTHING handler:\n%s", sc.Name, r.report())
		}
		t.Logf("%s caught it:\n%s", sc.Name, r.report())
	}
}

// TestEntityHandlerWithoutRow: a handler that returns without inserting its
// row would leave the message unrecorded; the check in the commit's round
// trip rolls it back.
func TestEntityHandlerWithoutRow(t *testing.T) {
	db := idemtest.New(t, entityMigrations)
	other := func(ctx context.Context, tx pgx.Tx, msg order) (placed, error) {
		return placeOrder(ctx, tx, order{ID: "another-" + msg.ID, Customer: msg.Customer, Amount: msg.Amount})
	}
	in := idemimpl.NewEntityInbox(db.Pool, orderTable, other, readOrder)
	_, _, err := in.Handle(context.Background(), order{ID: "o-1", Customer: "c", Amount: 1})
	if err == nil || !strings.Contains(err.Error(), "without inserting the row") {
		t.Fatalf("got %v; want the check's error", err)
	}
	var n int
	if err := db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM orders`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d rows (%v); want 0: the transaction must roll back", n, err)
	}
}

// TestEntityNoConstraint: without a unique constraint over the key columns
// a collision cannot be told from another one, and the delivery says so.
func TestEntityNoConstraint(t *testing.T) {
	db := idemtest.New(t, entityMigrations)
	table := orderTable
	table.Columns = []idemimpl.Column{{Field: "ID", Name: "id", Type: "text"}, {Field: "Customer", Name: "customer", Type: "text"}}
	table.Key = func(msg order) ([]any, error) { return []any{msg.ID, msg.Customer}, nil }
	in := idemimpl.NewEntityInbox(db.Pool, table, placeOrder, readOrder)
	msg := order{ID: "o-1", Customer: "c", Amount: 1}
	if _, o, err := in.Handle(context.Background(), msg); err != nil || o != idem.Processed {
		t.Fatalf("first delivery: %v %v", o, err)
	}
	_, _, err := in.Handle(context.Background(), msg)
	if err == nil || !strings.Contains(err.Error(), "no unique constraint or unique index over exactly (id, customer)") {
		t.Fatalf("the duplicate without a matching constraint: got %v", err)
	}
}

// TestEntityRowWithoutFingerprint: a row written outside the wrapper has no
// fingerprint; a message with its key is ErrKeyReused, never a Duplicate.
func TestEntityRowWithoutFingerprint(t *testing.T) {
	db := idemtest.New(t, entityMigrations)
	if _, err := db.Pool.Exec(context.Background(), `INSERT INTO orders (id, customer, amount) VALUES ('o-1', 'c', 1)`); err != nil {
		t.Fatal(err)
	}
	in := idemimpl.NewEntityInbox(db.Pool, orderTable, placeOrder, readOrder)
	_, _, err := in.Handle(context.Background(), order{ID: "o-1", Customer: "c", Amount: 1})
	if !errors.Is(err, idem.ErrKeyReused) || !strings.Contains(err.Error(), "has no fingerprint") {
		t.Fatalf("got %v; want ErrKeyReused naming the missing fingerprint", err)
	}
}

// mode=natural.

type priceSet struct {
	SKU   string `json:"sku"`
	Cents int64  `json:"cents"`
}

var naturalMigrations = fstest.MapFS{
	"00001_prices.sql": {Data: []byte(`-- +goose Up
CREATE TABLE prices (sku text PRIMARY KEY, cents bigint NOT NULL);
CREATE TABLE balances (sku text PRIMARY KEY, total bigint NOT NULL);
-- +goose Down
DROP TABLE balances;
DROP TABLE prices;
`)},
}

var priceTable = idemimpl.NaturalTable[priceSet]{
	Consumer:  "test.price",
	KeyFields: []string{"SKU"},
	Key: func(msg priceSet) ([]any, error) {
		if err := idemimpl.CheckString("SKU", msg.SKU); err != nil {
			return nil, err
		}
		return []any{msg.SKU}, nil
	},
}

func setPrice(ctx context.Context, tx pgx.Tx, msg priceSet) (idem.None, error) {
	_, err := tx.Exec(ctx, `INSERT INTO prices (sku, cents) VALUES ($1, $2) ON CONFLICT (sku) DO UPDATE SET cents = EXCLUDED.cents`, msg.SKU, msg.Cents)
	return idem.None{}, err
}

// addToBalance is not idempotent: every run adds again.
func addToBalance(ctx context.Context, tx pgx.Tx, msg priceSet) (idem.None, error) {
	_, err := tx.Exec(ctx, `INSERT INTO balances (sku, total) VALUES ($1, $2) ON CONFLICT (sku) DO UPDATE SET total = balances.total + EXCLUDED.total`, msg.SKU, msg.Cents)
	return idem.None{}, err
}

func naturalSuite(handler func(context.Context, pgx.Tx, priceSet) (idem.None, error), snapshot string) idemtest.NaturalSuite[idemtest.NoReceiver, priceSet, idem.None] {
	return idemtest.NaturalSuite[idemtest.NoReceiver, priceSet, idem.None]{
		Migrations: naturalMigrations,
		New: func(_ idemtest.NoReceiver, pool *pgxpool.Pool, opts ...idem.Option) idemtest.HandleFunc[priceSet, idem.None] {
			return idemimpl.NewNaturalInbox(pool, priceTable, handler, opts...).Handle
		},
		Fixture: func(t testing.TB, db *idemtest.DB) idemtest.NaturalFixture[idemtest.NoReceiver, priceSet] {
			return idemtest.NaturalFixture[idemtest.NoReceiver, priceSet]{
				Message:  priceSet{SKU: "sku-1", Cents: 250},
				Second:   &priceSet{SKU: "sku-2", Cents: 990},
				Snapshot: snapshot,
			}
		},
	}
}

// TestNaturalSuite: an upsert of absolute values passes every scenario.
func TestNaturalSuite(t *testing.T) {
	naturalSuite(setPrice, "SELECT sku, cents FROM prices ORDER BY sku").Run(t)
}

// TestNaturalSuiteCatchesIncrement: balance = balance + $1 fails every
// scenario that delivers the message again, with a message that names the
// row and the column that differ.
func TestNaturalSuiteCatchesIncrement(t *testing.T) {
	for _, sc := range naturalSuite(addToBalance, "SELECT sku, total FROM balances ORDER BY sku").Scenarios() {
		if sc.Name == idemtest.ScenarioEffect || sc.Name == idemtest.ScenarioFailureBeforeCommit {
			continue // one delivery each, in its transaction
		}
		r := runRecorded(t, sc)
		if !r.failed() || !strings.Contains(r.report(), "the handler is not idempotent") || !strings.Contains(r.report(), "total is 250 after the") {
			t.Errorf("%s did not catch balance = balance + $1 as it should:\n%s", sc.Name, r.report())
			continue
		}
		t.Logf("%s caught it:\n%s", sc.Name, r.report())
	}
}

// TestNaturalRetriesSerializationFailures: under SERIALIZABLE, concurrent
// upserts of one key conflict; the wrapper retries them.
func TestNaturalRetriesSerializationFailures(t *testing.T) {
	s := naturalSuite(setPrice, "SELECT sku, cents FROM prices ORDER BY sku")
	s.Options = []idem.Option{idem.WithIsolation(pgx.Serializable)}
	for _, sc := range s.Scenarios() {
		if sc.Name == idemtest.ScenarioConcurrentRedeliveries {
			if r := runRecorded(t, sc); r.failed() {
				t.Fatalf("%s under SERIALIZABLE:\n%s", sc.Name, r.report())
			}
		}
	}
}
