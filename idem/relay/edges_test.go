package relay_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemtest"
	"github.com/idemgen/idemgen/idem/internal/relaytest"
	"github.com/idemgen/idemgen/idem/relay"
)

// TestRelayMissingTableFailsFast: Run against a database without the outbox
// table returns the error at once (42P01), with the listener on: it never
// waits for the context to end.
func TestRelayMissingTableFailsFast(t *testing.T) {
	db := idemtest.New(t, fstest.MapFS{"00001_other.sql": {Data: []byte("-- +goose Up\nCREATE TABLE other (id int);\n-- +goose Down\nDROP TABLE other;\n")}})
	rec := &relaytest.Recorder{}
	r := relay.New(db.Pool, rec.Publisher("m", 0, nil), relay.WithID("missing-"+db.Schema), relay.WithLogger(relaytest.Logger(t)))
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	began := time.Now()
	err := r.Run(ctx)
	took := time.Since(began)
	t.Logf("a relay without idem_outbox: Run returned in %v: %v; %d publications", took.Round(time.Millisecond), err, rec.Len())
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != pgerrcode.UndefinedTable {
		t.Errorf("Run = %v; want the missing table (42P01)", err)
	}
	if took > time.Second || rec.Len() != 0 {
		t.Errorf("Run took %v and published %d; want under 1s, nothing", took, rec.Len())
	}
}

// TestRelayPublishTimeoutHandsRowsOver: a relay whose publisher never
// confirms (it waits for its context) fails the publish after
// WithPublishTimeout and steps back; a second, healthy relay publishes
// every row within a bound.
func TestRelayPublishTimeoutHandsRowsOver(t *testing.T) {
	db := idemtest.New(t, relaytest.OutboxFS(t, nil))
	rows := relaytest.MakeRows("stall", 3)
	var stalled atomic.Int64
	never := idem.PublisherFunc(func(ctx context.Context, msgs []idem.OutgoingMessage) []error {
		stalled.Add(int64(len(msgs)))
		<-ctx.Done()
		errs := make([]error, len(msgs))
		for i := range errs {
			errs[i] = context.Cause(ctx)
		}
		return errs
	})
	const timeout = 500 * time.Millisecond
	relaytest.Run(t, relay.New(db.Pool, never, relay.WithID("never"), relay.WithPublishTimeout(timeout),
		relay.WithBackoff(100*time.Millisecond, 200*time.Millisecond), relay.WithPollInterval(50*time.Millisecond), relay.WithLogger(relaytest.Logger(t))))
	relaytest.Commit(t, db.Pool, rows)
	relaytest.WaitFor(t, 5*time.Second, "the stalled relay to take the rows", func() bool { return stalled.Load() > 0 })
	rec := &relaytest.Recorder{}
	began := time.Now()
	relaytest.Run(t, relay.New(db.Pool, rec.Publisher("healthy", 0, nil), relay.WithID("healthy"),
		relay.WithPollInterval(50*time.Millisecond), relay.WithLogger(relaytest.Logger(t))))
	const bound = 5 * time.Second
	relaytest.WaitFor(t, bound, "every row published by the healthy relay", func() bool { return relaytest.Pending(t, db) == 0 })
	took := time.Since(began)
	byHealthy := 0
	for _, p := range rec.Snapshot() {
		if p.Relay == "healthy" {
			byHealthy++
		}
	}
	t.Logf("a relay that never confirms (publish timeout %v) and a healthy one: %d of %d rows published by the healthy relay in %v (bound %v); the stalled relay was handed %d messages",
		timeout, byHealthy, len(rows), took.Round(time.Millisecond), bound, stalled.Load())
	if byHealthy != len(rows) {
		t.Errorf("the healthy relay published %d of %d rows", byHealthy, len(rows))
	}
}

// TestRelayNonASCIIIDWakesOnNotify: a relay id of 40 characters, 39 of them
// non-ASCII (79 bytes), names the listening connection, cut on a character boundary
// to 63 bytes (the server refuses half a character), and NOTIFY wakes the
// relay long before its minute-long poll.
func TestRelayNonASCIIIDWakesOnNotify(t *testing.T) {
	db := idemtest.New(t, relaytest.OutboxFS(t, nil))
	id := "r" + strings.Repeat("é", 39) // "idem relay r" and 51 bytes of é: 63 bytes end mid-character
	rec := &relaytest.Recorder{}
	r := relay.New(db.Pool, rec.Publisher("utf8", 0, nil), relay.WithID(id),
		relay.WithPollInterval(time.Minute), relay.WithLogger(relaytest.Logger(t)))
	relaytest.Run(t, r)
	var name string
	relaytest.WaitFor(t, 5*time.Second, "the listening connection", func() bool {
		// PostgreSQL before 16 shows each non-ASCII byte of an
		// application_name as "?".
		return db.Pool.QueryRow(context.Background(), `SELECT application_name FROM pg_stat_activity
			WHERE application_name IN ('idem relay r' || repeat('é', 25), 'idem relay r' || repeat('?', 50))`).Scan(&name) == nil
	})
	began := time.Now()
	for i := range 3 {
		relaytest.Commit(t, db.Pool, relaytest.MakeRows("wake", 1))
		relaytest.WaitFor(t, 5*time.Second, "the row published on its NOTIFY", func() bool { return rec.Len() == i+1 })
	}
	took := time.Since(began)
	t.Logf("relay id of %d characters (%d bytes): listening as %q (%d bytes, valid UTF-8 %v); 3 rows published on their NOTIFY in %v (poll: 1m)",
		utf8.RuneCountInString(id), len(id), name, len(name), utf8.ValidString(name), took.Round(time.Millisecond))
	if !utf8.ValidString(name) || len(name) > 63 || took > 5*time.Second {
		t.Errorf("listening as %q, 3 wake-ups in %v; want a valid name of at most 63 bytes, woken by NOTIFY", name, took)
	}
}

// gate is a DB whose acquires fail while it is down, as a database that
// restarts or fails over does.
type gate struct {
	pool interface {
		Acquire(context.Context) (*pgxpool.Conn, error)
	}
	down atomic.Bool
}

func (g *gate) Acquire(ctx context.Context) (*pgxpool.Conn, error) {
	if g.down.Load() {
		return nil, errors.New("the test's database is down")
	}
	return g.pool.Acquire(ctx)
}

// TestRelayMarksOnceTheDatabaseIsBack: the database goes down right after
// the broker confirmed a batch, so its deletion fails; once the database
// is back the relay deletes the rows at once, each published once: it
// neither waits out the lease (20s) nor publishes them again.
func TestRelayMarksOnceTheDatabaseIsBack(t *testing.T) {
	db := idemtest.New(t, relaytest.OutboxFS(t, nil))
	rows := relaytest.MakeRows("back", 5)
	relaytest.Commit(t, db.Pool, rows)
	g := &gate{pool: db.Pool}
	rec := &relaytest.Recorder{}
	record := rec.Publisher("gated", 0, nil)
	pub := idem.PublisherFunc(func(ctx context.Context, msgs []idem.OutgoingMessage) []error {
		errs := record.Publish(ctx, msgs)
		g.down.Store(true) // confirmed; the database goes down before the relay deletes them
		return errs
	})
	relaytest.Run(t, relay.New(g, pub, relay.WithID("gated"), relay.WithLease(20*time.Second),
		relay.WithBackoff(50*time.Millisecond, 100*time.Millisecond), relay.WithPollInterval(50*time.Millisecond), relay.WithLogger(relaytest.Logger(t))))
	relaytest.WaitFor(t, 5*time.Second, "the batch published", func() bool { return rec.Len() == len(rows) })
	time.Sleep(300 * time.Millisecond)
	if n := relaytest.Pending(t, db); n != len(rows) {
		t.Fatalf("%d rows pending while the database is down; want the %d published ones, not deleted yet", n, len(rows))
	}
	g.down.Store(false)
	back := time.Now()
	relaytest.WaitFor(t, 5*time.Second, "the published rows deleted", func() bool { return relaytest.Pending(t, db) == 0 })
	t.Logf("deleted %v after the database was back (lease 20s); %d publications of %d rows", time.Since(back).Round(time.Millisecond), rec.Len(), len(rows))
	time.Sleep(200 * time.Millisecond)
	if rec.Len() != len(rows) {
		t.Errorf("%d publications of %d rows; want each once", rec.Len(), len(rows))
	}
}
