// Package opstest seeds a database for the tests of the operator's commands
// (internal/ops, idemgen outbox and idemgen claims). The schema holds the
// outbox and the claims table of examples/payments, with dead and pending
// outbox rows and running, released and done claims. A second claims table
// has a key of two columns. Rows are dated relative to Now, the clock the
// tests give the commands, so that output is the same on every run.
package opstest

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/examples/payments"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemtest"
	"github.com/idemgen/idemgen/internal/pgcluster"
	"github.com/idemgen/idemgen/migrations"
)

// Now is the clock of the seeded database.
var Now = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// Payments is the consumer of examples/payments, mode=external.
const Payments = "payments.charge"

// Shipments is the consumer of the claims table with a two-column key.
const Shipments = "shipping.label"

// MessageID is the message id of the seeded outbox row n.
func MessageID(n int) string { return fmt.Sprintf("00000000-0000-4000-8000-%012d", n) }

// IdemKey is the idempotency key of payments.charge for order.
func IdemKey(order string) string { return idem.ExternalKey(Payments, []any{order}) }

// Migrations returns the outbox's migrations followed by those of
// examples/payments, renumbered after them, as one goose sequence.
func Migrations(t testing.TB) fs.FS {
	t.Helper()
	out := fstest.MapFS{}
	n := 0
	for _, src := range []fs.FS{migrations.FS, payments.Migrations()} {
		names, err := fs.Glob(src, "*.sql")
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range names {
			data, err := fs.ReadFile(src, name)
			if err != nil {
				t.Fatal(err)
			}
			n++
			out[fmt.Sprintf("%05d", n)+name[5:]] = &fstest.MapFile{Data: data}
		}
	}
	return out
}

// Empty creates a fresh schema with the migrations and no rows.
func Empty(t testing.TB) *idemtest.DB {
	t.Helper()
	return idemtest.New(t, Migrations(t))
}

// Seed creates the schema and its rows. What the commands must find
// (Now = 2026-03-01 12:00 UTC):
//   - the outbox (ids in insertion order): 1 dead (billing.charge o-1,
//     ordering key acc-1, 10 attempts); 2 pending (o-2, acc-1); 3 dead
//     (o-3, acc-1, 10 attempts); 4 dead (other.service x, no ordering key,
//     3 attempts, an error of two lines); 5 pending (o-4, no ordering key).
//   - payments.charge: o-1 done; o-2 running, attempts 2, fence 2, its
//     lease expired at 11:55, first claimed 20 minutes before Now; o-3
//     running, attempts 1, fence 1, 20s of lease left, claimed 10s ago;
//     o-4 released.
//   - shipping.label (key carrier, parcel_id): one running claim (dhl, 42),
//     attempts 3, its lease expired an hour ago.
func Seed(t testing.TB) *idemtest.DB {
	t.Helper()
	db := Empty(t)
	at := func(d time.Duration) time.Time { return Now.Add(-d) }
	const day = 24 * time.Hour
	stmts := []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO idem_outbox (message_id, consumer, key, destination, ordering_key, payload, created_at, available_at, attempts, dead_at, last_error)
		  VALUES ($1, 'billing.charge', 'o-1', 'charges', 'acc-1', '\x00', $6, $7, 10, $7, 'refused: no route to charges'),
		         ($2, 'billing.charge', 'o-2', 'charges', 'acc-1', '\x00', $8, NULL, NULL, NULL, NULL),
		         ($3, 'billing.charge', 'o-3', 'charges', 'acc-1', '\x00', $9, $10, 10, $10, 'refused: no route to charges'),
		         ($4, 'other.service', 'x', 'elsewhere', NULL, '\x00', $11, $12, 3, $12, E'broker said:\n  message too large'),
		         ($5, 'billing.charge', 'o-4', 'charges', NULL, '\x00', $13, NULL, NULL, NULL, NULL)`,
			[]any{MessageID(1), MessageID(2), MessageID(3), MessageID(4), MessageID(5),
				at(4 * day), at(3 * day), at(3 * day), at(2 * day), at(day), at(5 * time.Hour), at(4 * time.Hour), at(time.Hour)}},
		{`INSERT INTO idem_payments_charge (idem_key, key_order_id, fingerprint, status, fence, attempts, lease_until, created_at, updated_at, done_at) VALUES
			($1, 'o-1', '\x00', 'done', 1, 1, NULL, $5, $5, $5),
			($2, 'o-2', '\x00', 'running', 2, 2, $6, $7, $7, NULL),
			($3, 'o-3', '\x00', 'running', 1, 1, $8, $9, $9, NULL),
			($4, 'o-4', '\x00', 'released', 3, 3, NULL, $10, $10, NULL)`,
			[]any{IdemKey("o-1"), IdemKey("o-2"), IdemKey("o-3"), IdemKey("o-4"),
				at(time.Hour), at(5 * time.Minute), at(20 * time.Minute), Now.Add(20 * time.Second), at(10 * time.Second), at(10 * time.Minute)}},
		// The shape idemgen's migration gives a claims table (see
		// examples/payments/migrations), for a key of two columns.
		{`CREATE TABLE idem_shipping_label (
			idem_key      text        NOT NULL PRIMARY KEY,
			key_carrier   text        NOT NULL,
			key_parcel_id bigint      NOT NULL,
			fingerprint   bytea       NOT NULL,
			status        text        NOT NULL CHECK (status IN ('running', 'released', 'done')),
			fence         bigint      NOT NULL,
			attempts      integer     NOT NULL,
			lease_until   timestamptz,
			result        json,
			created_at    timestamptz NOT NULL DEFAULT now(),
			updated_at    timestamptz NOT NULL DEFAULT now(),
			done_at       timestamptz
		)`, nil},
		{`COMMENT ON TABLE idem_shipping_label IS 'idemgen claims of consumer ` + Shipments + ` (mode=external)'`, nil},
		{`INSERT INTO idem_shipping_label (idem_key, key_carrier, key_parcel_id, fingerprint, status, fence, attempts, lease_until, created_at, updated_at)
		  VALUES ($1, 'dhl', 42, '\x00', 'running', 3, 3, $2, $3, $2)`,
			[]any{idem.ExternalKey(Shipments, []any{"dhl", int64(42)}), at(time.Hour), at(3 * time.Hour)}},
	}
	ctx := context.Background()
	for _, s := range stmts {
		if _, err := db.Pool.Exec(ctx, s.sql, s.args...); err != nil {
			t.Fatalf("opstest: seed: %v\n%s", err, s.sql)
		}
	}
	return db
}

// Standby starts a throwaway PostgreSQL server (internal/pgcluster) with
// the tables in its public schema, then restarts it as a standby. With a
// standby.signal file and no primary to follow, it replays its own WAL and
// serves reads, pg_is_in_recovery() true, as a streaming replica does. It
// returns the URL of its database; the server goes when the test ends.
func Standby(t testing.TB) string {
	t.Helper()
	c, err := pgcluster.Start("idemgen-ops-standby.")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Remove)
	url := c.URL("postgres")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	db := &idemtest.DB{Pool: pool, Schema: "public", URL: url}
	if _, err := db.Migrations(t, Migrations(t)).Up(ctx); err != nil {
		t.Fatalf("opstest: migrate the standby-to-be: %v", err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO idem_outbox (message_id, consumer, key, destination, payload, attempts, dead_at)
		VALUES ($1, 'billing.charge', 'o-1', 'charges', '\x00', 10, now())`, MessageID(1)); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO idem_payments_charge (idem_key, key_order_id, fingerprint, status, fence, attempts, lease_until)
		VALUES ($1, 'o-1', '\x00', 'running', 1, 1, now())`, IdemKey("o-1")); err != nil {
		t.Fatal(err)
	}
	pool.Close()
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(c.Dir, "data", "standby.signal"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	return url
}
