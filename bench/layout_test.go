package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/internal/testdb"
)

// TestPartitionLayoutsAndTheArbiter checks, on the real PostgreSQL, what
// docs/scale.md says about partitioning an inbox: a table partitioned by
// time cannot have the key alone as its primary key; with the time column
// added to it, one key delivered on either side of a partition boundary
// gets two rows (the handler would run twice); partitioned by a hash of the
// key, the second delivery conflicts and is skipped.
func TestPartitionLayoutsAndTheArbiter(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url, err := testdb.Find(ctx, testdb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	schema := "idembench_layout_" + hex.EncodeToString(b)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema+"; SET search_path = "+schema); err != nil {
		t.Fatal(err)
	}
	defer func() { // before the connection closes
		if _, err := conn.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	}()

	_, err = conn.Exec(ctx, `CREATE TABLE by_time_key_only (key text PRIMARY KEY, created_at timestamptz NOT NULL) PARTITION BY RANGE (created_at)`)
	if err == nil || !strings.Contains(err.Error(), "must include all partitioning columns") {
		t.Fatalf("a time-partitioned table with the key alone as primary key: %v, want PostgreSQL's refusal", err)
	}
	t.Logf("time partitioning, key alone unique: %v", err)

	count := func(table string) int {
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM "+table+" WHERE key = 'k1'").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, q := range []string{
		`CREATE TABLE by_time (key text, created_at timestamptz, PRIMARY KEY (key, created_at)) PARTITION BY RANGE (created_at)`,
		`CREATE TABLE by_time_nov PARTITION OF by_time FOR VALUES FROM ('2026-11-01') TO ('2026-12-01')`,
		`CREATE TABLE by_time_dec PARTITION OF by_time FOR VALUES FROM ('2026-12-01') TO ('2027-01-01')`,
		`INSERT INTO by_time VALUES ('k1', '2026-11-30 23:59:59') ON CONFLICT DO NOTHING`,
		`INSERT INTO by_time VALUES ('k1', '2026-12-01 00:00:01') ON CONFLICT DO NOTHING`,
		`CREATE TABLE by_hash (key text PRIMARY KEY, created_at timestamptz NOT NULL DEFAULT now()) PARTITION BY HASH (key)`,
		`CREATE TABLE by_hash_0 PARTITION OF by_hash FOR VALUES WITH (MODULUS 2, REMAINDER 0)`,
		`CREATE TABLE by_hash_1 PARTITION OF by_hash FOR VALUES WITH (MODULUS 2, REMAINDER 1)`,
		`INSERT INTO by_hash (key) VALUES ('k1') ON CONFLICT (key) DO NOTHING`,
		`INSERT INTO by_hash (key) VALUES ('k1') ON CONFLICT (key) DO NOTHING`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	byTime, byHash := count("by_time"), count("by_hash")
	t.Logf("one key delivered twice: %d row(s) partitioned by time (key, created_at), %d partitioned by hash of the key", byTime, byHash)
	if byTime != 2 || byHash != 1 {
		t.Fatalf("rows for one key delivered twice: %d by time, %d by hash; want 2 and 1", byTime, byHash)
	}
}
