package migrations_test

import (
	"context"
	"io/fs"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/idem/idemtest"
	"github.com/idemgen/idemgen/migrations"
)

// TestUpDownUp applies the outbox chain, migrates down to 0 and up again
// through goose's Go API, as CI's goose CLI round trip does with a folder
// holding the chain: every Down undoes its Up.
func TestUpDownUp(t *testing.T) {
	db := idemtest.New(t, nil)
	ctx := context.Background()
	provider := db.Migrations(t, migrations.FS)
	tableExists := func() bool {
		var ok bool
		if err := db.Pool.QueryRow(ctx, `SELECT to_regclass('idem_outbox') IS NOT NULL`).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if _, err := provider.Up(ctx); err != nil {
		t.Fatalf("up: %v", err)
	}
	if !tableExists() {
		t.Fatal("idem_outbox missing after up")
	}
	if _, err := provider.DownTo(ctx, 0); err != nil {
		t.Fatalf("down to 0: %v", err)
	}
	if tableExists() {
		t.Fatal("idem_outbox still there after down to 0")
	}
	if _, err := provider.Up(ctx); err != nil {
		t.Fatalf("up again: %v", err)
	}
	if !tableExists() {
		t.Fatal("idem_outbox missing after the second up")
	}
}

// TestEveryMigrationCarriesTheMarker checks that idemgen can recognise every
// file of the chain by its marker line, which stands before goose's
// annotations.
func TestEveryMigrationCarriesTheMarker(t *testing.T) {
	names, err := fs.Glob(migrations.FS, "*.sql")
	if err != nil || len(names) == 0 {
		t.Fatalf("no migrations embedded (%v)", err)
	}
	for _, name := range names {
		b, err := fs.ReadFile(migrations.FS, name)
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		marker := strings.Index(text, migrations.Marker+"\n")
		up := strings.Index(text, "-- +goose Up")
		if marker < 0 || up < 0 || marker > up {
			t.Errorf("%s: want a %q line before -- +goose Up", name, migrations.Marker)
		}
		if strings.Contains(text, "Code generated") {
			t.Errorf("%s: a hand-written runtime migration must not claim to be generated", name)
		}
	}
}

// TestDeleteOnPublishKeepsWhatWaits: the migration 00002 over a table of
// 00001 with published, pending (one of them in an ordering key's queue)
// and dead rows keeps the pending and dead rows with their ids and columns,
// drops the published ones and published_at, sets fillfactor 40, makes the
// message id the primary key, and lets the identity go on past every old
// id; its down brings back published_at (NULL: the rows kept are not
// published), id as the primary key and the 00001 indexes; up again works.
func TestDeleteOnPublishKeepsWhatWaits(t *testing.T) {
	db := idemtest.New(t, nil)
	ctx := context.Background()
	provider := db.Migrations(t, migrations.FS)
	exec, query := sqlHelpers(t, db)
	if _, err := provider.UpTo(ctx, 1); err != nil {
		t.Fatalf("up to 1: %v", err)
	}
	exec(`INSERT INTO idem_outbox (message_id, consumer, key, destination, ordering_key, payload, published_at, attempts, last_error, dead_at) VALUES
		('00000000-0000-0000-0000-000000000001', 'c', 'published-1', 'd', '', 'p1', now(), 1, NULL, NULL),
		('00000000-0000-0000-0000-000000000002', 'c', 'pending', 'd', 'k', 'p2', NULL, 2, 'broker down', NULL),
		('00000000-0000-0000-0000-000000000003', 'c', 'published-2', 'd', 'k', 'p3', now(), 1, NULL, NULL),
		('00000000-0000-0000-0000-000000000004', 'c', 'dead', 'd', '', 'p4', NULL, 10, 'refused', now()),
		('00000000-0000-0000-0000-000000000005', 'c', 'queued', 'd', 'k', 'p5', NULL, 0, NULL, NULL)`)
	rows := func() string {
		return query(`SELECT string_agg(format('%s:%s:%s:%s:%s:%s', id, key, ordering_key, attempts, coalesce(last_error, '-'), dead_at IS NOT NULL), ' ' ORDER BY id) FROM idem_outbox`)
	}
	const waiting = "2:pending:k:2:broker down:f 4:dead::10:refused:t 5:queued:k:0:-:f"

	if _, err := provider.UpTo(ctx, 2); err != nil {
		t.Fatalf("up to 2: %v", err)
	}
	if got := rows(); got != waiting {
		t.Errorf("after 00002:\n got %s\nwant %s (the published rows gone, the others as they were)", got, waiting)
	}
	if got := query(`SELECT count(*)::text FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = 'idem_outbox' AND column_name = 'published_at'`); got != "0" {
		t.Errorf("published_at still there after 00002")
	}
	if got := query(`SELECT coalesce(array_to_string(reloptions, ','), '') FROM pg_class WHERE oid = 'idem_outbox'::regclass`); got != "fillfactor=40" {
		t.Errorf("reloptions after 00002: %q, want fillfactor=40", got)
	}
	exec(`INSERT INTO idem_outbox (message_id, consumer, key, destination, payload) VALUES ('00000000-0000-0000-0000-000000000006', 'c', 'new', 'd', 'p6')`)
	if got := query(`SELECT id::text FROM idem_outbox WHERE key = 'new'`); got != "6" {
		t.Errorf("the first row after 00002 has id %s, want 6 (the identity goes on)", got)
	}
	if got := query(`SELECT string_agg(indexname, ' ' ORDER BY indexname) FROM pg_indexes WHERE schemaname = current_schema() AND tablename = 'idem_outbox'`); got != "idem_outbox_dead idem_outbox_due idem_outbox_ordered idem_outbox_pkey" {
		t.Errorf("indexes after 00002: %s", got)
	}
	if got := query(`SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = 'idem_outbox_pkey' AND connamespace = current_schema()::regnamespace`); got != "PRIMARY KEY (message_id)" {
		t.Errorf("the primary key after 00002: %s, want the message id", got)
	}

	if _, err := provider.DownTo(ctx, 1); err != nil {
		t.Fatalf("down to 1: %v", err)
	}
	if got := query(`SELECT count(*)::text FROM idem_outbox WHERE published_at IS NULL`); got != "4" {
		t.Errorf("%s rows unpublished after the down, want the 4 kept", got)
	}
	if got := query(`SELECT coalesce(array_to_string(reloptions, ','), '') FROM pg_class WHERE oid = 'idem_outbox'::regclass`); got != "" {
		t.Errorf("reloptions after the down: %q, want none", got)
	}
	if got := query(`SELECT string_agg(indexname, ' ' ORDER BY indexname) FROM pg_indexes WHERE schemaname = current_schema() AND tablename = 'idem_outbox'`); got != "idem_outbox_dead idem_outbox_due idem_outbox_message_id_key idem_outbox_ordered idem_outbox_pkey idem_outbox_published" {
		t.Errorf("indexes after the down: %s", got)
	}
	if got := query(`SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = 'idem_outbox_pkey' AND connamespace = current_schema()::regnamespace`); got != "PRIMARY KEY (id)" {
		t.Errorf("the primary key after the down: %s, want id", got)
	}
	if _, err := provider.Up(ctx); err != nil {
		t.Fatalf("up again: %v", err)
	}
	if got := query(`SELECT count(*)::text FROM idem_outbox`); got != "4" {
		t.Errorf("%s rows after up again, want 4", got)
	}
}

// TestCompactClaimKeepsWhatWaits: the migration 00003 over a table of 00002
// with pending rows (one held by a relay's claim, one in an ordering key's
// queue with headers) and a dead row keeps them all with their ids and
// columns, stores NULL for no ordering key and no headers, makes
// claim_token a bigint and claim_token, lease_until, attempts the last
// columns of the row, leaves available_at NULL unless a backoff set it
// (the due index on coalesce(available_at, created_at)), drops the held
// row's token but keeps its lease, and lets the identity go on; its down
// brings back a uuid claim_token, the empty ordering key and headers, and
// available_at (NOT NULL again); up again works.
func TestCompactClaimKeepsWhatWaits(t *testing.T) {
	db := idemtest.New(t, nil)
	ctx := context.Background()
	provider := db.Migrations(t, migrations.FS)
	exec, query := sqlHelpers(t, db)
	if _, err := provider.UpTo(ctx, 2); err != nil {
		t.Fatalf("up to 2: %v", err)
	}
	exec(`INSERT INTO idem_outbox (message_id, consumer, key, destination, ordering_key, headers, payload, attempts, last_error, claim_token, lease_until, dead_at) VALUES
		('00000000-0000-0000-0000-000000000001', 'c', 'held', 'd', '', '{}', 'p1', 1, NULL, '00000000-0000-0000-0000-0000000000aa', now() + interval '1 hour', NULL),
		('00000000-0000-0000-0000-000000000002', 'c', 'pending', 'd', 'k', '{"a": "1"}', 'p2', 2, 'broker down', NULL, NULL, NULL),
		('00000000-0000-0000-0000-000000000003', 'c', 'dead', 'd', '', '{}', 'p3', 10, 'refused', NULL, NULL, now())`)
	exec(`UPDATE idem_outbox SET available_at = now() + interval '1 minute' WHERE key = 'pending'`)
	rows := func() string {
		return query(`SELECT string_agg(format('%s:%s:%s:%s:%s:%s:%s:%s:%s', id, key, coalesce(ordering_key, 'NULL'), coalesce(headers::text, 'NULL'), attempts,
			coalesce(last_error, '-'), claim_token IS NOT NULL, lease_until > now(), dead_at IS NOT NULL), ' ' ORDER BY id) FROM idem_outbox`)
	}
	if _, err := provider.UpTo(ctx, 3); err != nil {
		t.Fatalf("up to 3: %v", err)
	}
	// The held row keeps its lease (t), not its token (f).
	const after3 = `1:held:NULL:NULL:1:-:f:t:f 2:pending:k:{"a": "1"}:2:broker down:f::f 3:dead:NULL:NULL:10:refused:f::t`
	if got := rows(); got != after3 {
		t.Errorf("after 00003:\n got %s\nwant %s", got, after3)
	}
	if got := query(`SELECT string_agg(attname || ' ' || format_type(atttypid, atttypmod), ', ' ORDER BY attnum DESC) FROM (
		SELECT * FROM pg_attribute WHERE attrelid = 'idem_outbox'::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum DESC LIMIT 3) a`); got != "attempts integer, lease_until timestamp with time zone, claim_token bigint" {
		t.Errorf("the last columns after 00003: %s, want claim_token bigint, lease_until, attempts last", got)
	}
	if got := query(`SELECT coalesce(array_to_string(reloptions, ','), '') FROM pg_class WHERE oid = 'idem_outbox'::regclass`); got != "fillfactor=40" {
		t.Errorf("reloptions after 00003: %q, want fillfactor=40", got)
	}
	if got := query(`SELECT string_agg(indexname, ' ' ORDER BY indexname) FROM pg_indexes WHERE schemaname = current_schema() AND tablename = 'idem_outbox'`); got != "idem_outbox_dead idem_outbox_due idem_outbox_ordered idem_outbox_pkey" {
		t.Errorf("indexes after 00003: %s", got)
	}
	exec(`INSERT INTO idem_outbox (message_id, consumer, key, destination, payload) VALUES ('00000000-0000-0000-0000-000000000004', 'c', 'new', 'd', 'p4')`)
	if got := query(`SELECT id::text || ':' || coalesce(attempts::text, 'NULL') || ':' || (ordering_key IS NULL) || ':' || (headers IS NULL) || ':' || (available_at IS NULL) FROM idem_outbox WHERE key = 'new'`); got != "4:NULL:true:true:true" {
		t.Errorf("the first row after 00003: %s, want id 4 (the identity goes on), NULL attempts (never claimed), NULL ordering key, headers and available_at", got)
	}
	if got := query(`SELECT string_agg(id::text, ' ' ORDER BY id) FROM idem_outbox WHERE available_at IS NOT NULL`); got != "2" {
		t.Errorf("rows with an available_at after 00003: %s, want only 2 (in backoff: its available_at was set apart from created_at)", got)
	}
	if got := query(`SELECT indexdef FROM pg_indexes WHERE schemaname = current_schema() AND indexname = 'idem_outbox_due'`); !strings.Contains(got, "(COALESCE(available_at, created_at), id) WHERE (dead_at IS NULL)") {
		t.Errorf("the due index after 00003: %s", got)
	}

	if _, err := provider.DownTo(ctx, 2); err != nil {
		t.Fatalf("down to 2: %v", err)
	}
	if got := query(`SELECT string_agg(format('%s:%s:%s:%s:%s:%s', id, ordering_key, headers::text, claim_token IS NULL, available_at = created_at, attempts), ' ' ORDER BY id) FROM idem_outbox`); got != `1::{}:t:t:1 2:k:{"a": "1"}:t:f:2 3::{}:t:t:10 4::{}:t:t:0` {
		t.Errorf("after the down: %s", got)
	}
	if got := query(`SELECT string_agg(attname || ' ' || format_type(atttypid, atttypmod) || ' ' || attnotnull, ', ' ORDER BY attname) FROM pg_attribute
		WHERE attrelid = 'idem_outbox'::regclass AND attname IN ('attempts', 'claim_token', 'ordering_key', 'headers') AND NOT attisdropped`); got != "attempts integer true, claim_token uuid false, headers jsonb true, ordering_key text true" {
		t.Errorf("the columns after the down: %s", got)
	}
	if _, err := provider.Up(ctx); err != nil {
		t.Fatalf("up again: %v", err)
	}
	if got := query(`SELECT count(*)::text FROM idem_outbox`); got != "4" {
		t.Errorf("%s rows after up again, want 4", got)
	}
}

// sqlHelpers returns, for the migration tests, exec (a statement that must
// succeed) and query (a statement of one text value), each failing t.
func sqlHelpers(t *testing.T, db *idemtest.DB) (exec func(sql string, args ...any), query func(sql string) string) {
	ctx := context.Background()
	exec = func(sql string, args ...any) {
		t.Helper()
		if _, err := db.Pool.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	query = func(sql string) string {
		t.Helper()
		var s string
		if err := db.Pool.QueryRow(ctx, sql).Scan(&s); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		return s
	}
	return exec, query
}
