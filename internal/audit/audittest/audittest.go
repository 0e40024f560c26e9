// Package audittest seeds a database for the tests of idemgen audit: a fresh
// schema with the migrations of examples/billing (three mode=tx consumers and
// the outbox) and examples/payments (a mode=external consumer), rows in every
// condition the audit reports, and a business table with or without work
// done twice. Rows are dated relative to Now, which the tests hand to the
// audit as its clock, so reports are the same on every run.
package audittest

import (
	"context"
	"fmt"
	"io/fs"
	"testing"
	"testing/fstest"
	"time"

	"github.com/idemgen/idemgen/examples/billing"
	"github.com/idemgen/idemgen/examples/payments"
	"github.com/idemgen/idemgen/idem/idemtest"
)

// Now is the audit's clock in the seeded database.
var Now = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// Packages are the packages whose consumers the seeded schema holds, as
// patterns relative to the repository's root.
var Packages = []string{"./examples/billing", "./examples/payments"}

// Business is the business table seeded: one row per notification sent,
// which should hold each external_event_id once.
const Business = "notifications"

// Migrations returns the migrations of examples/billing followed by those of
// examples/payments, renumbered after them, as one goose sequence.
func Migrations(t testing.TB) fs.FS {
	t.Helper()
	out := fstest.MapFS{}
	n := 0
	for _, src := range []fs.FS{billing.Migrations(), payments.Migrations()} {
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
			out[fmtVersion(n)+name[5:]] = &fstest.MapFile{Data: data}
		}
	}
	return out
}

func fmtVersion(n int) string { return fmt.Sprintf("%05d", n) }

// Seed creates the schema and its rows; doubled adds a second row for event
// evt_3 an hour before Now (inside a 24h window). Without it, the only
// doubled event is evt_old, three days before Now.
//
// What the audit must find (Now = 2026-03-01 12:00 UTC):
//   - billing.charge (tx, retain 720h): 3 rows, the oldest 40 days old (1 past
//     retention); 2 pending outbox rows (the oldest 3h old) and 1 dead (a
//     published row is deleted, so none is left).
//   - billing.payment (tx, retain 2160h): 2 rows, the oldest 100 days (1 past
//     retention).
//   - billing.open-account: no rows.
//   - payments.charge (external, lease 30s, retain 720h): 5 rows; 2 running,
//     1 of them past its lease since 11:55 (attempts 2); 1 released with
//     attempts 3; a done row 31 days old (1 past retention); 2 rows with
//     attempts > 1, at most 3.
//   - the outbox: also 1 pending row of consumer other.service, 5h old: 3
//     pending in all, the oldest 5h, 1 dead.
func Seed(t testing.TB, doubled bool) *idemtest.DB {
	t.Helper()
	db := idemtest.New(t, Migrations(t))
	at := func(d time.Duration) time.Time { return Now.Add(-d) }
	const day = 24 * time.Hour
	stmts := []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO idem_billing_charge (key_order_id, fingerprint, created_at, completed_at) VALUES
			('o-old', '\x00', $1, $1), ('o-2', '\x00', $2, $2), ('o-3', '\x00', $3, $3)`,
			[]any{at(40 * day), at(2 * time.Hour), at(time.Hour)}},
		{`INSERT INTO idem_billing_payment (key_provider, key_payment_id, fingerprint, created_at, completed_at) VALUES
			('stripe', 'p-old', '\x00', $1, $1), ('stripe', 'p-2', '\x00', $2, $2)`,
			[]any{at(100 * day), at(10 * day)}},
		{`INSERT INTO idem_payments_charge (idem_key, key_order_id, fingerprint, status, fence, attempts, lease_until, created_at, updated_at, done_at) VALUES
			('k1', 'o-1', '\x00', 'done', 1, 1, NULL, $1, $1, $1),
			('k2', 'o-2', '\x00', 'running', 2, 2, $2, $3, $3, NULL),
			('k3', 'o-3', '\x00', 'running', 1, 1, $4, $5, $5, NULL),
			('k4', 'o-4', '\x00', 'released', 3, 3, NULL, $6, $6, NULL),
			('k5', 'o-5', '\x00', 'done', 1, 1, NULL, $7, $7, $7)`,
			[]any{at(time.Hour), at(5 * time.Minute), at(20 * time.Minute), Now.Add(20 * time.Second), at(10 * time.Second), at(10 * time.Minute), at(31 * day)}},
		{`INSERT INTO idem_outbox (message_id, consumer, key, destination, payload, created_at, attempts, dead_at, last_error) VALUES
			(gen_random_uuid(), 'billing.charge', 'o-2', 'charges', '\x00', $1, 0, NULL, NULL),
			(gen_random_uuid(), 'billing.charge', 'o-3', 'charges', '\x00', $2, 1, NULL, 'broker down'),
			(gen_random_uuid(), 'billing.charge', 'o-dead', 'charges', '\x00', $3, 10, $4, 'refused'),
			(gen_random_uuid(), 'other.service', 'x', 'elsewhere', '\x00', $5, 0, NULL, NULL)`,
			[]any{at(3 * time.Hour), at(30 * time.Minute), at(4 * day), at(3 * day), at(5 * time.Hour)}},
		{`CREATE TABLE notifications (
			id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
			external_event_id text        NOT NULL,
			channel           text        NOT NULL,
			sent_on           text        NOT NULL DEFAULT '',
			created_at        timestamptz NOT NULL
		)`, nil},
		{`INSERT INTO notifications (external_event_id, channel, created_at) VALUES
			('evt_1', 'sms', $1), ('evt_2', 'sms', $2), ('evt_3', 'sms', $3),
			('evt_old', 'sms', $4), ('evt_old', 'sms', $5)`,
			[]any{at(5 * time.Hour), at(3 * time.Hour), at(90 * time.Minute), at(3 * day), at(3*day - time.Minute)}},
	}
	if doubled {
		stmts = append(stmts, struct {
			sql  string
			args []any
		}{`INSERT INTO notifications (external_event_id, channel, created_at) VALUES ('evt_3', 'sms', $1)`, []any{at(time.Hour)}})
	}
	ctx := context.Background()
	for _, s := range stmts {
		if _, err := db.Pool.Exec(ctx, s.sql, s.args...); err != nil {
			t.Fatalf("audittest: seed: %v\n%s", err, s.sql)
		}
	}
	return db
}
