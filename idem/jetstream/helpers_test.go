package jetstream_test

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
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemtest"
	idemjs "github.com/idemgen/idemgen/idem/jetstream"
	outboxmigrations "github.com/idemgen/idemgen/migrations"
)

// The tests run against a real NATS server with JetStream:
// IDEMGEN_TEST_NATS_URL, or the local server at 127.0.0.1:4222, or, when
// neither answers and nats-server is on PATH, a throwaway server that
// TestMain starts in a temporary directory on a free port.
const defaultNATSURL = "nats://127.0.0.1:4222"

var (
	testNATSURL string // what natsURL returns
	natsProblem error  // why no server is reachable
)

func TestMain(m *testing.M) {
	stop := findNATS()
	code := m.Run()
	stop()
	os.Exit(code)
}

// findNATS sets testNATSURL, starting a throwaway nats-server if it must,
// and returns what stops it.
func findNATS() (stop func()) {
	if url := os.Getenv("IDEMGEN_TEST_NATS_URL"); url != "" {
		testNATSURL, natsProblem = url, checkJetStream(url)
		return func() {}
	}
	testNATSURL = defaultNATSURL
	if natsProblem = checkJetStream(defaultNATSURL); natsProblem == nil {
		return func() {}
	}
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		return func() {}
	}
	dir, err := os.MkdirTemp("", "idem-nats-")
	if err != nil {
		return func() {}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return func() { os.RemoveAll(dir) }
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command(bin, "-js", "-a", "127.0.0.1", "-p", strconv.Itoa(port), "-sd", dir)
	if err := cmd.Start(); err != nil {
		natsProblem = fmt.Errorf("%w; and starting %s failed: %v", natsProblem, bin, err)
		return func() { os.RemoveAll(dir) }
	}
	stop = func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); os.RemoveAll(dir) }
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if err := checkJetStream(url); err == nil {
			testNATSURL, natsProblem = url, nil
			return stop
		} else if time.Now().After(deadline) {
			natsProblem = fmt.Errorf("%w; and the throwaway %s at %s did not come up: %v", natsProblem, bin, url, err)
			return stop
		}
	}
}

// checkJetStream reports whether url is a NATS server with JetStream.
func checkJetStream(url string) error {
	nc, err := nats.Connect(url, nats.Timeout(3*time.Second))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err = js.AccountInfo(ctx)
	return err
}

func natsURL(t testing.TB) string {
	t.Helper()
	if natsProblem != nil {
		t.Fatalf("NATS with JetStream is not reachable at %s: %v\n"+
			"These tests need a NATS server with JetStream enabled: install nats-server "+
			"(https://github.com/nats-io/nats-server/releases; on PATH, the tests start a throwaway one themselves) "+
			"or start one with `nats-server -js`, or point IDEMGEN_TEST_NATS_URL at one.", testNATSURL, natsProblem)
	}
	return testNATSURL
}

// connect opens a NATS connection that reconnects forever, closed when the
// test ends, and its JetStream.
func connect(t testing.TB, url string, opts ...nats.Option) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	opts = append([]nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond), nats.Name(t.Name())}, opts...)
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// uniqueName returns a name no other test run uses, for streams, consumers
// and subjects (letters, digits, "_" and "-" only).
func uniqueName(t testing.TB) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := strings.NewReplacer("/", "-", " ", "-", ".", "-").Replace(t.Name())
	return "idemtest-" + name + "-" + hex.EncodeToString(b[:])
}

// topology is a fresh topology for the test: stream, subject, durable
// consumer, dead-letter subject and stream all named uniquely.
func topology(t testing.TB) idemjs.Topology {
	name := uniqueName(t)
	return idemjs.Topology{Stream: name, Subjects: []string{name + ".orders"}, Consumer: "billing", AckWait: 5 * time.Second}
}

// declare declares top and deletes its streams (and so the consumer) when
// the test ends.
func declare(t testing.TB, url string, top idemjs.Topology) {
	t.Helper()
	_, js := connect(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := idemjs.Declare(ctx, js, top); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		nc, err := nats.Connect(url)
		if err != nil {
			t.Errorf("delete the streams of %s: %v", top.Stream, err)
			return
		}
		defer nc.Close()
		js, _ := jetstream.New(nc)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, s := range []string{top.Stream, top.DeadLetterStreamName()} {
			if err := js.DeleteStream(ctx, s); err != nil {
				t.Errorf("delete stream %s: %v", s, err)
			}
		}
	})
}

// publish publishes data to subject with id as Nats-Msg-Id (none when id is
// empty) and returns the PubAck.
func publish(t testing.TB, js jetstream.JetStream, subject, id string, data []byte) *jetstream.PubAck {
	t.Helper()
	m := &nats.Msg{Subject: subject, Data: data, Header: nats.Header{}}
	if id != "" {
		m.Header.Set(jetstream.MsgIDHeader, id)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ack, err := js.PublishMsg(ctx, m)
	if err != nil {
		t.Fatalf("publish %q to %s: %v", id, subject, err)
	}
	return ack
}

// streamMsgs returns every message stream holds, in order.
func streamMsgs(t testing.TB, js jetstream.JetStream, stream string) []*jetstream.RawStreamMsg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatalf("stream %s: %v", stream, err)
	}
	info := s.CachedInfo()
	var out []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("stream %s message %d: %v", stream, seq, err)
		}
		out = append(out, m)
	}
	return out
}

// consumerInfo returns the durable consumer's state.
func consumerInfo(t testing.TB, js jetstream.JetStream, top idemjs.Topology) *jetstream.ConsumerInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := js.Consumer(ctx, top.Stream, top.Consumer)
	if err != nil {
		t.Fatalf("consumer %s: %v", top.Consumer, err)
	}
	return c.CachedInfo()
}

// settled reports whether the durable consumer has nothing pending and
// nothing unacked.
func settled(t testing.TB, js jetstream.JetStream, top idemjs.Topology) bool {
	ci := consumerInfo(t, js, top)
	return ci.NumPending == 0 && ci.NumAckPending == 0
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The consumer's database side: an inbox keyed on the Nats-Msg-Id
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

var chargeTable, chargeTableMigration = idemtest.TextKeyInbox("test.jetstream.charge", "idem_js_charge", "ID",
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
func run[M any](t testing.TB, c *idemjs.Consumer[M]) (stop func()) {
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
