// Package relaytest holds what the tests of the relay and of the outbox share:
// outbox rows written as the wrapper writes them, a recording publisher, and
// a relay run for the length of a test.
package relaytest

import (
	"context"
	"encoding/json"
	"io/fs"
	"log"
	"log/slog"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemtest"
	"github.com/idemgen/idemgen/idem/relay"
	outboxmigrations "github.com/idemgen/idemgen/migrations"
)

// OutboxFS is the runtime's outbox chain followed by extra migrations of the
// test (their versions after the chain's).
func OutboxFS(t testing.TB, extra map[string]string) fstest.MapFS {
	t.Helper()
	fsys := fstest.MapFS{}
	names, err := fs.Glob(outboxmigrations.FS, "*.sql")
	if err != nil || len(names) == 0 {
		t.Fatalf("outbox migrations: %v", err)
	}
	for _, name := range names {
		b, err := fs.ReadFile(outboxmigrations.FS, name)
		if err != nil {
			t.Fatal(err)
		}
		fsys[name] = &fstest.MapFile{Data: b}
	}
	for name, text := range extra {
		fsys[name] = &fstest.MapFile{Data: []byte(text)}
	}
	return fsys
}

// Row is an outbox row as the generated wrapper writes it.
type Row struct {
	ID          uuid.UUID
	Key         string
	Destination string
	OrderingKey string
	Headers     map[string]string
	Payload     string
}

// insertSQL writes rows the way the wrapper does: one multi-row
// statement in the handler's transaction. All arrays go as text, so that it
// works in every pgx.QueryExecMode (CI runs these tests in simple_protocol).
const insertSQL = `INSERT INTO idem_outbox (message_id, consumer, key, destination, ordering_key, headers, payload)
SELECT m, 'test.relay', k, d, o, h::jsonb, convert_to(p, 'UTF8')
FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[]) AS r (m, k, d, o, h, p)`

func Insert(ctx context.Context, tx pgx.Tx, rows []Row) error {
	n := len(rows)
	ids, keys, dests, okeys, headers, payloads := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	for i, r := range rows {
		ids[i], keys[i], dests[i], okeys[i], payloads[i] = r.ID.String(), r.Key, r.Destination, r.OrderingKey, r.Payload
		h, err := json.Marshal(r.Headers)
		if err != nil {
			return err
		}
		if r.Headers == nil {
			h = []byte("{}")
		}
		headers[i] = string(h)
	}
	_, err := tx.Exec(ctx, insertSQL, ids, keys, dests, okeys, headers, payloads)
	return err
}

// Commit writes rows in one transaction with the NOTIFY the wrapper
// sends, and commits.
func Commit(t testing.TB, pool *pgxpool.Pool, rows []Row) {
	t.Helper()
	ctx := context.Background()
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := Insert(ctx, tx, rows); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `SELECT pg_notify($1, '')`, idem.OutboxChannel)
		return err
	})
	if err != nil {
		t.Fatalf("write outbox rows: %v", err)
	}
}

// MakeRows returns n rows with fresh ids, payloads prefix-0 ... prefix-(n-1).
func MakeRows(prefix string, n int) []Row {
	rows := make([]Row, n)
	for i := range rows {
		rows[i] = Row{ID: uuid.New(), Key: prefix, Destination: "test.events", Payload: prefix + "-" + strconv.Itoa(i)}
	}
	return rows
}

// Publication is one message a recordingPublisher saw, with the interval of
// the Publish call that carried it.
type Publication struct {
	ID, Relay, OrderingKey, Payload string
	Attempt                         int
	Start, End                      time.Time
}

// Recorder collects the publications of every relay of a test.
type Recorder struct {
	mu   sync.Mutex
	pubs []Publication
}

// publisher returns the recording publisher of one relay: it takes delay to
// publish each batch, answers nil for every message unless fail says
// otherwise, and returns early, unconfirmed, when ctx ends.
func (rec *Recorder) Publisher(relay string, delay time.Duration, fail func(m idem.OutgoingMessage) error) idem.Publisher {
	return idem.PublisherFunc(func(ctx context.Context, msgs []idem.OutgoingMessage) []error {
		start := time.Now()
		errs := make([]error, len(msgs))
		if delay > 0 {
			t := time.NewTimer(delay)
			select {
			case <-ctx.Done():
				for i := range errs {
					errs[i] = ctx.Err()
				}
			case <-t.C:
			}
			t.Stop()
		}
		end := time.Now()
		rec.mu.Lock()
		defer rec.mu.Unlock()
		for i, m := range msgs {
			if errs[i] == nil && fail != nil {
				errs[i] = fail(m)
			}
			rec.pubs = append(rec.pubs, Publication{ID: m.ID, Relay: relay, OrderingKey: m.OrderingKey, Payload: string(m.Payload),
				Attempt: m.Attempt, Start: start, End: end})
		}
		return errs
	})
}

func (rec *Recorder) Snapshot() []Publication {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]Publication(nil), rec.pubs...)
}

func (rec *Recorder) Len() int {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return len(rec.pubs)
}

// CheckNoOverlap fails the test when one message was being published by two
// Publish calls at overlapping times.
func CheckNoOverlap(t *testing.T, pubs []Publication) {
	t.Helper()
	byID := map[string][]Publication{}
	for _, p := range pubs {
		byID[p.ID] = append(byID[p.ID], p)
	}
	for id, ps := range byID {
		sort.Slice(ps, func(i, j int) bool { return ps[i].Start.Before(ps[j].Start) })
		for i := 1; i < len(ps); i++ {
			if ps[i].Start.Before(ps[i-1].End) {
				t.Errorf("message %s published by %s during [%v, %v] and by %s from %v: overlapping", id,
					ps[i-1].Relay, ps[i-1].Start.Format(time.StampMicro), ps[i-1].End.Format(time.StampMicro), ps[i].Relay, ps[i].Start.Format(time.StampMicro))
			}
		}
	}
}

// Run runs r until the returned stop is called (or the test ends) and
// fails the test if Run returns an error or does not return within 5s of the
// stop.
func Run(t testing.TB, r *relay.Relay) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("relay %s: Run: %v", r.ID(), err)
				}
			case <-time.After(5 * time.Second):
				t.Errorf("relay %s: Run did not return within 5s of the cancel", r.ID())
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// WaitFor polls cond until it holds, failing the test after timeout.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Eventually polls cond until it holds or timeout passes, and reports
// whether it held.
func Eventually(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

func QueryInt(t testing.TB, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// Pending counts the rows that wait for the relay: a published row is
// deleted, a dead one kept.
func Pending(t testing.TB, db *idemtest.DB) int {
	return QueryInt(t, db.Pool, `SELECT count(*)::int FROM idem_outbox WHERE dead_at IS NULL`)
}

// Logger logs the relay's warnings and errors into the test's log.
func Logger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(idemtest.LogWriter(t), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// Listeners counts r's listening connections.
func Listeners(t testing.TB, db *idemtest.DB, r *relay.Relay) int {
	return QueryInt(t, db.Pool, `SELECT count(*)::int FROM pg_stat_activity WHERE application_name = $1`, "idem relay "+r.ID())
}

// ExampleDB opens a pool on a fresh schema of the test database with the
// goose migrations of fsys applied, for the packages' Example functions,
// which have no testing.T. done closes the pool and drops the schema. The
// database is IDEMGEN_TEST_DATABASE_URL's, else libpq's defaults.
func ExampleDB(ctx context.Context, fsys fs.FS) (pool *pgxpool.Pool, done func()) {
	base := os.Getenv(idemtest.EnvURL)
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		log.Fatalf("example database: %v", err)
	}
	schema := "example_" + strings.ReplaceAll(uuid.NewString()[:13], "-", "")
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		log.Fatalf("example database: %v", err)
	}
	cfg, err := pgxpool.ParseConfig(base)
	if err != nil {
		log.Fatalf("example database: %v", err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	if pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		log.Fatalf("example database: %v", err)
	}
	sqlDB := stdlib.OpenDBFromPool(pool)
	provider, err := goose.NewProvider(goose.DialectPostgres, sqlDB, fsys, goose.WithDisableGlobalRegistry(true))
	if err == nil {
		_, err = provider.Up(ctx)
	}
	if err != nil {
		log.Fatalf("example database: migrations: %v", err)
	}
	return pool, func() {
		_ = sqlDB.Close()
		pool.Close()
		_, _ = admin.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
		_ = admin.Close(context.Background())
	}
}
