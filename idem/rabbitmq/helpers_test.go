package rabbitmq_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemtest"
	"github.com/idemgen/idemgen/idem/rabbitmq"
	outboxmigrations "github.com/idemgen/idemgen/migrations"
)

// The tests run against a real RabbitMQ: IDEMGEN_TEST_AMQP_URL, or the
// local node with the default guest account.
const defaultAMQPURL = "amqp://guest:guest@127.0.0.1:5672/"

func amqpURL(t testing.TB) string {
	t.Helper()
	url := os.Getenv("IDEMGEN_TEST_AMQP_URL")
	if url == "" {
		url = defaultAMQPURL
	}
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatalf("RabbitMQ is not reachable at %s: %v\n"+
			"These tests need a RabbitMQ node: install and start one (Debian/Ubuntu: apt-get install rabbitmq-server; "+
			"it listens on 127.0.0.1:5672 with guest/guest), or point IDEMGEN_TEST_AMQP_URL at one.", url, err)
	}
	conn.Close()
	return url
}

// channel opens a connection and channel for the test's own declarations,
// publishing and inspection, closed when the test ends.
func channel(t testing.TB, url string) *amqp.Channel {
	t.Helper()
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// uniqueName returns a name no other test run uses, for queues, exchanges and
// connection names.
func uniqueName(t testing.TB) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := strings.NewReplacer("/", "-", " ", "-").Replace(t.Name())
	return "idemtest-" + name + "-" + hex.EncodeToString(b[:])
}

// declare declares top and deletes all of it when the test ends.
func declare(t testing.TB, url string, top rabbitmq.Topology) {
	t.Helper()
	ch := channel(t, url)
	if err := rabbitmq.Declare(ch, top); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn, err := amqp.Dial(url)
		if err != nil {
			t.Errorf("delete the topology of %s: %v", top.Queue, err)
			return
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			t.Errorf("delete the topology of %s: %v", top.Queue, err)
			return
		}
		for _, q := range []string{top.Queue, top.RetryQueue(), top.DeadLetterQueue()} {
			if _, err := ch.QueueDelete(q, false, false, false); err != nil {
				t.Errorf("delete queue %s: %v", q, err)
			}
		}
		for _, x := range []string{top.DeadLetterExchange(), top.Exchange} {
			if x == "" {
				continue
			}
			if err := ch.ExchangeDelete(x, false, false); err != nil {
				t.Errorf("delete exchange %s: %v", x, err)
			}
		}
	})
}

// depth returns how many messages queue holds ready (not counting those
// delivered and not yet acked).
func depth(t testing.TB, url, queue string) int {
	t.Helper()
	ch := channel(t, url)
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		t.Fatalf("inspect queue %s: %v", queue, err)
	}
	return q.Messages
}

// drain takes every message queue holds, acking them.
func drain(t testing.TB, url, queue string) []amqp.Delivery {
	t.Helper()
	ch := channel(t, url)
	defer ch.Close()
	var out []amqp.Delivery
	for {
		d, ok, err := ch.Get(queue, true)
		if err != nil {
			t.Fatalf("get from %s: %v", queue, err)
		}
		if !ok {
			return out
		}
		out = append(out, d)
	}
}

// publish publishes body to queue on the default exchange, with confirms.
func publish(t testing.TB, ch *amqp.Channel, queue, id string, body []byte) {
	t.Helper()
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", queue, true, false,
		amqp.Publishing{MessageId: id, ContentType: "application/json", DeliveryMode: amqp.Persistent, Body: body})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := dc.WaitContext(context.Background()); !ok || err != nil {
		t.Fatalf("publish %s to %s: not confirmed (%v)", id, queue, err)
	}
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// closeConnectionsNamed closes, from the server side (rabbitmqctl
// close_connection), every connection whose connection_name starts with
// prefix, and returns how many it closed.
func closeConnectionsNamed(t testing.TB, prefix string) int {
	t.Helper()
	ctl, err := exec.LookPath("rabbitmqctl")
	if err != nil {
		t.Fatalf("rabbitmqctl is not on PATH (%v): the test closes connections from the server side with it; install rabbitmq-server, which brings it", err)
	}
	out, err := exec.Command(ctl, "list_connections", "-q", "--no-table-headers", "pid", "client_properties").Output()
	if err != nil {
		t.Fatalf("rabbitmqctl list_connections: %v", err)
	}
	// Each line: <pid>\t[{"connection_name","name"},...]
	n := 0
	for _, line := range strings.Split(string(out), "\n") {
		pid, props, ok := strings.Cut(line, "\t")
		if !ok || !strings.Contains(props, `{"connection_name","`+prefix) {
			continue
		}
		if out, err := exec.Command(ctl, "close_connection", pid, "closed by "+t.Name()).CombinedOutput(); err != nil {
			t.Fatalf("rabbitmqctl close_connection %s: %v: %s", pid, err, out)
		}
		n++
	}
	return n
}

// conns records the network connections a consumer or publisher dials, so
// that a test can cut them.
type conns struct {
	mu  sync.Mutex
	all []net.Conn
}

func (c *conns) dial(network, addr string) (net.Conn, error) {
	conn, err := amqp.DefaultDial(10*time.Second)(network, addr)
	if err == nil {
		c.mu.Lock()
		c.all = append(c.all, conn)
		c.mu.Unlock()
	}
	return conn, err
}

// cut closes the socket of every connection dialled so far: the client
// side drops, the broker sees the connection gone and requeues what it had
// delivered and not been acked.
func (c *conns) cut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, conn := range c.all {
		conn.Close()
	}
}

// The consumer's database side: an inbox keyed on the AMQP message_id
// (key=ID of an idem.Message[order]) and the business effect, a charge per
// order counted in charged.

type order struct {
	OrderID string `json:"order_id"`
	Amount  int    `json:"amount"`
}

const chargeMigration = `-- +goose Up
CREATE TABLE charged (order_id text PRIMARY KEY, n integer NOT NULL, amount integer NOT NULL);
-- +goose Down
DROP TABLE charged;
`

var chargeTable, chargeTableMigration = idemtest.TextKeyInbox("test.rabbit.charge", "idem_rabbit_charge", "ID",
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

// checkAttemptLogged fails the test if a log line about a delivery lacks the
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
			t.Errorf("a log line about a delivery without the attempt: %s", line)
		}
	}
	if lines == 0 {
		t.Errorf("no log line about a delivery")
	}
}

// run runs c until the returned stop is called or the test ends; stop fails
// the test if Run returns an error or takes longer than 10s to return.
func run[M any](t testing.TB, c *rabbitmq.Consumer[M]) (stop func()) {
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
