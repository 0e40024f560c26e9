package relay_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemtest"
	"github.com/idemgen/idemgen/idem/internal/relaytest"
	"github.com/idemgen/idemgen/idem/relay"
)

// statementLog records when the relay's claims and marks ended, how many
// rows each took and which pipelined round trip carried them, as seen by
// pgx (single statements and batched ones).
type statementLog struct {
	mu      sync.Mutex
	runs    []statementRun
	batches atomic.Int64
}

type statementRun struct {
	name  string // "Claim", "MarkPublished", ...: the sqlc name of the query
	rows  int64
	end   time.Time
	batch int64 // the pgx batch (one round trip) that carried it; 0: none
}

type (
	sqlKey   struct{}
	batchKey struct{}
)

// sqlcName is the name sqlc writes at the head of a query's text.
func sqlcName(sql string) string {
	rest, ok := strings.CutPrefix(sql, "-- name: ")
	if !ok {
		return ""
	}
	name, _, _ := strings.Cut(rest, " ")
	return name
}

func (l *statementLog) add(sql string, tag int64, err error, batch int64) {
	if name := sqlcName(sql); name != "" && err == nil {
		l.mu.Lock()
		l.runs = append(l.runs, statementRun{name: name, rows: tag, end: time.Now(), batch: batch})
		l.mu.Unlock()
	}
}

func (l *statementLog) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	return context.WithValue(ctx, sqlKey{}, data.SQL)
}

func (l *statementLog) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	sql, _ := ctx.Value(sqlKey{}).(string)
	l.add(sql, data.CommandTag.RowsAffected(), data.Err, 0)
}

func (l *statementLog) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return context.WithValue(ctx, batchKey{}, l.batches.Add(1))
}

func (l *statementLog) TraceBatchQuery(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchQueryData) {
	batch, _ := ctx.Value(batchKey{}).(int64)
	l.add(data.SQL, data.CommandTag.RowsAffected(), data.Err, batch)
}

func (l *statementLog) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// taking returns the runs of name that took rows, in the order they ended.
func (l *statementLog) taking(name string) []statementRun {
	l.mu.Lock()
	defer l.mu.Unlock()
	var runs []statementRun
	for _, r := range l.runs {
		if r.name == name && r.rows > 0 {
			runs = append(runs, r)
		}
	}
	slices.SortStableFunc(runs, func(a, b statementRun) int { return a.end.Compare(b.end) })
	return runs
}

// publishCalls groups publications into the Publish calls that carried
// them, in the order they started.
func publishCalls(pubs []relaytest.Publication) []relaytest.Publication {
	var calls []relaytest.Publication
	seen := map[time.Time]bool{}
	for _, p := range pubs {
		if !seen[p.Start] {
			seen[p.Start] = true
			calls = append(calls, p)
		}
	}
	return calls
}

// TestRelayOverlapsTheDatabaseWithSlowConfirms: a publisher that takes 300ms
// to confirm each batch of 100 rows. While a batch is at the broker, the
// relay claims the next one and marks the one before, in one round trip, so
// that every batch but the last has its successor claimed during its
// publish, and every batch but the first has its predecessor marked in that
// round trip; each row is published once and marked.
//
// The k-th claim that took rows took the k-th batch. "During its publish"
// is between the return of the publish before it (the relay launches a
// batch only then) and the end of its own 300ms, both as the publisher saw
// them; the publisher's start is not a bound, since on a loaded machine the
// goroutine that calls it may run after the round trip launched beside it
// has returned. A relay that claims only once a publish returned claims
// each next batch after that end.
func TestRelayOverlapsTheDatabaseWithSlowConfirms(t *testing.T) {
	db := idemtest.New(t, relaytest.OutboxFS(t, nil))
	const batches, size = 8, 100
	rows := relaytest.MakeRows("overlap", batches*size)
	relaytest.Commit(t, db.Pool, rows)

	log := &statementLog{}
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Tracer = log
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()

	rec := &relaytest.Recorder{}
	r := relay.New(pool, rec.Publisher("slow", 300*time.Millisecond, nil), relay.WithID("overlap-"+db.Schema),
		relay.WithBatchSize(size), relay.WithLogger(relaytest.Logger(t)))
	stop := relaytest.Run(t, r)
	relaytest.WaitFor(t, 30*time.Second, "every row published and marked", func() bool { return relaytest.Pending(t, db) == 0 })
	stop()

	pubs := rec.Snapshot()
	if len(pubs) != len(rows) {
		t.Errorf("%d publications of %d rows, want each once", len(pubs), len(rows))
	}
	calls := publishCalls(pubs)
	if len(calls) != batches {
		t.Fatalf("%d Publish calls, want %d of %d rows", len(calls), batches, size)
	}
	claims, marks := log.taking("Claim"), log.taking("MarkPublished")
	if len(claims) != batches {
		t.Fatalf("%d claims took rows, want %d of %d rows", len(claims), batches, size)
	}
	for i, c := range calls {
		from := claims[0].end // the first batch's own claim is not during it
		if i > 0 {
			from = calls[i-1].End
			if c.Start.Before(from) {
				t.Errorf("Publish call %d began before call %d returned", i+1, i)
			}
		}
		if i == len(calls)-1 {
			continue
		}
		next := claims[i+1]
		if !next.end.After(from) || !next.end.Before(c.End) {
			t.Errorf("batch %d: the claim of the next batch ended %v after the window began and %v before its publish ended, want both positive (while it was at the broker)",
				i+1, next.end.Sub(from), c.End.Sub(next.end))
			continue
		}
		if i > 0 && !slices.ContainsFunc(marks, func(m statementRun) bool { return m.batch != 0 && m.batch == next.batch }) {
			t.Errorf("batch %d: no mark in the round trip that claimed the next batch, want the batch before marked there", i+1)
		}
	}
	if got := relaytest.QueryInt(t, db.Pool, `SELECT count(*)::int FROM idem_outbox`); got != 0 {
		t.Errorf("%d of %d rows left in the outbox, want every one deleted once published", got, len(rows))
	}
}

const envInFlightRelayURL = "IDEM_TEST_IN_FLIGHT_RELAY_URL"

// TestRelayKilledWithABatchInFlight: a relay process killed with SIGKILL in
// the middle of its second batch's publish, once the round trip that marked
// the first batch had claimed the third: the first batch is marked, the
// second half delivered and unmarked, the third claimed and never handed to
// the broker. Once the leases lapse another relay publishes every row that
// is not marked, with the same ids: each row reaches the downstream consumer
// at least once and is applied exactly once (the redeliveries of the half
// delivered are Duplicates), and nothing is lost.
func TestRelayKilledWithABatchInFlight(t *testing.T) {
	if url := os.Getenv(envInFlightRelayURL); url != "" {
		runInFlightRelay(url) // never returns
	}
	db, rows := downstreamBacklog(t, "inflight", 250)

	runKilledRelayChild(t, envInFlightRelayURL, db.URL)
	if got := relaytest.QueryInt(t, db.Pool, `SELECT count(*)::int FROM idem_outbox`); got != 150 {
		t.Errorf("%d rows left by the killed relay, want 150: the first batch's 100 deleted once published", got)
	}
	if got := relaytest.QueryInt(t, db.Pool, `SELECT count(*)::int FROM idem_outbox WHERE claim_token IS NOT NULL AND attempts = 1`); got != 150 {
		t.Errorf("%d rows left claimed and unmarked by the killed relay, want 150 (the second batch and the third)", got)
	}
	if got := relaytest.QueryInt(t, db.Pool, `SELECT count(*)::int FROM applied WHERE n = 1`); got != 150 {
		t.Fatalf("the killed relay delivered %d messages downstream, want 150 (the first batch and half the second)", got)
	}

	var mu sync.Mutex
	outcomes := map[idem.Outcome]int{}
	inbox := downstreamInbox(db.Pool)
	relaytest.Run(t, relay.New(db.Pool, deliverDownstream(inbox, func(_ string, o idem.Outcome) {
		mu.Lock()
		defer mu.Unlock()
		outcomes[o]++
	}, nil), relay.WithID("survivor"), relay.WithPollInterval(20*time.Millisecond), relay.WithLogger(relaytest.Logger(t))))
	relaytest.WaitFor(t, killedRelayLease+30*time.Second, "the rows published again", func() bool { return relaytest.Pending(t, db) == 0 })

	mu.Lock()
	defer mu.Unlock()
	if outcomes[idem.Duplicate] != 50 || outcomes[idem.Processed] != 100 || len(outcomes) != 2 {
		t.Errorf("the survivor's deliveries downstream: %v, want 50 Duplicates (delivered, not marked) and 100 Processed", outcomes)
	}
	if got := relaytest.QueryInt(t, db.Pool, `SELECT count(*)::int FROM applied WHERE n = 1`); got != len(rows) {
		t.Errorf("%d of %d messages applied exactly once downstream", got, len(rows))
	}
	if got := relaytest.QueryInt(t, db.Pool, `SELECT count(*)::int FROM idem_outbox`); got != 0 {
		t.Errorf("%d of %d rows left in the outbox, want every one deleted once published", got, len(rows))
	}
}

// runInFlightRelay is the child process of TestRelayKilledWithABatchInFlight:
// its publisher delivers the first batch downstream; on the second it waits
// until the first is marked and the third claimed, delivers half of the
// batch and kills the process.
func runInFlightRelay(url string) {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "killed relay:", err)
		os.Exit(3)
	}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		fail(err)
	}
	inbox := downstreamInbox(pool)
	var calls atomic.Int32
	deliver := func(msgs []idem.OutgoingMessage) []error {
		errs := make([]error, len(msgs))
		for i, m := range msgs {
			_, o, err := inbox.Handle(ctx, event{ID: m.ID, Body: string(m.Payload)})
			if err == nil && o != idem.Processed {
				err = fmt.Errorf("message %s: first delivery %v, want Processed", m.ID, o)
			}
			if err != nil {
				fail(err)
			}
			errs[i] = err
		}
		return errs
	}
	pub := idem.PublisherFunc(func(_ context.Context, msgs []idem.OutgoingMessage) []error {
		if calls.Add(1) == 1 {
			return deliver(msgs)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			var left, claimed int
			if err := pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE claim_token IS NOT NULL) FROM idem_outbox`).Scan(&left, &claimed); err != nil {
				fail(err)
			}
			marked := 250 - left // the relay deletes the rows it marks published
			if marked == 100 && claimed == 150 {
				break
			}
			if time.Now().After(deadline) {
				fail(fmt.Errorf("during the second batch: %d rows marked and %d claimed after 10s, want 100 and 150", marked, claimed))
			}
			time.Sleep(5 * time.Millisecond)
		}
		deliver(msgs[:len(msgs)/2])
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	})
	r := relay.New(pool, pub, relay.WithID("in-flight"), relay.WithBatchSize(100), relay.WithLease(killedRelayLease),
		relay.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, nil))))
	fail(fmt.Errorf("Run returned: %v", r.Run(ctx)))
}
