package idem_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/idem/idemtest"
)

// BenchmarkCommitProtocol measures, side by side, what it costs to write the
// claim running and mark it done in the commit round trip (the protocol of
// Inbox for a handler with a result, so that a handler that ends the
// transaction with a COMMIT sent around its Tx leaves a running row that the
// next delivery takes over) against a claim born done (the protocol for a
// handler without a result, where marking the row would be an UPDATE of its
// own), whose handler's own COMMIT would make the redelivery a Duplicate of
// work that never finished:
//
//   - done_at_claim: BEGIN and the claim (the row inserted done) in one
//     round trip, the handler's UPDATE, then [the result's UPDATE,] the claim
//     check and COMMIT in one round trip.
//   - running_until_commit: BEGIN and the claim (the row inserted running),
//     the handler's UPDATE, then one UPDATE that marks the row done [with
//     its result] only inside the claim's transaction (it fails otherwise,
//     which rolls the COMMIT back) and COMMIT in one round trip.
//
// Both with and without a result, at 16 concurrent workers on one pool of
// 16 connections, each delivery a new key and a random account of 10,000;
// the four variants interleaved, each reported as its time per delivery:
//
//	go test -run '^$' -bench CommitProtocol -count 3 -benchtime 20000x ./idem
func BenchmarkCommitProtocol(b *testing.B) {
	db := idemtest.New(b, fstest.MapFS{"00001_commit_bench.sql": {Data: []byte(`-- +goose Up
CREATE TABLE bench_accounts (id bigint PRIMARY KEY, balance bigint NOT NULL DEFAULT 0);
INSERT INTO bench_accounts (id) SELECT generate_series(1, 10000);
CREATE TABLE bench_inbox (
    key_id      text        PRIMARY KEY,
    fingerprint bytea       NOT NULL,
    status      text        NOT NULL DEFAULT 'done',
    result      json,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ON bench_inbox (created_at);
-- +goose Down
DROP TABLE bench_inbox;
DROP TABLE bench_accounts;
`)}})
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = 16
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)

	const claim = `WITH wait AS MATERIALIZED (SELECT set_config('lock_timeout', $3::text, true) ` +
		`FROM (SELECT set_config('idem.lock_timeout', current_setting('lock_timeout'), true) OFFSET 0) AS saved) ` +
		`INSERT INTO bench_inbox (key_id, fingerprint, status) SELECT $1::text, $2::bytea, %s FROM wait ON CONFLICT DO NOTHING ` +
		`RETURNING set_config('lock_timeout', current_setting('idem.lock_timeout'), true) IS NOT NULL`
	const claimCheck = "SELECT CASE WHEN coalesce(current_setting('idem.lock_timeout', true), '') <> '' THEN true " +
		"ELSE ('idem: not the transaction of the claim' || coalesce(current_setting('idem.lock_timeout', true), ''))::boolean END"
	const markDone = `WITH done AS (UPDATE bench_inbox SET status = 'done'%s WHERE key_id = $1 ` +
		`AND coalesce(current_setting('idem.lock_timeout', true), '') <> '' RETURNING 1) ` +
		`SELECT CASE WHEN EXISTS (SELECT FROM done) THEN true ` +
		`ELSE ('idem: not the transaction of the claim' || coalesce(current_setting('idem.lock_timeout', true), ''))::boolean END`

	var seq atomic.Int64
	fp := make([]byte, 33)
	deliver := func(conn *pgx.Conn, running, withResult bool) error {
		key := fmt.Sprintf("k-%d", seq.Add(1))
		status := "'done'"
		if running {
			status = "'running'"
		}
		first := &pgx.Batch{}
		first.Queue("begin")
		first.Queue(fmt.Sprintf(claim, status), key, fp, "2000ms")
		if err := conn.SendBatch(ctx, first).Close(); err != nil {
			return err
		}
		if _, err := conn.Exec(ctx, `UPDATE bench_accounts SET balance = balance + 1 WHERE id = $1`, rand.N(10000)+1); err != nil {
			return err
		}
		last := &pgx.Batch{}
		switch {
		case running && withResult:
			last.Queue(fmt.Sprintf(markDone, ", result = $2"), key, `{"balance":1}`)
		case running:
			last.Queue(fmt.Sprintf(markDone, ""), key)
		case withResult:
			last.Queue(`UPDATE bench_inbox SET result = $2 WHERE key_id = $1`, key, `{"balance":1}`)
			last.Queue(claimCheck)
		default:
			last.Queue(claimCheck)
		}
		last.Queue("commit")
		return conn.SendBatch(ctx, last).Close()
	}
	variants := []struct {
		name                string
		running, withResult bool
	}{
		{"result/done_at_claim", false, true},
		{"result/running_until_commit", true, true},
		{"no_result/done_at_claim", false, false},
		{"no_result/running_until_commit", true, false},
	}
	// Every worker delivers the four variants in turn, so that each runs
	// under the same load at every moment (the table grows, the machine's
	// other work comes and goes), and each variant's time per delivery is
	// reported: at a fixed concurrency, what a variant costs in throughput.
	var spent [4]atomic.Int64
	var n [4]atomic.Int64
	// RunParallel starts parallelism × GOMAXPROCS goroutines: 16 workers.
	b.SetParallelism(max(1, 16/runtime.GOMAXPROCS(0)))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		c, err := pool.Acquire(ctx)
		if err != nil {
			b.Error(err)
			return
		}
		defer c.Release()
		for i := rand.N(len(variants)); pb.Next(); i = (i + 1) % len(variants) {
			v := variants[i]
			start := time.Now()
			if err := deliver(c.Conn(), v.running, v.withResult); err != nil {
				b.Error(err)
				return
			}
			spent[i].Add(int64(time.Since(start)))
			n[i].Add(1)
		}
	})
	for i, v := range variants {
		if n[i].Load() > 0 {
			b.ReportMetric(float64(spent[i].Load())/float64(n[i].Load())/1e3, v.name+"-µs/delivery")
		}
	}
}
