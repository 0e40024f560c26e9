package kafka_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemtest"
	"github.com/idemgen/idemgen/idem/kafka"
	outboxmigrations "github.com/idemgen/idemgen/migrations"
)

// The tests run against kfake, an in-process Kafka cluster speaking the
// Kafka protocol (no Kafka server runs on these machines), and a real
// PostgreSQL through idemtest.

// cluster starts a kfake cluster with topics of partitions partitions each,
// shut down when the test ends, and returns its seed addresses.
func cluster(t testing.TB, partitions int32, topics ...string) []string {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, topics...))
	if err != nil {
		t.Fatalf("start an in-process kfake cluster: %v", err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

// uniqueName returns a name no other test uses, for groups and topics.
func uniqueName(t testing.TB) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := strings.NewReplacer("/", "-", " ", "-").Replace(t.Name())
	return "idemtest-" + name + "-" + hex.EncodeToString(b[:])
}

// client is a plain franz-go client for the test's own producing and
// reading, closed when the test ends.
func client(t testing.TB, brokers []string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// produce produces records and waits for their acks.
func produce(t testing.TB, cl *kgo.Client, rs ...*kgo.Record) {
	t.Helper()
	if err := cl.ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
}

// orderRecord is an order on topic with its id in the idem-message-id header.
func orderRecord(t testing.TB, topic, id string, o order) *kgo.Record {
	return &kgo.Record{Topic: topic, Key: []byte(o.OrderID), Value: mustJSON(t, o),
		Headers: []kgo.RecordHeader{{Key: kafka.HeaderMessageID, Value: []byte(id)}}}
}

// readAll reads topic from the start until want records arrived or timeout
// passed, and returns what it read.
func readAll(t testing.TB, brokers []string, topic string, want int, timeout time.Duration) []*kgo.Record {
	t.Helper()
	cl := client(t, brokers, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	defer cl.Close()
	var out []*kgo.Record
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for len(out) < want {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			break
		}
		out = append(out, fs.Records()...)
	}
	return out
}

// committed returns the group's committed offset of topic's partition p
// (-1 for none).
func committed(t testing.TB, brokers []string, group, topic string, p int32) int64 {
	t.Helper()
	cl := client(t, brokers)
	defer cl.Close()
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = group
	rt := kmsg.NewOffsetFetchRequestTopic()
	rt.Topic, rt.Partitions = topic, []int32{p}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(context.Background(), cl)
	if err != nil {
		t.Fatalf("fetch the committed offsets of %s: %v", group, err)
	}
	for _, tp := range resp.Topics {
		for _, pp := range tp.Partitions {
			if tp.Topic == topic && pp.Partition == p {
				return pp.Offset
			}
		}
	}
	for _, g := range resp.Groups {
		for _, tp := range g.Topics {
			for _, pp := range tp.Partitions {
				if tp.Topic == topic && pp.Partition == p {
					return pp.Offset
				}
			}
		}
	}
	return -1
}

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The consumer's database side: an inbox keyed on the message id (key=ID of
// an idem.Message[order]) and the business effect, a charge per order
// counted in charged.

type order struct {
	OrderID string `json:"order_id"`
	Amount  int    `json:"amount"`
}

const chargeMigration = `-- +goose Up
CREATE TABLE charged (order_id text PRIMARY KEY, n integer NOT NULL, amount integer NOT NULL);
-- +goose Down
DROP TABLE charged;
`

var chargeTable, chargeTableMigration = idemtest.TextKeyInbox("test.kafka.charge", "idem_kafka_charge", "ID",
	func(msg idem.Message[order]) string { return msg.ID })

type chargeResult struct {
	Charged int `json:"charged"`
}

// chargeInbox is the inbox of the charge handler; fail, when not nil, runs
// first in the handler's transaction and may fail it.
func chargeInbox(pool *pgxpool.Pool, fail func(msg idem.Message[order]) error) *idem.Inbox[idem.Message[order], chargeResult] {
	return idem.NewInbox(pool, chargeTable, func(ctx context.Context, tx pgx.Tx, msg idem.Message[order]) (chargeResult, error) {
		if fail != nil {
			if err := fail(msg); err != nil {
				return chargeResult{}, err
			}
		}
		_, err := tx.Exec(ctx, `INSERT INTO charged (order_id, n, amount) VALUES ($1, 1, $2)
			ON CONFLICT (order_id) DO UPDATE SET n = charged.n + 1`, msg.Body.OrderID, msg.Body.Amount)
		return chargeResult{Charged: msg.Body.Amount}, err
	})
}

// database is a fresh schema with the outbox chain and the charge tables.
func database(t testing.TB) *idemtest.DB {
	t.Helper()
	fsys := fstest.MapFS{"00100_charge_inbox.sql": {Data: []byte(chargeTableMigration)}, "00101_charge.sql": {Data: []byte(chargeMigration)}}
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

func queryInt(t testing.TB, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// delivery is one call of a recorded handler.
type delivery struct {
	ID      string
	Attempt int
	Outcome idem.Outcome
	Err     error
	At      time.Time
}

// recorder wraps a handler and records each delivery it handled.
type recorder struct {
	mu   sync.Mutex
	list []delivery
}

func (r *recorder) wrap(h idem.Handler[idem.Message[order]], after func(msg idem.Message[order], o idem.Outcome, err error)) idem.Handler[idem.Message[order]] {
	return idem.HandlerFunc[idem.Message[order]](func(ctx context.Context, msg idem.Message[order]) (idem.Outcome, error) {
		at := time.Now()
		o, err := h.Deliver(ctx, msg)
		r.mu.Lock()
		r.list = append(r.list, delivery{ID: msg.ID, Attempt: msg.Attempt, Outcome: o, Err: err, At: at})
		r.mu.Unlock()
		if after != nil {
			after(msg, o, err)
		}
		return o, err
	})
}

func (r *recorder) snapshot() []delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]delivery(nil), r.list...)
}

func (r *recorder) count(o idem.Outcome) int {
	n := 0
	for _, d := range r.snapshot() {
		if d.Outcome == o {
			n++
		}
	}
	return n
}

// logs collects the consumer's log lines and passes them to t.Log.
type logs struct {
	t  testing.TB
	mu sync.Mutex
	b  strings.Builder
}

func (l *logs) Write(p []byte) (int, error) {
	l.mu.Lock()
	l.b.Write(p)
	l.mu.Unlock()
	l.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

func (l *logs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func newLogs(t testing.TB) (*logs, *slog.Logger) {
	l := &logs{t: t}
	return l, slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

var deliveryLine = regexp.MustCompile(`message_id=`)

// checkAttemptLogged fails the test if a log line about a record lacks the
// attempt.
func checkAttemptLogged(t testing.TB, l *logs) {
	t.Helper()
	lines := 0
	for _, line := range strings.Split(l.String(), "\n") {
		if !deliveryLine.MatchString(line) {
			continue
		}
		lines++
		if !strings.Contains(line, " attempt=") {
			t.Errorf("a log line about a record without the attempt: %s", line)
		}
	}
	if lines == 0 {
		t.Errorf("no log line about a record")
	}
}

// run runs c until the returned stop is called or the test ends; stop fails
// the test if Run returns an error or takes longer than 10s to return.
func run[M any](t testing.TB, c *kafka.Consumer[M]) (stop func()) {
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

// waitFor polls cond until it holds or timeout passes.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func describe(ds []delivery) string {
	var b strings.Builder
	for _, d := range ds {
		fmt.Fprintf(&b, "\n  %s attempt %d: %v %v", d.ID, d.Attempt, d.Outcome, d.Err)
	}
	return b.String()
}

func slogDiscard() *slog.Logger { return slog.New(slog.DiscardHandler) }
