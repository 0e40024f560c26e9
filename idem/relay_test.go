package idem_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemimpl"
	"github.com/idemgen/idemgen/idem/idemtest"
	outboxmigrations "github.com/idemgen/idemgen/migrations"
)

// writeConcurrently writes rows in transactions of perTx rows from workers
// goroutines at once, each transaction with its NOTIFY.
func writeConcurrently(t *testing.T, pool *pgxpool.Pool, rows []outRow, workers, perTx int) {
	t.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				from := int(next.Add(int64(perTx))) - perTx
				if from >= len(rows) {
					return
				}
				commitOutbox(t, pool, rows[from:min(from+perTx, len(rows))])
			}
		}()
	}
	wg.Wait()
}

// TestRelaysShareTheWork: 2 and 4 relays at once over 10,000 rows written by
// concurrent transactions: every row is published and marked, and no row is
// ever published by two relays at overlapping times.
func TestRelaysShareTheWork(t *testing.T) {
	for _, relays := range []int{2, 4} {
		t.Run(fmt.Sprintf("relays=%d", relays), func(t *testing.T) {
			db := idemtest.New(t, outboxFS(t, nil))
			rows := makeRows("share", 10000)
			rec := &recorder{}
			for i := 0; i < relays; i++ {
				id := fmt.Sprintf("r%d", i)
				r := idem.NewRelay(db.Pool, rec.publisher(id, time.Millisecond, nil), idem.WithRelayID(id), idem.WithRelayLogger(testLogger(t)))
				runRelay(t, r)
			}
			writeConcurrently(t, db.Pool, rows, 8, 100)
			waitFor(t, 20*time.Second, "every row published", func() bool { return pendingRows(t, db) == 0 })
			pubs := rec.snapshot()
			checkNoOverlap(t, pubs)
			seen := map[string]bool{}
			byRelay := map[string]int{}
			for _, p := range pubs {
				seen[p.ID] = true
				byRelay[p.Relay]++
			}
			for _, r := range rows {
				if !seen[r.ID.String()] {
					t.Fatalf("row %s never published", r.ID)
				}
			}
			if got := queryInt(t, db.Pool, `SELECT count(*)::int FROM idem_outbox`); got != 0 {
				t.Errorf("%d rows left in the outbox, want none (each deleted once published)", got)
			}
			t.Logf("%d publications of %d rows; by relay: %v", len(pubs), len(rows), byRelay)
		})
	}
}

// TestRelayLeaseShorterThanPublish: a publish that takes longer than the
// lease renews it, so that none of the idle relays (more relays than
// batches) takes the rows while it is under way. The lease is short against
// the publish (2.5 s) but long against the scheduling delays of a loaded
// machine: the relay stops a publish a tenth of the lease before it would
// lapse, and a lease of tens of milliseconds left too thin a margin for the
// publisher to notice in time.
func TestRelayLeaseShorterThanPublish(t *testing.T) {
	db := idemtest.New(t, outboxFS(t, nil))
	rows := makeRows("slow", 30)
	commitOutbox(t, db.Pool, rows)
	rec := &recorder{}
	for i := 0; i < 5; i++ {
		id := fmt.Sprintf("slow%d", i)
		r := idem.NewRelay(db.Pool, rec.publisher(id, 2500*time.Millisecond, nil), idem.WithRelayID(id),
			idem.WithRelayBatchSize(10), idem.WithRelayLease(time.Second), idem.WithRelayPollInterval(10*time.Millisecond),
			idem.WithRelayLogger(testLogger(t)))
		runRelay(t, r)
	}
	allPublished := eventually(20*time.Second, func() bool { return pendingRows(t, db) == 0 })
	pubs := rec.snapshot()
	checkNoOverlap(t, pubs)
	if !allPublished {
		t.Errorf("%d rows still pending after 20s", pendingRows(t, db))
	}
	if len(pubs) != len(rows) {
		t.Errorf("%d publications of %d rows: a lease lapsed during a publish and another relay took the rows", len(pubs), len(rows))
	}
}

// TestRelayRetriesBackoffAndDeadLetters: with a fault-injecting publisher, a
// message that fails twice is published on its third attempt after growing
// backoffs, with its last error kept; a message that always fails is
// dead-lettered after the maximum attempts, kept and visible; the other
// messages are published at once, not held back by either.
func TestRelayRetriesBackoffAndDeadLetters(t *testing.T) {
	db := idemtest.New(t, outboxFS(t, nil))
	rows := makeRows("fault", 6)
	flaky, poison := rows[1].ID.String(), rows[4].ID.String()
	var flakyFails atomic.Int32
	fail := func(m idem.OutgoingMessage) error {
		switch {
		case m.ID == poison:
			return errors.New("broker: rejected for good")
		case m.ID == flaky && flakyFails.Add(1) <= 2:
			return fmt.Errorf("broker: unavailable (attempt %d)", m.Attempt)
		}
		return nil
	}
	rec := &recorder{}
	const base, maxBackoff = 60 * time.Millisecond, 100 * time.Millisecond
	r := idem.NewRelay(db.Pool, rec.publisher("f", 0, fail), idem.WithRelayID("f"), idem.WithRelayMaxAttempts(3),
		idem.WithRelayBackoff(base, maxBackoff), idem.WithRelayPollInterval(10*time.Millisecond), idem.WithRelayLogger(testLogger(t)))
	runRelay(t, r)
	commitOutbox(t, db.Pool, rows)
	waitFor(t, 10*time.Second, "every row published or dead", func() bool { return pendingRows(t, db) == 0 })

	attempts := map[string][]publication{}
	for _, p := range rec.snapshot() {
		attempts[p.ID] = append(attempts[p.ID], p)
	}
	for _, row := range rows {
		id := row.ID.String()
		want := 1
		if id == flaky || id == poison {
			want = 3
		}
		if got := len(attempts[id]); got != want {
			t.Errorf("message %s: %d attempts, want %d", row.Payload, got, want)
		}
		for i, p := range attempts[id] {
			if p.Attempt != i+1 {
				t.Errorf("message %s: try %d had Attempt %d", row.Payload, i+1, p.Attempt)
			}
		}
	}
	// The backoffs: base after the first failure, doubled but capped after
	// the second.
	f := attempts[flaky]
	if gap := f[1].Start.Sub(f[0].End); gap < base {
		t.Errorf("flaky: retried %v after the first failure, want at least %v", gap, base)
	}
	if gap := f[2].Start.Sub(f[1].End); gap < maxBackoff {
		t.Errorf("flaky: retried %v after the second failure, want at least %v (2×base capped)", gap, maxBackoff)
	}
	// The other messages went out on the first round, before any retry.
	for _, row := range rows {
		if id := row.ID.String(); id != flaky && id != poison && attempts[id][0].Start.After(f[1].Start) {
			t.Errorf("message %s was held back behind the failing ones", row.Payload)
		}
	}

	var (
		poisonErr      string
		poisonDead     bool
		poisonAttempts int
	)
	ctx := context.Background()
	// A published row is deleted: of the six, only the poison row is left.
	if got := queryInt(t, db.Pool, `SELECT count(*)::int FROM idem_outbox WHERE message_id <> $1::uuid`, poison); got != 0 {
		t.Errorf("%d published rows left in the outbox, want none (the flaky one deleted once its third try was confirmed)", got)
	}
	if err := db.Pool.QueryRow(ctx, `SELECT dead_at IS NOT NULL, last_error, attempts FROM idem_outbox WHERE message_id = $1::uuid`, poison).
		Scan(&poisonDead, &poisonErr, &poisonAttempts); err != nil {
		t.Fatal(err)
	}
	if !poisonDead || poisonAttempts != 3 || poisonErr != "broker: rejected for good" {
		t.Errorf("poison row: dead=%v attempts=%d last_error=%q, want dead after 3 attempts, kept with its error", poisonDead, poisonAttempts, poisonErr)
	}
	b, err := r.Backlog(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if b.Pending != 0 || b.Dead != 1 || b.OldestAge != 0 {
		t.Errorf("backlog %+v, want nothing pending and one dead row", b)
	}
	// A dead row is never claimed again.
	time.Sleep(100 * time.Millisecond)
	if got := len(rec.snapshot()); got != 1*4+3+3 {
		t.Errorf("%d publications, want 10 (the dead row was tried again?)", got)
	}
}

// TestRelayPollOnly: without a listening connection (as through PgBouncer in
// transaction mode) the relay publishes rows committed without any NOTIFY.
func TestRelayPollOnly(t *testing.T) {
	db := idemtest.New(t, outboxFS(t, nil))
	rec := &recorder{}
	r := idem.NewRelay(db.Pool, rec.publisher("p", 0, nil), idem.WithRelayID("poll-only-"+db.Schema), idem.WithRelayPollOnly(),
		idem.WithRelayPollInterval(30*time.Millisecond), idem.WithRelayLogger(testLogger(t)))
	runRelay(t, r)
	rows := makeRows("poll", 5)
	ctx := context.Background()
	if err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error { return insertOutbox(ctx, tx, rows) }); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the rows published by polling", func() bool { return pendingRows(t, db) == 0 })
	if n := listeners(t, db, r); n != 0 {
		t.Errorf("%d listening connections of a poll-only relay, want none", n)
	}
}

func listeners(t *testing.T, db *idemtest.DB, r *idem.Relay) int {
	return queryInt(t, db.Pool, `SELECT count(*)::int FROM pg_stat_activity WHERE application_name = $1`, "idem relay "+r.ID())
}

// TestRelayListenerReconnects: the listening connection terminated with
// pg_terminate_backend is reopened, and the rows committed while it was gone
// (their NOTIFY lost) are published by the catch-up poll after the
// reconnection, long before the next regular poll.
func TestRelayListenerReconnects(t *testing.T) {
	db := idemtest.New(t, outboxFS(t, nil))
	rec := &recorder{}
	r := idem.NewRelay(db.Pool, rec.publisher("l", 0, nil), idem.WithRelayID("listen-"+db.Schema),
		idem.WithRelayPollInterval(time.Minute), idem.WithRelayLogger(testLogger(t)))
	var opens atomic.Int32
	inGap, endGap := make(chan struct{}), make(chan struct{})
	idem.SetBeforeListen(r, func() {
		if opens.Add(1) == 2 {
			close(inGap)
			<-endGap
		}
	})
	runRelay(t, r)
	waitFor(t, 5*time.Second, "the listening connection", func() bool { return listeners(t, db, r) == 1 })

	first := makeRows("before", 1)
	commitOutbox(t, db.Pool, first)
	waitFor(t, 5*time.Second, "the row published on its NOTIFY", func() bool { return rec.len() == 1 })

	var terminated bool
	if err := db.Pool.QueryRow(context.Background(), `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1`,
		"idem relay "+r.ID()).Scan(&terminated); err != nil || !terminated {
		t.Fatalf("pg_terminate_backend: %v, %v", terminated, err)
	}
	<-inGap
	gap := makeRows("gap", 3)
	commitOutbox(t, db.Pool, gap)
	time.Sleep(100 * time.Millisecond)
	if got := rec.len(); got != 1 {
		t.Fatalf("%d publications while nobody listened, want 1 (the poll is a minute away)", got)
	}
	close(endGap)
	waitFor(t, 5*time.Second, "the rows of the gap published after the reconnection", func() bool { return rec.len() == 4 })
	waitFor(t, 5*time.Second, "the new listening connection", func() bool { return listeners(t, db, r) == 1 })

	// And the new connection hears the next NOTIFY.
	commitOutbox(t, db.Pool, makeRows("after", 1))
	waitFor(t, 5*time.Second, "a row published on a NOTIFY to the new connection", func() bool { return rec.len() == 5 })
}

// TestRelayCleanStop: cancelling Run during a publish releases the claimed
// rows at once (due, their attempt given back) instead of leaving them to
// their lease.
func TestRelayCleanStop(t *testing.T) {
	db := idemtest.New(t, outboxFS(t, nil))
	started := make(chan struct{})
	var once sync.Once
	pub := idem.PublisherFunc(func(ctx context.Context, msgs []idem.OutgoingMessage) []error {
		once.Do(func() { close(started) })
		<-ctx.Done()
		errs := make([]error, len(msgs))
		for i := range errs {
			errs[i] = ctx.Err()
		}
		return errs
	})
	r := idem.NewRelay(db.Pool, pub, idem.WithRelayID("stop"), idem.WithRelayLease(time.Hour), idem.WithRelayLogger(testLogger(t)))
	stop := runRelay(t, r)
	commitOutbox(t, db.Pool, makeRows("stop", 4))
	select {
	case <-started:
	case <-time.After(5 * time.Second):
		t.Fatal("the relay never published")
	}
	begun := time.Now()
	stop()
	if took := time.Since(begun); took > time.Second {
		t.Errorf("Run took %v to return after the cancel", took)
	}
	if got := queryInt(t, db.Pool, `SELECT count(*)::int FROM idem_outbox
		WHERE claim_token IS NULL AND lease_until IS NULL AND attempts IS NULL AND last_error IS NULL AND coalesce(available_at, created_at) <= now() AND dead_at IS NULL`); got != 4 {
		t.Errorf("%d of 4 rows released after the stop, want all (free at once, no attempt used)", got)
	}
}

// TestRelayDeletesWhatItPublishes: the relay deletes a row once the broker
// confirmed it (the outbox migration 00002): no published row is kept, a
// dead one is, and Purge, which has nothing left to do, deletes nothing.
func TestRelayDeletesWhatItPublishes(t *testing.T) {
	db := idemtest.New(t, outboxFS(t, nil))
	ctx := context.Background()
	rows := makeRows("pub", 250)
	commitOutbox(t, db.Pool, rows)
	commitOutbox(t, db.Pool, makeRows("dead", 2))
	if _, err := db.Pool.Exec(ctx, `UPDATE idem_outbox SET dead_at = now(), attempts = 10 WHERE key = 'dead'`); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	r := idem.NewRelay(db.Pool, rec.publisher("d", 0, nil), idem.WithRelayPollInterval(10*time.Millisecond),
		idem.WithRelayLogger(testLogger(t)))
	stop := runRelay(t, r)
	waitFor(t, 20*time.Second, "every row published", func() bool { return pendingRows(t, db) == 0 })
	stop()
	if got := len(rec.snapshot()); got != len(rows) {
		t.Errorf("%d publications, want %d", got, len(rows))
	}
	if got := queryInt(t, db.Pool, `SELECT count(*)::int FROM idem_outbox WHERE key = 'dead' AND dead_at IS NOT NULL`); got != 2 {
		t.Errorf("%d dead rows kept, want 2", got)
	}
	if got := queryInt(t, db.Pool, `SELECT count(*)::int FROM idem_outbox`); got != 2 {
		t.Errorf("%d rows in the outbox, want the 2 dead ones (every published row deleted)", got)
	}
	if n, err := r.Purge(ctx, 0); n != 0 || err != nil {
		t.Errorf("Purge: %d, %v; want 0, nil", n, err)
	}
	if _, err := r.Purge(ctx, -time.Second); err == nil {
		t.Error("Purge(-1s): no error")
	}
	if got := queryInt(t, db.Pool, `SELECT count(*)::int FROM idem_outbox`); got != 2 {
		t.Errorf("%d rows after Purge, want the 2 dead ones", got)
	}
}

// TestRelayClaimIsHOT: the claim sets claim_token, lease_until and attempts,
// which no index covers, and the outbox's fillfactor leaves room in each
// page, so a claim rewrites the row in its own page (a heap-only update,
// which adds no index entry and writes only what changed to the WAL), even
// for a backlog committed before the relay started, claimed a batch at a
// time. The relay's backends report their updates to pg_stat_user_tables
// once idle; the test waits for them.
func TestRelayClaimIsHOT(t *testing.T) {
	db := idemtest.New(t, outboxFS(t, nil))
	const n = 1000
	for i := range n / 100 {
		commitOutbox(t, db.Pool, makeRows("hot-"+strconv.Itoa(i), 100))
	}
	rec := &recorder{}
	r := idem.NewRelay(db.Pool, rec.publisher("h", 0, nil), idem.WithRelayPollInterval(10*time.Millisecond),
		idem.WithRelayLogger(testLogger(t)))
	stop := runRelay(t, r)
	waitFor(t, 30*time.Second, "every row published", func() bool { return pendingRows(t, db) == 0 })
	stop()
	var upd, hot int
	waitFor(t, 30*time.Second, "the relay's updates in pg_stat_user_tables", func() bool {
		if err := db.Pool.QueryRow(context.Background(), `SELECT n_tup_upd::int, n_tup_hot_upd::int FROM pg_stat_user_tables
			WHERE relid = 'idem_outbox'::regclass`).Scan(&upd, &hot); err != nil {
			t.Fatal(err)
		}
		return upd >= n
	})
	t.Logf("%d updates (the claims), %d of them HOT", upd, hot)
	if upd != n || hot != upd {
		t.Errorf("%d updates, %d of them HOT; want %d claims, every one HOT", upd, hot, n)
	}
}

// TestRelayRefusesTheOldLayout: on an outbox table without the migration
// 00002 (published rows still kept, with published_at) the relay's claim
// would take the published rows again; Run refuses it at once, naming the
// migration, and publishes nothing.
func TestRelayRefusesTheOldLayout(t *testing.T) {
	first, err := fs.ReadFile(outboxmigrations.FS, "00001_idem_outbox.sql")
	if err != nil {
		t.Fatal(err)
	}
	db := idemtest.New(t, fstest.MapFS{"00001_idem_outbox.sql": {Data: first}})
	if _, err := db.Pool.Exec(context.Background(), `INSERT INTO idem_outbox (message_id, consumer, key, destination, payload, published_at)
		VALUES (gen_random_uuid(), 'c', 'k', 'd', '\x00', now())`); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	r := idem.NewRelay(db.Pool, rec.publisher("old", 0, nil), idem.WithRelayLogger(testLogger(t)))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = r.Run(ctx)
	if err == nil || !strings.Contains(err.Error(), "00002_idem_outbox_delete_on_publish") {
		t.Fatalf("Run on the old layout: %v; want an error naming the migration", err)
	}
	if ctx.Err() != nil {
		t.Errorf("Run returned only when its context ended")
	}
	if got := len(rec.snapshot()); got != 0 {
		t.Errorf("%d publications of an already published row", got)
	}
}

// TestRelayRefusesTheLayoutOf00002: on an outbox table without the
// migration 00003 (a uuid claim_token) this release's bigint token matches
// no column type; Run refuses it at once, naming the migration, and
// publishes nothing.
func TestRelayRefusesTheLayoutOf00002(t *testing.T) {
	chain := fstest.MapFS{}
	for _, name := range []string{"00001_idem_outbox.sql", "00002_idem_outbox_delete_on_publish.sql"} {
		data, err := fs.ReadFile(outboxmigrations.FS, name)
		if err != nil {
			t.Fatal(err)
		}
		chain[name] = &fstest.MapFile{Data: data}
	}
	db := idemtest.New(t, chain)
	if _, err := db.Pool.Exec(context.Background(), `INSERT INTO idem_outbox (message_id, consumer, key, destination, payload)
		VALUES (gen_random_uuid(), 'c', 'k', 'd', '\x00')`); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	r := idem.NewRelay(db.Pool, rec.publisher("v2", 0, nil), idem.WithRelayLogger(testLogger(t)))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := r.Run(ctx)
	if err == nil || !strings.Contains(err.Error(), "00003_idem_outbox_compact_claim") {
		t.Fatalf("Run on the layout of 00002: %v; want an error naming the migration 00003", err)
	}
	if ctx.Err() != nil {
		t.Errorf("Run returned only when its context ended")
	}
	if got := len(rec.snapshot()); got != 0 {
		t.Errorf("%d publications from a table the relay refuses", got)
	}
}

// TestRelayOrderedKeepsEachKeysOrder: 10 keys × 100 messages delivered by
// 20 concurrent workers through a publishing inbox whose handler serialises
// per key (it takes the key's row lock before it numbers its message and
// publishes it with the key as its ordering key), two relays in ordered
// mode: each key's messages are published one at a time, in order.
func TestRelayOrderedKeepsEachKeysOrder(t *testing.T) {
	db := idemtest.New(t, outboxFS(t, map[string]string{"00100_orders.sql": orderMigration, "00101_seqs.sql": `-- +goose Up
CREATE TABLE seqs (k text PRIMARY KEY, n integer NOT NULL DEFAULT 0);
-- +goose Down
DROP TABLE seqs;
`}))
	const keys, perKey = 10, 100
	ctx := context.Background()
	for k := 0; k < keys; k++ {
		if _, err := db.Pool.Exec(ctx, `INSERT INTO seqs (k) VALUES ($1)`, "key-"+strconv.Itoa(k)); err != nil {
			t.Fatal(err)
		}
	}
	rec := &recorder{}
	for i := 0; i < 2; i++ {
		id := fmt.Sprintf("o%d", i)
		runRelay(t, idem.NewRelay(db.Pool, rec.publisher(id, 200*time.Microsecond, nil), idem.WithRelayID(id), idem.WithRelayOrdered(),
			idem.WithRelayPollInterval(20*time.Millisecond), idem.WithRelayLogger(testLogger(t))))
	}
	// The handler numbers the messages of its key under the key's row lock,
	// so the transactions of one key commit in the order of their numbers.
	numbered := idemimpl.NewPublishingInbox(db.Pool, orderTable, idemimpl.NoResultPublishing(func(ctx context.Context, tx pgx.Tx, out *idem.Outbox, msg order) error {
		var n int
		if err := tx.QueryRow(ctx, `UPDATE seqs SET n = n + 1 WHERE k = $1 RETURNING n`, msg.Shop).Scan(&n); err != nil {
			return err
		}
		return out.Publish("test.seq", []byte(strconv.Itoa(n)), idem.WithOrderingKey(msg.Shop))
	}))
	// 20 workers, each delivering messages of keys taken round robin, so
	// that deliveries of one key contend.
	var wg sync.WaitGroup
	var next atomic.Int32
	for w := 0; w < 20; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= keys*perKey {
					return
				}
				msg := order{Shop: "key-" + strconv.Itoa(i%keys), Number: int64(i + 1)}
				if _, outcome, err := numbered.Handle(ctx, msg); err != nil || outcome != idem.Processed {
					t.Errorf("deliver %+v: %v, %v", msg, outcome, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	waitFor(t, 20*time.Second, "every row published", func() bool { return pendingRows(t, db) == 0 })

	pubs := rec.snapshot()
	if len(pubs) != keys*perKey {
		t.Errorf("%d publications, want %d", len(pubs), keys*perKey)
	}
	byKey := map[string][]publication{}
	byRelay := map[string]int{}
	for _, p := range pubs {
		byKey[p.OrderingKey] = append(byKey[p.OrderingKey], p)
		byRelay[p.Relay]++
	}
	for key, ps := range byKey {
		for i, p := range ps {
			if p.Payload != strconv.Itoa(i+1) {
				t.Fatalf("key %s: publication %d carries message %s, want %d", key, i+1, p.Payload, i+1)
			}
			if i > 0 && p.Start.Before(ps[i-1].End) {
				t.Fatalf("key %s: message %s published while message %s still was", key, p.Payload, ps[i-1].Payload)
			}
		}
	}
	t.Logf("by relay: %v", byRelay)
}

// TestRelayOrderedDeadRowHoldsBackOnlyItsKey: a permanently rejected row on
// one key holds that key back until it is dead-lettered, after the maximum
// attempts, while the other keys flow; then the rest of its key flows, in
// order, and the dead row stays, visible.
func TestRelayOrderedDeadRowHoldsBackOnlyItsKey(t *testing.T) {
	db := idemtest.New(t, outboxFS(t, nil))
	ordered := func(key string, payloads ...string) []outRow {
		rows := makeRows(key, len(payloads))
		for i := range rows {
			rows[i].OrderingKey, rows[i].Payload = key, payloads[i]
		}
		return rows
	}
	bad := ordered("bad", "poison", "b2", "b3")
	good := ordered("good", "g1", "g2", "g3", "g4", "g5", "g6", "g7", "g8")
	poison := bad[0].ID.String()
	rec := &recorder{}
	fail := func(m idem.OutgoingMessage) error {
		if m.ID == poison {
			return errors.New("broker: rejected for good")
		}
		return nil
	}
	// The poison row's first retry comes a second after its first try: the
	// other key's eight rows, a claim round trip each, go out well within it
	// on a loaded machine too (at 150 ms they did not always).
	const base = time.Second
	for i := 0; i < 2; i++ {
		id := fmt.Sprintf("d%d", i)
		runRelay(t, idem.NewRelay(db.Pool, rec.publisher(id, 0, fail), idem.WithRelayID(id), idem.WithRelayOrdered(),
			idem.WithRelayMaxAttempts(3), idem.WithRelayBackoff(base, 2*base), idem.WithRelayPollInterval(10*time.Millisecond),
			idem.WithRelayLogger(testLogger(t))))
	}
	commitOutbox(t, db.Pool, append(bad, good...))
	waitFor(t, 30*time.Second, "every row published or dead", func() bool { return pendingRows(t, db) == 0 })

	var order []string
	var poisonTries []publication
	for _, p := range rec.snapshot() {
		if p.ID == poison {
			poisonTries = append(poisonTries, p)
		}
		order = append(order, p.Payload)
	}
	if len(poisonTries) != 3 {
		t.Fatalf("poison tried %d times, want 3; publications: %v", len(poisonTries), order)
	}
	lastTry := poisonTries[2].End
	var goodBeforeDeath int
	for _, p := range rec.snapshot() {
		switch {
		case p.OrderingKey == "bad" && p.ID != poison && p.Start.Before(lastTry):
			t.Errorf("%s published before the poison row of its key was dead: %v", p.Payload, order)
		case p.OrderingKey == "good" && p.End.Before(poisonTries[1].Start):
			goodBeforeDeath++
		}
	}
	if goodBeforeDeath != len(good) {
		t.Errorf("%d of the %d messages of the other key published while the poison row waited for its retry, want all: %v", goodBeforeDeath, len(good), order)
	}
	var rest []string
	for _, p := range order {
		if p == "b2" || p == "b3" {
			rest = append(rest, p)
		}
	}
	if fmt.Sprint(rest) != "[b2 b3]" {
		t.Errorf("the rest of the key published as %v, want [b2 b3]", rest)
	}
	if got := queryInt(t, db.Pool, `SELECT count(*)::int FROM idem_outbox WHERE message_id = $1::uuid AND dead_at IS NOT NULL AND attempts = 3`, poison); got != 1 {
		t.Errorf("the poison row is not kept dead after 3 attempts")
	}
}
