package idem_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemimpl"
	"github.com/idemgen/idemgen/idem/internal/relaytest"
	"github.com/idemgen/idemgen/idem/relay"
)

// TestOutboxDuplicateBeforePublish is the outbox's replay rule: duplicates of a
// message whose outbox rows are not yet published (sequential and
// concurrent ones) add nothing and change nothing; a relay then publishes
// the rows, once each id.
func TestOutboxDuplicateBeforePublish(t *testing.T) {
	db := orderDB(t)
	ctx := context.Background()
	in := idemimpl.NewPublishingInbox(db.Pool, orderTable, placeOrder)
	msg := order{Shop: "dup", Number: 1, Publish: 2}
	if _, o, err := in.Handle(ctx, msg); err != nil || o != idem.Processed {
		t.Fatalf("first delivery: %v, %v", o, err)
	}
	rowsBefore := fmt.Sprint(outboxRows(t, db.Pool))
	if n, o, err := in.Handle(ctx, msg); err != nil || o != idem.Duplicate || n != 2 {
		t.Fatalf("a duplicate: %v, %v, %v; want Duplicate with 2", n, o, err)
	}
	if got := deliverAtOnce(t, db.Pool, 8, func() (idem.Outcome, error) {
		_, o, err := in.Handle(ctx, msg)
		return o, err
	}); got[idem.Duplicate] != 8 {
		t.Fatalf("8 concurrent duplicates: %v", got)
	}
	if after := fmt.Sprint(outboxRows(t, db.Pool)); after != rowsBefore {
		t.Fatalf("the duplicates changed the outbox:\nbefore %s\nafter  %s", rowsBefore, after)
	}
	wantOutboxIDs(t, db.Pool, msg, 2, "after the duplicates")
	if n := relaytest.Pending(t, db); n != 2 {
		t.Fatalf("%d rows pending after the duplicates, want 2", n)
	}
	recv := &capture{}
	stop := relaytest.Run(t, relay.New(db.Pool, recv, relay.WithID("dup"), relay.WithPollInterval(20*time.Millisecond), relay.WithLogger(relaytest.Logger(t))))
	relaytest.WaitFor(t, 10*time.Second, "the relay to mark both rows", func() bool { return relaytest.Pending(t, db) == 0 })
	stop()
	want := map[string]int{
		idem.OutgoingMessageID(orderTable.Consumer, []any{"dup", int64(1)}, 0): 1,
		idem.OutgoingMessageID(orderTable.Consumer, []any{"dup", int64(1)}, 1): 1,
	}
	if got := recv.perID(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("published %v, want each id once: %v", got, want)
	}
}

// TestOutboxNoRowsWhenTheDeliveryFails: a handler that published and then
// returned an error or panicked, a Publish of a payload that cannot be
// encoded (ErrUnencodable: Publish's error, and ActionFor says DeadLetter),
// a before-commit hook that fails and a handler statement that failed all
// leave no outbox row; a later good delivery of the same key writes its rows
// with ids from 0.
func TestOutboxNoRowsWhenTheDeliveryFails(t *testing.T) {
	db := orderDB(t)
	ctx := context.Background()
	boom := errors.New("boom")
	cases := []struct {
		name    string
		handler func(ctx context.Context, tx pgx.Tx, out *idem.Outbox, msg order) (int, error)
		opts    []idem.Option
		want    func(err error) bool
	}{
		{"error", func(ctx context.Context, tx pgx.Tx, out *idem.Outbox, msg order) (int, error) {
			_, _ = placeOrder(ctx, tx, out, msg)
			return 0, boom
		}, nil, func(err error) bool { return errors.Is(err, boom) }},
		{"panic", func(ctx context.Context, tx pgx.Tx, out *idem.Outbox, msg order) (int, error) {
			_, _ = placeOrder(ctx, tx, out, msg)
			panic(boom)
		}, nil, nil},
		{"unencodable", func(ctx context.Context, tx pgx.Tx, out *idem.Outbox, msg order) (int, error) {
			_, _ = placeOrder(ctx, tx, out, msg)
			return 0, out.Publish("test.placed", math.NaN())
		}, nil, func(err error) bool {
			return errors.Is(err, idem.ErrUnencodable) && idem.ActionFor(err) == idem.DeadLetter
		}},
		{"before commit", placeOrder, []idem.Option{idem.WithBeforeCommit(func(context.Context, pgx.Tx) error { return boom })},
			func(err error) bool { return errors.Is(err, boom) }},
		{"aborted", func(ctx context.Context, tx pgx.Tx, out *idem.Outbox, msg order) (int, error) {
			_, _ = placeOrder(ctx, tx, out, msg)
			_, _ = tx.Exec(ctx, `SELECT 1/0`)
			return 0, nil // ignores the failed statement
		}, nil, func(err error) bool { return err != nil && strings.Contains(err.Error(), "rolled back") }},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			msg := order{Shop: "fail-" + c.name, Number: int64(i + 1), Publish: 3}
			in := idemimpl.NewPublishingInbox(db.Pool, orderTable, c.handler, c.opts...)
			err := func() (err error) {
				defer func() {
					if p := recover(); p != nil {
						err = fmt.Errorf("panic: %v", p)
					}
				}()
				_, _, err = in.Handle(ctx, msg)
				return err
			}()
			switch {
			case c.want == nil && (err == nil || !strings.Contains(err.Error(), "panic: boom")):
				t.Fatalf("Handle: %v, want the handler's panic", err)
			case c.want != nil && !c.want(err):
				t.Fatalf("Handle: %v", err)
			}
			if n := relaytest.QueryInt(t, db.Pool, `SELECT count(*)::int FROM idem_outbox WHERE ordering_key = $1`, msg.Shop); n != 0 {
				t.Fatalf("%d outbox rows after the failed delivery, want 0", n)
			}
			good := idemimpl.NewPublishingInbox(db.Pool, orderTable, placeOrder)
			msg.Publish = 2
			if _, o, err := good.Handle(ctx, msg); err != nil || o != idem.Processed {
				t.Fatalf("the redelivery: %v, %v", o, err)
			}
			wantShopIDs(t, db, msg, 2, "after the redelivery")
		})
	}
}

// TestPublishRefusesWhatCannotBeARow: Publish's errors, each wrapping
// ErrUnencodable, and a Publish after the handler returned.
func TestPublishRefusesWhatCannotBeARow(t *testing.T) {
	db := orderDB(t)
	ctx := context.Background()
	var kept *idem.Outbox
	var errs []error
	in := idemimpl.NewPublishingInbox(db.Pool, orderTable, idemimpl.NoResultPublishing(func(ctx context.Context, tx pgx.Tx, out *idem.Outbox, msg order) error {
		kept = out
		errs = []error{
			out.Publish("", "x"),
			out.Publish("a\x00b", "x"),
			out.Publish("d", "x", idem.WithOrderingKey("\xff")),
			out.Publish("d", "x", idem.WithHeader("n", "v\x00")),
			out.Publish("d", "x", idem.WithHeader("\xfe", "v")),
			out.Publish("d", math.Inf(1)),
			out.Publish("d", make(chan int)),
		}
		return out.Publish("good", "kept")
	}))
	msg := order{Shop: "refuse", Number: 1}
	if _, o, err := in.Handle(ctx, msg); err != nil || o != idem.Processed {
		t.Fatalf("Handle: %v, %v", o, err)
	}
	for i, err := range errs {
		if !errors.Is(err, idem.ErrUnencodable) {
			t.Errorf("Publish %d: %v, want an error wrapping ErrUnencodable", i, err)
		}
	}
	// The refused messages took no place in the sequence: the good one is 0.
	rows := outboxRows(t, db.Pool)
	if len(rows) != 1 || rows[0].ID != idem.OutgoingMessageID(orderTable.Consumer, []any{"refuse", int64(1)}, 0) || string(rows[0].Payload) != `"kept"` {
		t.Fatalf("outbox rows %+v, want only the good message, with id 0 of the run", rows)
	}
	if err := kept.Publish("late", "x"); err == nil || !strings.Contains(err.Error(), "after the handler returned") {
		t.Errorf("Publish after the handler returned: %v, want a refusal", err)
	}
}

// TestOutgoingMessageID: the ids are UUIDs of version 5 in the documented
// namespace; fixed values (a change would re-id every message of a rerun
// across a deploy); different consumers, keys, key parts, types and seqs
// never share one.
func TestOutgoingMessageID(t *testing.T) {
	// The documented derivation, spelled out independently of idem's code.
	namespace := uuid.NewSHA1(uuid.NameSpaceURL, []byte("https://github.com/idemgen/idemgen/idem#OutgoingMessageID"))
	name := []byte("\x0eidem.outbox.v1\x0ebilling.charge\x02s\x07order-1i\x00\x00\x00\x00\x00\x00\x00\x2a\x00")
	if got, want := idem.OutgoingMessageID("billing.charge", []any{"order-1", int64(42)}, 0), uuid.NewSHA1(namespace, name).String(); got != want {
		t.Errorf("OutgoingMessageID(billing.charge, [order-1 42], 0) = %s, want %s (the documented derivation)", got, want)
	}
	name = []byte("\x0eidem.outbox.v1\x01c\x02g\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f\x10n\xac\x02")
	key := []any{[16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, nil}
	if got, want := idem.OutgoingMessageID("c", key, 300), uuid.NewSHA1(namespace, name).String(); got != want {
		t.Errorf("OutgoingMessageID(c, [uuid nil], 300) = %s, want %s (the documented derivation)", got, want)
	}
	// Fixed: a change would give a rerun across a deploy other ids.
	if got := idem.OutgoingMessageID("billing.charge", []any{"order-1"}, 0); got != "51c57bab-7f11-5935-87e0-eae088378d8c" {
		t.Errorf("OutgoingMessageID(billing.charge, [order-1], 0) = %s: the ids changed", got)
	}
	seen := map[string]string{}
	add := func(consumer string, key []any, seq int) {
		id := idem.OutgoingMessageID(consumer, key, seq)
		what := fmt.Sprintf("%q %#v %d", consumer, key, seq)
		if other, ok := seen[id]; ok {
			t.Errorf("%s and %s share the id %s", what, other, id)
		}
		seen[id] = what
		if id[14] != '5' || !strings.ContainsRune("89ab", rune(id[19])) {
			t.Errorf("%s: %s is not a version 5 RFC 9562 UUID", what, id)
		}
		if again := idem.OutgoingMessageID(consumer, key, seq); again != id {
			t.Errorf("%s: %s then %s", what, id, again)
		}
	}
	for _, consumer := range []string{"a", "ab", "a.b", ""} {
		for _, key := range [][]any{
			{"b"}, {""}, {"b", "c"}, {"bc"}, {"b", nil}, {nil, "b"}, {nil}, {},
			{int64(1)}, {uint64(1)}, {"1"}, {int64(1), int64(2)}, {int64(12)},
			{[16]byte{1}}, {[16]byte{1}, nil}, {string([]byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})},
		} {
			for seq := range 3 {
				add(consumer, key, seq)
			}
		}
	}
	add("a", []any{"b"}, 1000)
}

// TestOutboxKilledInsideTheTransaction: a worker process killed with SIGKILL
// inside the delivery's transaction, after its handler published (in the
// handler, and in the before-commit hook, the last moment before the commit
// round trip), leaves no outbox row, no inbox row and no business row; the
// redelivery writes the rows with the ids a rerun computes.
func TestOutboxKilledInsideTheTransaction(t *testing.T) {
	if url := os.Getenv(envKilledWorkerURL); url != "" {
		runKilledWorker(url, os.Getenv(envKilledWorkerAt)) // never returns
	}
	db := orderDB(t)
	ctx := context.Background()
	for i, at := range []string{"handler", "before-commit"} {
		t.Run(at, func(t *testing.T) {
			msg := order{Shop: "killed-" + at, Number: int64(i + 1), Publish: 2}
			cmd := exec.Command(os.Args[0], "-test.run=^TestOutboxKilledInsideTheTransaction$", "-test.count=1")
			cmd.Env = append(os.Environ(), envKilledWorkerURL+"="+db.URL, envKilledWorkerAt+"="+at+":"+msg.Shop+":"+fmt.Sprint(msg.Number))
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			err := cmd.Run()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("the worker ended with %v, want killed by SIGKILL; its output:\n%s", err, out.String())
			}
			if !strings.Contains(out.String(), "published 2") {
				t.Fatalf("the worker was killed before it published; its output:\n%s", out.String())
			}
			// The server rolls the dead worker's transaction back once it
			// sees the connection closed; the redelivery's claim waits for it.
			relaytest.WaitFor(t, 10*time.Second, "the dead worker's backend gone", func() bool {
				return relaytest.QueryInt(t, db.Pool, `SELECT count(*)::int FROM pg_stat_activity WHERE application_name = 'killed worker'`) == 0
			})
			for _, table := range []string{"idem_outbox", "idem_test_order", "orders"} {
				if n := relaytest.QueryInt(t, db.Pool, `SELECT count(*)::int FROM `+table+` WHERE `+map[string]string{
					"idem_outbox": "ordering_key = $1", "idem_test_order": "key_shop = $1", "orders": "shop = $1"}[table], msg.Shop); n != 0 {
					t.Fatalf("%d rows in %s after the kill, want 0", n, table)
				}
			}
			in := idemimpl.NewPublishingInbox(db.Pool, orderTable, placeOrder)
			if _, o, err := in.Handle(ctx, msg); err != nil || o != idem.Processed {
				t.Fatalf("the redelivery: %v, %v; want Processed", o, err)
			}
			wantShopIDs(t, db, msg, 2, "after the redelivery")
		})
	}
}

const (
	envKilledWorkerURL = "IDEM_TEST_KILLED_WORKER_URL"
	envKilledWorkerAt  = "IDEM_TEST_KILLED_WORKER_AT"
)

// runKilledWorker is the child of TestOutboxKilledInsideTheTransaction: it
// delivers the order named by at ("handler" or "before-commit", the shop and
// the number), whose handler publishes 2 messages, and kills itself with
// SIGKILL at that point, inside the transaction.
func runKilledWorker(url, at string) {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "killed worker:", err)
		os.Exit(3)
	}
	parts := strings.Split(at, ":")
	if len(parts) != 3 {
		fail(fmt.Errorf("bad %s %q", envKilledWorkerAt, at))
	}
	var number int64
	if _, err := fmt.Sscan(parts[2], &number); err != nil {
		fail(err)
	}
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		fail(err)
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = "killed worker"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		fail(err)
	}
	kill := func() {
		fmt.Println("published 2; killing myself")
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	var opts []idem.Option
	if parts[0] == "before-commit" {
		opts = append(opts, idem.WithBeforeCommit(func(context.Context, pgx.Tx) error { kill(); return nil }))
	}
	in := idemimpl.NewPublishingInbox(pool, orderTable, func(ctx context.Context, tx pgx.Tx, out *idem.Outbox, msg order) (int, error) {
		n, err := placeOrder(ctx, tx, out, msg)
		if err == nil && parts[0] == "handler" {
			kill()
		}
		return n, err
	}, opts...)
	_, o, err := in.Handle(ctx, order{Shop: parts[1], Number: number, Publish: 2})
	fail(fmt.Errorf("Handle returned %v, %v without being killed", o, err))
}

// outboxListener is a connection of its own that listens on
// idem.OutboxChannel, closed when the test ends.
func outboxListener(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	listener, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = listener.Close(context.Background()) })
	if _, err := listener.Exec(ctx, "LISTEN "+idem.OutboxChannel); err != nil {
		t.Fatal(err)
	}
	return listener
}

// TestOutboxNotify: a committing delivery that wrote outbox rows, alone in
// its interval, is followed by one NOTIFY on idem.OutboxChannel, sent on a
// connection of its pool and seen by a LISTEN on a second connection; with
// WithoutNotify, and for a delivery that published nothing, none is sent
// (notifications from other backends, other tests on the database, are
// told apart by the sender's PID).
func TestOutboxNotify(t *testing.T) {
	db := orderDB(t)
	ctx := context.Background()
	listener := outboxListener(t, db.URL)
	// One connection, so that every delivery's backend is the same.
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var pid uint32
	if err := pool.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	// notifications counts what the delivering backend sent within wait.
	notifications := func(wait time.Duration) int {
		n := 0
		deadline := time.Now().Add(wait)
		for {
			wctx, cancel := context.WithDeadline(ctx, deadline)
			note, err := listener.WaitForNotification(wctx)
			cancel()
			if err != nil {
				if wctx.Err() == nil {
					t.Fatalf("wait for a notification: %v", err)
				}
				return n
			}
			if note.PID == pid && note.Channel == idem.OutboxChannel {
				n++
			}
		}
	}
	notifying := idemimpl.NewPublishingInbox(pool, orderTable, placeOrder)
	quiet := idemimpl.NewPublishingInbox(pool, orderTable, placeOrder, idem.WithoutNotify())
	for i, c := range []struct {
		name    string
		in      *idemimpl.Inbox[order, int]
		publish int
		want    int
	}{
		{"notify, 3 messages", notifying, 3, 1},
		{"notify, no message", notifying, 0, 0},
		{"WithoutNotify, 3 messages", quiet, 3, 0},
		{"notify, 1 message", notifying, 1, 1},
	} {
		msg := order{Shop: "notify", Number: int64(i + 1), Publish: c.publish}
		if _, o, err := c.in.Handle(ctx, msg); err != nil || o != idem.Processed {
			t.Fatalf("%s: %v, %v", c.name, o, err)
		}
		if got := notifications(300 * time.Millisecond); got != c.want {
			t.Errorf("%s: %d notifications on %s, want %d", c.name, got, idem.OutboxChannel, c.want)
		}
	}
	if n := relaytest.QueryInt(t, db.Pool, `SELECT count(*)::int FROM idem_outbox`); n != 7 {
		t.Errorf("%d outbox rows, want 7 (WithoutNotify still writes them)", n)
	}
}

// TestOutboxCostsNoRoundTrip: a first delivery that publishes 0, 1 or 10
// messages costs the same round trips on the wire (counted below pgx, as
// bench/ counts them: each read that returns data after a write), and as
// many as the delivery of a handler without an outbox, in every
// QueryExecMode, on a warm connection; a delivery that wrote rows is then
// followed by the NOTIFY that wakes the relays, one round trip of its own
// (alone in its interval, nothing shares it).
func TestOutboxCostsNoRoundTrip(t *testing.T) {
	db := orderDB(t)
	ctx := context.Background()
	listener := outboxListener(t, db.URL)
	for _, mode := range execModes {
		t.Run(mode.String(), func(t *testing.T) {
			var trips atomic.Int64
			cfg, err := pgxpool.ParseConfig(db.URL)
			if err != nil {
				t.Fatal(err)
			}
			cfg.MaxConns = 1
			cfg.ConnConfig.DefaultQueryExecMode = mode
			dialer := &net.Dialer{}
			cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
				c, err := dialer.DialContext(ctx, network, addr)
				if err != nil {
					return nil, err
				}
				return &tripConn{Conn: c, trips: &trips}, nil
			}
			pool, err := pgxpool.NewWithConfig(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			var pid uint32
			if err := pool.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
				t.Fatal(err)
			}
			shop := "trips-" + mode.String()
			publishing := idemimpl.NewPublishingInbox(pool, orderTable, placeOrder)
			plain := idemimpl.NewInbox(pool, orderTable, func(ctx context.Context, tx pgx.Tx, msg order) (int, error) {
				_, err := tx.Exec(ctx, `INSERT INTO orders (shop, number) VALUES ($1, $2)`, msg.Shop, msg.Number)
				return 0, err
			})
			// notified waits for the NOTIFY of the pool's backend, and then
			// for the notifier to have read its reply and released the
			// connection, so that its round trip is counted.
			notified := func() {
				wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				defer cancel()
				for {
					note, err := listener.WaitForNotification(wctx)
					if err != nil {
						t.Fatalf("no NOTIFY from the delivering pool within 5s: %v", err)
					}
					if note.PID == pid {
						break
					}
				}
				relaytest.WaitFor(t, 5*time.Second, "the notifier to release its connection", func() bool { return pool.Stat().AcquiredConns() == 0 })
			}
			number := int64(0)
			// deliver returns the round trips of a delivery and, if it
			// published, of the NOTIFY after it.
			deliver := func(in *idemimpl.Inbox[order, int], publish int) int64 {
				number++
				before := trips.Load()
				if _, o, err := in.Handle(ctx, order{Shop: shop, Number: number, Publish: publish}); err != nil || o != idem.Processed {
					t.Fatalf("deliver %d publishing %d: %v, %v", number, publish, o, err)
				}
				if publish > 0 {
					notified()
				}
				return trips.Load() - before
			}
			// Warm the connection's statement cache for both paths.
			deliver(publishing, 1)
			deliver(plain, 0)
			got := map[string]int64{
				"no outbox":   deliver(plain, 0),
				"0 messages":  deliver(publishing, 0),
				"1 message":   deliver(publishing, 1) - 1,
				"10 messages": deliver(publishing, 10) - 1,
			}
			for what, n := range got {
				if n != got["no outbox"] {
					t.Errorf("round trips of a first delivery (those with messages less the NOTIFY's one): %v; want the same for each (%s differs)", got, what)
					break
				}
			}
			// BEGIN + the lookup + the handler's INSERT, then the commit
			// batch; in describe_exec pgx describes each batch first.
			want := int64(2)
			if mode == pgx.QueryExecModeDescribeExec {
				want = 4
			}
			if got["no outbox"] != want {
				t.Errorf("a first delivery took %d round trips, want %d (BEGIN + the lookup + the handler's INSERT, the commit batch)", got["no outbox"], want)
			}
			if n := relaytest.QueryInt(t, db.Pool, `SELECT count(*)::int FROM idem_outbox WHERE ordering_key = $1`, shop); n != 12 {
				t.Errorf("%d outbox rows, want 12", n)
			}
		})
	}
}

// tripConn counts round trips: each read that returns data after a write.
type tripConn struct {
	net.Conn
	trips *atomic.Int64
	wrote atomic.Bool
}

func (c *tripConn) Write(p []byte) (int, error) {
	c.wrote.Store(true)
	return c.Conn.Write(p)
}

func (c *tripConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && c.wrote.Swap(false) {
		c.trips.Add(1)
	}
	return n, err
}

// TestPublishRefusesAnOrderingKeyTheIndexCannotHold: a 3,000-character
// ordering key is Publish's error, wrapping ErrUnencodable, before the
// commit: the handler returns it, nothing is committed (no outbox row, no
// inbox row), and the delivery is dead-lettered rather than retried.
func TestPublishRefusesAnOrderingKeyTheIndexCannotHold(t *testing.T) {
	db := orderDB(t)
	ctx := context.Background()
	var publishErr error
	in := idemimpl.NewPublishingInbox(db.Pool, orderTable, idemimpl.NoResultPublishing(func(ctx context.Context, tx pgx.Tx, out *idem.Outbox, msg order) error {
		publishErr = out.Publish("d", "x", idem.WithOrderingKey(strings.Repeat("k", 3000)))
		return publishErr
	}))
	_, _, err := in.Handle(ctx, order{Shop: "long-key", Number: 1})
	rows := outboxRows(t, db.Pool)
	inbox := relaytest.QueryInt(t, db.Pool, `SELECT count(*)::int FROM `+orderTable.Name)
	t.Logf("Publish with a 3000-byte ordering key: %v; Handle: %v (%v); outbox rows %d, inbox rows %d", publishErr, err, idem.ActionFor(err), len(rows), inbox)
	if !errors.Is(publishErr, idem.ErrUnencodable) || !errors.Is(err, idem.ErrUnencodable) || idem.ActionFor(err) != idem.DeadLetter {
		t.Errorf("Publish: %v, Handle: %v; want errors wrapping ErrUnencodable, dead-lettered", publishErr, err)
	}
	if len(rows) != 0 || inbox != 0 {
		t.Errorf("%d outbox rows, %d inbox rows committed; want none", len(rows), inbox)
	}
	// At the bound, the key is taken and committed.
	in = idemimpl.NewPublishingInbox(db.Pool, orderTable, idemimpl.NoResultPublishing(func(ctx context.Context, tx pgx.Tx, out *idem.Outbox, msg order) error {
		return out.Publish("d", "x", idem.WithOrderingKey(strings.Repeat("k", idem.MaxOrderingKeyBytes)))
	}))
	if _, o, err := in.Handle(ctx, order{Shop: "long-key", Number: 2}); err != nil || o != idem.Processed {
		t.Errorf("an ordering key of MaxOrderingKeyBytes: %v, %v; want Processed", o, err)
	}
}
