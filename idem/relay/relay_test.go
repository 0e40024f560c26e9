package relay_test

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
	"github.com/idemgen/idemgen/idem/idemtest"
	"github.com/idemgen/idemgen/idem/internal/relaytest"
	"github.com/idemgen/idemgen/idem/relay"
	outboxmigrations "github.com/idemgen/idemgen/migrations"
)

// writeConcurrently writes rows in transactions of perTx rows from workers
// goroutines at once, each transaction with its NOTIFY.
func writeConcurrently(t *testing.T, pool *pgxpool.Pool, rows []relaytest.Row, workers, perTx int) {
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
				relaytest.Commit(t, pool, rows[from:min(from+perTx, len(rows))])
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
			db := idemtest.New(t, relaytest.OutboxFS(t, nil))
			rows := relaytest.MakeRows("share", 10000)
			rec := &relaytest.Recorder{}
			for i := 0; i < relays; i++ {
				id := fmt.Sprintf("r%d", i)
				r := relay.New(db.Pool, rec.Publisher(id, time.Millisecond, nil), relay.WithID(id), relay.WithLogger(relaytest.Logger(t)))
				relaytest.Run(t, r)
			}
			writeConcurrently(t, db.Pool, rows, 8, 100)
			relaytest.WaitFor(t, 20*time.Second, "every row published", func() bool { return relaytest.Pending(t, db) == 0 })
			pubs := rec.Snapshot()
			relaytest.CheckNoOverlap(t, pubs)
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
			if got := relaytest.QueryInt(t, db.Pool, `SELECT count(*)::int FROM idem_outbox`); got != 0 {
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
	db := idemtest.New(t, relaytest.OutboxFS(t, nil))
	rows := relaytest.MakeRows("slow", 30)
	relaytest.Commit(t, db.Pool, rows)
	rec := &relaytest.Recorder{}
	for i := 0; i < 5; i++ {
		id := fmt.Sprintf("slow%d", i)
		r := relay.New(db.Pool, rec.Publisher(id, 2500*time.Millisecond, nil), relay.WithID(id),
			relay.WithBatchSize(10), relay.WithLease(time.Second), relay.WithPollInterval(10*time.Millisecond),
			relay.WithLogger(relaytest.Logger(t)))
		relaytest.Run(t, r)
	}
	allPublished := relaytest.Eventually(20*time.Second, func() bool { return relaytest.Pending(t, db) == 0 })
	pubs := rec.Snapshot()
	relaytest.CheckNoOverlap(t, pubs)
	if !allPublished {
		t.Errorf("%d rows still pending after 20s", relaytest.Pending(t, db))
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
	db := idemtest.New(t, relaytest.OutboxFS(t, nil))
	rows := relaytest.MakeRows("fault", 6)
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
	rec := &relaytest.Recorder{}
	const base, maxBackoff = 60 * time.Millisecond, 100 * time.Millisecond
	r := relay.New(db.Pool, rec.Publisher("f", 0, fail), relay.WithID("f"), relay.WithMaxAttempts(3),
		relay.WithBackoff(base, maxBackoff), relay.WithPollInterval(10*time.Millisecond), relay.WithLogger(relaytest.Logger(t)))
	relaytest.Run(t, r)
	relaytest.Commit(t, db.Pool, rows)
	relaytest.WaitFor(t, 10*time.Second, "every row published or dead", func() bool { return relaytest.Pending(t, db) == 0 })

	attempts := map[string][]relaytest.Publication{}
	for _, p := range rec.Snapshot() {
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
	if got := relaytest.QueryInt(t, db.Pool, `SELECT count(*)::int FROM idem_outbox WHERE message_id <> $1::uuid`, poison); got != 0 {
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
	if got := len(rec.Snapshot()); got != 1*4+3+3 {
		t.Errorf("%d publications, want 10 (the dead row was tried again?)", got)
	}
}

// TestRelayPollOnly: without a listening connection (as through PgBouncer in
// transaction mode) the relay publishes rows committed without any NOTIFY.
func TestRelayPollOnly(t *testing.T) {
	db := idemtest.New(t, relaytest.OutboxFS(t, nil))
	rec := &relaytest.Recorder{}
	r := relay.New(db.Pool, rec.Publisher("p", 0, nil), relay.WithID("poll-only-"+db.Schema), relay.WithPollOnly(),
		relay.WithPollInterval(30*time.Millisecond), relay.WithLogger(relaytest.Logger(t)))
	relaytest.Run(t, r)
	rows := relaytest.MakeRows("poll", 5)
	ctx := context.Background()
	if err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error { return relaytest.Insert(ctx, tx, rows) }); err != nil {
		t.Fatal(err)
	}
	relaytest.WaitFor(t, 5*time.Second, "the rows published by polling", func() bool { return relaytest.Pending(t, db) == 0 })
	if n := relaytest.Listeners(t, db, r); n != 0 {
		t.Errorf("%d listening connections of a poll-only relay, want none", n)
	}
}

// TestRelayListenerReconnects: the listening connection terminated with
// pg_terminate_backend is reopened, and the rows committed while it was gone
// (their NOTIFY lost) are published by the catch-up poll after the
// reconnection, long before the next regular poll.
func TestRelayListenerReconnects(t *testing.T) {
	db := idemtest.New(t, relaytest.OutboxFS(t, nil))
	rec := &relaytest.Recorder{}
	r := relay.New(db.Pool, rec.Publisher("l", 0, nil), relay.WithID("listen-"+db.Schema),
		relay.WithPollInterval(time.Minute), relay.WithLogger(relaytest.Logger(t)))
	var opens atomic.Int32
	inGap, endGap := make(chan struct{}), make(chan struct{})
	relay.SetBeforeListen(r, func() {
		if opens.Add(1) == 2 {
			close(inGap)
			<-endGap
		}
	})
	relaytest.Run(t, r)
	relaytest.WaitFor(t, 5*time.Second, "the listening connection", func() bool { return relaytest.Listeners(t, db, r) == 1 })

	first := relaytest.MakeRows("before", 1)
	relaytest.Commit(t, db.Pool, first)
	relaytest.WaitFor(t, 5*time.Second, "the row published on its NOTIFY", func() bool { return rec.Len() == 1 })

	var terminated bool
	if err := db.Pool.QueryRow(context.Background(), `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1`,
		"idem relay "+r.ID()).Scan(&terminated); err != nil || !terminated {
		t.Fatalf("pg_terminate_backend: %v, %v", terminated, err)
	}
	<-inGap
	gap := relaytest.MakeRows("gap", 3)
	relaytest.Commit(t, db.Pool, gap)
	time.Sleep(100 * time.Millisecond)
	if got := rec.Len(); got != 1 {
		t.Fatalf("%d publications while nobody listened, want 1 (the poll is a minute away)", got)
	}
	close(endGap)
	relaytest.WaitFor(t, 5*time.Second, "the rows of the gap published after the reconnection", func() bool { return rec.Len() == 4 })
	relaytest.WaitFor(t, 5*time.Second, "the new listening connection", func() bool { return relaytest.Listeners(t, db, r) == 1 })

	// And the new connection hears the next NOTIFY.
	relaytest.Commit(t, db.Pool, relaytest.MakeRows("after", 1))
	relaytest.WaitFor(t, 5*time.Second, "a row published on a NOTIFY to the new connection", func() bool { return rec.Len() == 5 })
}

// TestRelayCleanStop: cancelling Run during a publish releases the claimed
// rows at once (due, their attempt given back) instead of leaving them to
// their lease.
func TestRelayCleanStop(t *testing.T) {
	db := idemtest.New(t, relaytest.OutboxFS(t, nil))
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
	r := relay.New(db.Pool, pub, relay.WithID("stop"), relay.WithLease(time.Hour), relay.WithLogger(relaytest.Logger(t)))
	stop := relaytest.Run(t, r)
	relaytest.Commit(t, db.Pool, relaytest.MakeRows("stop", 4))
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
	if got := relaytest.QueryInt(t, db.Pool, `SELECT count(*)::int FROM idem_outbox
		WHERE claim_token IS NULL AND lease_until IS NULL AND attempts IS NULL AND last_error IS NULL AND coalesce(available_at, created_at) <= now() AND dead_at IS NULL`); got != 4 {
		t.Errorf("%d of 4 rows released after the stop, want all (free at once, no attempt used)", got)
	}
}

// TestRelayDeletesWhatItPublishes: the relay deletes a row once the broker
// confirmed it (the outbox migration 00002): no published row is kept, a
// dead one is, and Purge, which has nothing left to do, deletes nothing.
func TestRelayDeletesWhatItPublishes(t *testing.T) {
	db := idemtest.New(t, relaytest.OutboxFS(t, nil))
	ctx := context.Background()
	rows := relaytest.MakeRows("pub", 250)
	relaytest.Commit(t, db.Pool, rows)
	relaytest.Commit(t, db.Pool, relaytest.MakeRows("dead", 2))
	if _, err := db.Pool.Exec(ctx, `UPDATE idem_outbox SET dead_at = now(), attempts = 10 WHERE key = 'dead'`); err != nil {
		t.Fatal(err)
	}
	rec := &relaytest.Recorder{}
	r := relay.New(db.Pool, rec.Publisher("d", 0, nil), relay.WithPollInterval(10*time.Millisecond),
		relay.WithLogger(relaytest.Logger(t)))
	stop := relaytest.Run(t, r)
	relaytest.WaitFor(t, 20*time.Second, "every row published", func() bool { return relaytest.Pending(t, db) == 0 })
	stop()
	if got := len(rec.Snapshot()); got != len(rows) {
		t.Errorf("%d publications, want %d", got, len(rows))
	}
	if got := relaytest.QueryInt(t, db.Pool, `SELECT count(*)::int FROM idem_outbox WHERE key = 'dead' AND dead_at IS NOT NULL`); got != 2 {
		t.Errorf("%d dead rows kept, want 2", got)
	}
	if got := relaytest.QueryInt(t, db.Pool, `SELECT count(*)::int FROM idem_outbox`); got != 2 {
		t.Errorf("%d rows in the outbox, want the 2 dead ones (every published row deleted)", got)
	}
	if n, err := r.Purge(ctx, 0); n != 0 || err != nil {
		t.Errorf("Purge: %d, %v; want 0, nil", n, err)
	}
	if _, err := r.Purge(ctx, -time.Second); err == nil {
		t.Error("Purge(-1s): no error")
	}
	if got := relaytest.QueryInt(t, db.Pool, `SELECT count(*)::int FROM idem_outbox`); got != 2 {
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
	db := idemtest.New(t, relaytest.OutboxFS(t, nil))
	const n = 1000
	for i := range n / 100 {
		relaytest.Commit(t, db.Pool, relaytest.MakeRows("hot-"+strconv.Itoa(i), 100))
	}
	rec := &relaytest.Recorder{}
	r := relay.New(db.Pool, rec.Publisher("h", 0, nil), relay.WithPollInterval(10*time.Millisecond),
		relay.WithLogger(relaytest.Logger(t)))
	stop := relaytest.Run(t, r)
	relaytest.WaitFor(t, 30*time.Second, "every row published", func() bool { return relaytest.Pending(t, db) == 0 })
	stop()
	var upd, hot int
	relaytest.WaitFor(t, 30*time.Second, "the relay's updates in pg_stat_user_tables", func() bool {
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
	rec := &relaytest.Recorder{}
	r := relay.New(db.Pool, rec.Publisher("old", 0, nil), relay.WithLogger(relaytest.Logger(t)))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = r.Run(ctx)
	if err == nil || !strings.Contains(err.Error(), "00002_idem_outbox_delete_on_publish") {
		t.Fatalf("Run on the old layout: %v; want an error naming the migration", err)
	}
	if ctx.Err() != nil {
		t.Errorf("Run returned only when its context ended")
	}
	if got := len(rec.Snapshot()); got != 0 {
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
	rec := &relaytest.Recorder{}
	r := relay.New(db.Pool, rec.Publisher("v2", 0, nil), relay.WithLogger(relaytest.Logger(t)))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := r.Run(ctx)
	if err == nil || !strings.Contains(err.Error(), "00003_idem_outbox_compact_claim") {
		t.Fatalf("Run on the layout of 00002: %v; want an error naming the migration 00003", err)
	}
	if ctx.Err() != nil {
		t.Errorf("Run returned only when its context ended")
	}
	if got := len(rec.Snapshot()); got != 0 {
		t.Errorf("%d publications from a table the relay refuses", got)
	}
}

// TestRelayOrderedDeadRowHoldsBackOnlyItsKey: a permanently rejected row on
// one key holds that key back until it is dead-lettered, after the maximum
// attempts, while the other keys flow; then the rest of its key flows, in
// order, and the dead row stays, visible.
func TestRelayOrderedDeadRowHoldsBackOnlyItsKey(t *testing.T) {
	db := idemtest.New(t, relaytest.OutboxFS(t, nil))
	ordered := func(key string, payloads ...string) []relaytest.Row {
		rows := relaytest.MakeRows(key, len(payloads))
		for i := range rows {
			rows[i].OrderingKey, rows[i].Payload = key, payloads[i]
		}
		return rows
	}
	bad := ordered("bad", "poison", "b2", "b3")
	good := ordered("good", "g1", "g2", "g3", "g4", "g5", "g6", "g7", "g8")
	poison := bad[0].ID.String()
	rec := &relaytest.Recorder{}
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
		relaytest.Run(t, relay.New(db.Pool, rec.Publisher(id, 0, fail), relay.WithID(id), relay.WithOrdered(),
			relay.WithMaxAttempts(3), relay.WithBackoff(base, 2*base), relay.WithPollInterval(10*time.Millisecond),
			relay.WithLogger(relaytest.Logger(t))))
	}
	relaytest.Commit(t, db.Pool, append(bad, good...))
	relaytest.WaitFor(t, 30*time.Second, "every row published or dead", func() bool { return relaytest.Pending(t, db) == 0 })

	var order []string
	var poisonTries []relaytest.Publication
	for _, p := range rec.Snapshot() {
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
	for _, p := range rec.Snapshot() {
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
	if got := relaytest.QueryInt(t, db.Pool, `SELECT count(*)::int FROM idem_outbox WHERE message_id = $1::uuid AND dead_at IS NOT NULL AND attempts = 3`, poison); got != 1 {
		t.Errorf("the poison row is not kept dead after 3 attempts")
	}
}
