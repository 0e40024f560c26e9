package idem_test

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

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemtest"
)

// TestRelayMissingTableFailsFast: Run against a database without the outbox
// table returns the error at once (42P01), with the listener on: it never
// waits for the context to end.
func TestRelayMissingTableFailsFast(t *testing.T) {
	db := idemtest.New(t, fstest.MapFS{"00001_other.sql": {Data: []byte("-- +goose Up\nCREATE TABLE other (id int);\n-- +goose Down\nDROP TABLE other;\n")}})
	rec := &recorder{}
	r := idem.NewRelay(db.Pool, rec.publisher("m", 0, nil), idem.WithRelayID("missing-"+db.Schema), idem.WithRelayLogger(testLogger(t)))
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	began := time.Now()
	err := r.Run(ctx)
	took := time.Since(began)
	t.Logf("a relay without idem_outbox: Run returned in %v: %v; %d publications", took.Round(time.Millisecond), err, rec.len())
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != pgerrcode.UndefinedTable {
		t.Errorf("Run = %v; want the missing table (42P01)", err)
	}
	if took > time.Second || rec.len() != 0 {
		t.Errorf("Run took %v and published %d; want under 1s, nothing", took, rec.len())
	}
}

// TestRelayPublishTimeoutHandsRowsOver: a relay whose publisher never
// confirms (it waits for its context) fails the publish after
// WithRelayPublishTimeout and steps back; a second, healthy relay publishes
// every row within a bound.
func TestRelayPublishTimeoutHandsRowsOver(t *testing.T) {
	db := idemtest.New(t, outboxFS(t, nil))
	rows := makeRows("stall", 3)
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
	runRelay(t, idem.NewRelay(db.Pool, never, idem.WithRelayID("never"), idem.WithRelayPublishTimeout(timeout),
		idem.WithRelayBackoff(100*time.Millisecond, 200*time.Millisecond), idem.WithRelayPollInterval(50*time.Millisecond), idem.WithRelayLogger(testLogger(t))))
	commitOutbox(t, db.Pool, rows)
	waitFor(t, 5*time.Second, "the stalled relay to take the rows", func() bool { return stalled.Load() > 0 })
	rec := &recorder{}
	began := time.Now()
	runRelay(t, idem.NewRelay(db.Pool, rec.publisher("healthy", 0, nil), idem.WithRelayID("healthy"),
		idem.WithRelayPollInterval(50*time.Millisecond), idem.WithRelayLogger(testLogger(t))))
	const bound = 5 * time.Second
	waitFor(t, bound, "every row published by the healthy relay", func() bool { return pendingRows(t, db) == 0 })
	took := time.Since(began)
	byHealthy := 0
	for _, p := range rec.snapshot() {
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
	db := idemtest.New(t, outboxFS(t, nil))
	id := "r" + strings.Repeat("é", 39) // "idem relay r" and 51 bytes of é: 63 bytes end mid-character
	rec := &recorder{}
	r := idem.NewRelay(db.Pool, rec.publisher("utf8", 0, nil), idem.WithRelayID(id),
		idem.WithRelayPollInterval(time.Minute), idem.WithRelayLogger(testLogger(t)))
	runRelay(t, r)
	var name string
	waitFor(t, 5*time.Second, "the listening connection", func() bool {
		// PostgreSQL before 16 shows each non-ASCII byte of an
		// application_name as "?".
		return db.Pool.QueryRow(context.Background(), `SELECT application_name FROM pg_stat_activity
			WHERE application_name IN ('idem relay r' || repeat('é', 25), 'idem relay r' || repeat('?', 50))`).Scan(&name) == nil
	})
	began := time.Now()
	for i := range 3 {
		commitOutbox(t, db.Pool, makeRows("wake", 1))
		waitFor(t, 5*time.Second, "the row published on its NOTIFY", func() bool { return rec.len() == i+1 })
	}
	took := time.Since(began)
	t.Logf("relay id of %d characters (%d bytes): listening as %q (%d bytes, valid UTF-8 %v); 3 rows published on their NOTIFY in %v (poll: 1m)",
		utf8.RuneCountInString(id), len(id), name, len(name), utf8.ValidString(name), took.Round(time.Millisecond))
	if !utf8.ValidString(name) || len(name) > 63 || took > 5*time.Second {
		t.Errorf("listening as %q, 3 wake-ups in %v; want a valid name of at most 63 bytes, woken by NOTIFY", name, took)
	}
}
