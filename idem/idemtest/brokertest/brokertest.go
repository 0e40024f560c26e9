// Package brokertest holds what the tests of idem's broker adapters
// (idem/rabbitmq, idem/jetstream, idem/kafka) share: the consumer's database
// side (an inbox keyed on the broker's message id and a charge per order as
// the business effect), a handler that records each delivery, a logger that
// keeps the consumer's lines, and the helpers that run a consumer and wait.
// It is test support, not for production code.
package brokertest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemimpl"
	"github.com/idemgen/idemgen/idem/idemtest"
	"github.com/idemgen/idemgen/idem/relay"
	outboxmigrations "github.com/idemgen/idemgen/migrations"
)

// Order is the message the adapters' tests deliver.
type Order struct {
	OrderID string `json:"order_id"`
	Amount  int    `json:"amount"`
}

// ChargeResult is what the charge handler returns.
type ChargeResult struct {
	Charged int `json:"charged"`
}

// chargeMigration creates the business table: one row per order, n counting
// how often the order was charged.
const chargeMigration = `-- +goose Up
CREATE TABLE charged (order_id text PRIMARY KEY, n integer NOT NULL, amount integer NOT NULL);
-- +goose Down
DROP TABLE charged;
`

// Charges is an adapter's charge consumer: its inbox, keyed on the broker's
// message id (key=ID of an idem.Message[Order]), and the migration of that
// inbox.
type Charges struct {
	Table     idemimpl.Table[idem.Message[Order]]
	migration string
	// batched: the inbox runs a DeliverBatch in one transaction (see
	// Batched); else in one transaction per message.
	batched bool
}

// NewCharges declares the charge consumer of one adapter's tests.
func NewCharges(consumer, table string) Charges {
	t, m := idemtest.TextKeyInbox(consumer, table, "ID", func(msg idem.Message[Order]) string { return msg.ID })
	return Charges{Table: t, migration: m}
}

// Inbox is the inbox of the charge handler; fail, when not nil, runs first in
// the handler's transaction and may fail it.
func (c Charges) Inbox(pool *pgxpool.Pool, fail func(msg idem.Message[Order]) error) *idemimpl.Inbox[idem.Message[Order], ChargeResult] {
	var opts []idem.Option
	if !c.batched {
		opts = append(opts, idem.WithBatchCap(1))
	}
	return idemimpl.NewInbox(pool, c.Table, func(ctx context.Context, tx pgx.Tx, msg idem.Message[Order]) (ChargeResult, error) {
		if fail != nil {
			if err := fail(msg); err != nil {
				return ChargeResult{}, err
			}
		}
		_, err := tx.Exec(ctx, `INSERT INTO charged (order_id, n, amount) VALUES ($1, 1, $2)
			ON CONFLICT (order_id) DO UPDATE SET n = charged.n + 1`, msg.Body.OrderID, msg.Body.Amount)
		return ChargeResult{Charged: msg.Body.Amount}, err
	}, opts...)
}

// Database is a fresh schema with the outbox chain, the charge inbox and the
// charge table.
func (c Charges) Database(t testing.TB) *idemtest.DB {
	t.Helper()
	fsys := fstest.MapFS{"00100_charge_inbox.sql": {Data: []byte(c.migration)}, "00101_charge.sql": {Data: []byte(chargeMigration)}}
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
	return idemtest.New(t, fsys)
}

// QueryInt runs a query that returns one integer.
func QueryInt(t testing.TB, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// Delivery is one call of a recorded handler.
type Delivery struct {
	ID      string
	Attempt int
	Outcome idem.Outcome
	Err     error
	At      time.Time
}

// Recorder wraps a handler and records each delivery it handled.
type Recorder struct {
	mu   sync.Mutex
	list []Delivery
}

// checked is a recording handler whose handler has tables: the consumer
// checks them when it starts (Check), as it checks a generated wrapper's.
type checked struct {
	idem.HandlerFunc[idem.Message[Order]]
	checker
}

// checker is the Check of the runtime's inboxes and the generated wrappers.
type checker interface {
	Check(ctx context.Context) error
}

// Wrap returns h recording its deliveries; after, when not nil, runs after
// each one. When h has a Check, so has what Wrap returns.
func (r *Recorder) Wrap(h idem.Handler[idem.Message[Order]], after func(msg idem.Message[Order], o idem.Outcome, err error)) idem.Handler[idem.Message[Order]] {
	f := r.wrap(h, after)
	if c, ok := h.(checker); ok {
		return checked{f, c}
	}
	return f
}

func (r *Recorder) wrap(h idem.Handler[idem.Message[Order]], after func(msg idem.Message[Order], o idem.Outcome, err error)) idem.HandlerFunc[idem.Message[Order]] {
	return idem.HandlerFunc[idem.Message[Order]](func(ctx context.Context, msg idem.Message[Order]) (idem.Outcome, error) {
		at := time.Now()
		o, err := h.Deliver(ctx, msg)
		r.mu.Lock()
		r.list = append(r.list, Delivery{ID: msg.ID, Attempt: msg.Attempt, Outcome: o, Err: err, At: at})
		r.mu.Unlock()
		if after != nil {
			after(msg, o, err)
		}
		return o, err
	})
}

// Snapshot returns the deliveries so far.
func (r *Recorder) Snapshot() []Delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Delivery(nil), r.list...)
}

// Count returns how many deliveries had outcome o.
func (r *Recorder) Count(o idem.Outcome) int {
	n := 0
	for _, d := range r.Snapshot() {
		if d.Outcome == o {
			n++
		}
	}
	return n
}

// Describe lists deliveries, one per line, for a test failure.
func Describe(ds []Delivery) string {
	var b strings.Builder
	for _, d := range ds {
		fmt.Fprintf(&b, "\n  %s attempt %d: %v %v", d.ID, d.Attempt, d.Outcome, d.Err)
	}
	return b.String()
}

// Logs collects the consumer's log lines and passes them to t.Log until t
// ends (idemtest.LogWriter).
type Logs struct {
	w  io.Writer
	mu sync.Mutex
	b  strings.Builder
}

func (l *Logs) Write(p []byte) (int, error) {
	l.mu.Lock()
	l.b.Write(p)
	l.mu.Unlock()
	return l.w.Write(p)
}

// String returns every line logged so far.
func (l *Logs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// NewLogs returns the collected lines and a debug-level logger writing them.
func NewLogs(t testing.TB) (*Logs, *slog.Logger) {
	l := &Logs{w: idemtest.LogWriter(t)}
	return l, slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

var deliveryLine = regexp.MustCompile(`message_id=`)

// CheckAttemptLogged fails the test if a log line about a delivery lacks the
// attempt, or if there is no such line at all.
func CheckAttemptLogged(t testing.TB, l *Logs) {
	t.Helper()
	lines := 0
	for _, line := range strings.Split(l.String(), "\n") {
		if !deliveryLine.MatchString(line) {
			continue
		}
		lines++
		if !strings.Contains(line, " attempt=") {
			t.Errorf("a log line about a delivery without the attempt: %s", line)
		}
	}
	if lines == 0 {
		t.Errorf("no log line about a delivery")
	}
}

// Runner is a consumer: its Run returns when ctx ends.
type Runner interface {
	Run(ctx context.Context) error
}

// Run runs c until the returned stop is called or the test ends; stop fails
// the test if Run returns an error or takes longer than 10s to return.
func Run(t testing.TB, c Runner) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("consumer Run: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Errorf("the consumer did not stop within 10s of its context ending")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// WaitFor polls cond until it holds, or fails the test after timeout.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// WaitProgress waits until count() reaches want. It fails only when the
// count stands still for stall (a consumer that stopped, not one slowed
// down by a loaded machine), saying how far it got.
func WaitProgress(t testing.TB, stall time.Duration, what string, want int64, count func() int64) {
	t.Helper()
	last, since := count(), time.Now()
	for last < want {
		time.Sleep(50 * time.Millisecond)
		n := count()
		if n != last {
			last, since = n, time.Now()
			continue
		}
		if time.Since(since) > stall {
			t.Fatalf("waiting for %s: stuck at %d of %d for %v", what, n, want, stall)
		}
	}
}

// OutRow is an outbox row as a generated wrapper writes it.
type OutRow struct {
	ID          uuid.UUID
	Destination string
	Headers     map[string]string
	Payload     []byte
}

// insertOutboxSQL writes rows the way the wrapper does: one multi-row
// statement in the handler's transaction (the arrays as text, so that it
// works in every pgx.QueryExecMode).
const insertOutboxSQL = `INSERT INTO idem_outbox (message_id, consumer, key, destination, ordering_key, headers, payload)
SELECT m, $5::text, m::text, d, '', h::jsonb, convert_to(p, 'UTF8')
FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[]) AS r (m, d, h, p)`

// CommitOutbox commits rows of consumer with the NOTIFY the wrapper sends.
func CommitOutbox(t testing.TB, pool *pgxpool.Pool, consumer string, rows []OutRow) {
	t.Helper()
	ids, dests, headers, payloads := make([]string, len(rows)), make([]string, len(rows)), make([]string, len(rows)), make([]string, len(rows))
	for i, r := range rows {
		h := []byte("{}")
		if r.Headers != nil {
			h = mustJSON(t, r.Headers)
		}
		ids[i], dests[i], headers[i], payloads[i] = r.ID.String(), r.Destination, string(h), string(r.Payload)
	}
	ctx := context.Background()
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, insertOutboxSQL, ids, dests, headers, payloads, consumer); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `SELECT pg_notify($1, '')`, idem.OutboxChannel)
		return err
	})
	if err != nil {
		t.Fatalf("write outbox rows: %v", err)
	}
}

// OrderRows returns n outbox rows to dest carrying the orders prefix-from to
// prefix-(from+n-1), each with a fresh id and the header order.
func OrderRows(t testing.TB, dest, prefix string, from, n int) []OutRow {
	rows := make([]OutRow, n)
	for i := range rows {
		o := Order{OrderID: fmt.Sprintf("%s-%d", prefix, from+i), Amount: from + i}
		rows[i] = OutRow{ID: uuid.New(), Destination: dest, Payload: mustJSON(t, o),
			Headers: map[string]string{"order": o.OrderID}}
	}
	return rows
}

// RunRelay runs a relay.Relay over pub until the test ends.
func RunRelay(t testing.TB, pool *pgxpool.Pool, pub idem.Publisher) {
	t.Helper()
	_, logger := NewLogs(t)
	r := relay.New(pool, pub, relay.WithPollInterval(20*time.Millisecond), relay.WithBackoff(50*time.Millisecond, 200*time.Millisecond),
		relay.WithBatchSize(25), relay.WithLogger(logger))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("relay Run: %v", err)
		}
	})
}

// PendingRows counts the outbox rows not yet published, dead ones too: a
// published row is deleted.
func PendingRows(t testing.TB, pool *pgxpool.Pool) int {
	return QueryInt(t, pool, `SELECT count(*)::int FROM idem_outbox`)
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
