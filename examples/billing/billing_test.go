package billing_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/examples/billing"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemtest"
)

// These tests prove the generated wrappers' guarantee against a real
// PostgreSQL: concurrent deliveries, crashes (a process killed with SIGKILL)
// before and after the commit, reused keys and business errors.

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		crashChild()
		return
	}
	os.Exit(m.Run())
}

// newDB returns a fresh schema with the billing migrations applied and one
// account, acc-1, holding 1000 cents.
func newDB(t *testing.T) *idemtest.DB {
	t.Helper()
	db := idemtest.New(t, billing.Migrations())
	mustExec(t, db.Pool, `INSERT INTO accounts (id, owner, balance_cents) VALUES ('acc-1', 'Ada', 1000)`)
	return db
}

func mustExec(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func queryInt(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// state is what a charge of order id changed: charge rows, inbox rows, the
// balance of acc-1 and the ChargeCompleted rows in the outbox.
type state struct{ charges, inbox, balance, outbox int64 }

func chargeState(t *testing.T, db *idemtest.DB, orderID string) state {
	t.Helper()
	// The one message of a charge has the id every run for the order mints.
	id := idem.OutgoingMessageID("billing.charge", []any{orderID}, 0)
	byOrder := `FROM idem_outbox WHERE convert_from(payload, 'UTF8')::jsonb->>'order_id' = $1`
	if n := queryInt(t, db.Pool, `SELECT count(*) `+byOrder+` AND message_id <> $2::uuid`, orderID, id); n > 0 {
		t.Errorf("%d outbox row(s) of order %s have another id than %s", n, orderID, id)
	}
	return state{
		charges: queryInt(t, db.Pool, `SELECT count(*) FROM charges WHERE order_id = $1`, orderID),
		inbox:   queryInt(t, db.Pool, `SELECT count(*) FROM idem_billing_charge WHERE key_order_id = $1`, orderID),
		balance: queryInt(t, db.Pool, `SELECT balance_cents FROM accounts WHERE id = 'acc-1'`),
		outbox:  queryInt(t, db.Pool, `SELECT count(*) `+byOrder, orderID),
	}
}

func TestMigrationsGoDownAndUpAgain(t *testing.T) {
	db := idemtest.New(t, billing.Migrations())
	ctx := context.Background()
	p := db.Migrations(t, billing.Migrations())
	if _, err := p.DownTo(ctx, 0); err != nil {
		t.Fatalf("down to 0: %v", err)
	}
	if n := queryInt(t, db.Pool, `SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename <> 'goose_db_version'`, db.Schema); n != 0 {
		t.Fatalf("%d tables left after down to 0", n)
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatalf("up again: %v", err)
	}
	sources := p.ListSources()
	last := sources[len(sources)-1].Version
	if v, err := p.GetDBVersion(ctx); err != nil || v != last {
		t.Fatalf("version %d, %v; want %d, the last migration's", v, err, last)
	}
}

// TestChargeConcurrentDeliveries delivers one message from 16 goroutines at
// once. A lock on the account holds the first delivery inside its
// transaction until every other delivery is waiting on the claim, so the
// deliveries really overlap.
func TestChargeConcurrentDeliveries(t *testing.T) {
	const n = 16
	db := newDB(t)
	ctx := context.Background()
	appName := "billing-concurrent-" + db.Schema
	pool := namedPool(t, db, appName)
	idemtest.Warm(t, pool, n)
	charge := billing.NewChargeIdem(pool, &billing.Service{})
	msg := billing.OrderPlaced{OrderID: "ord-1", AccountID: "acc-1", AmountCents: 250}

	hold := lockAccount(t, db.Pool, "acc-1")
	type result struct {
		r   billing.Receipt
		o   idem.Outcome
		err error
	}
	results := make([]result, n)
	delivered := make(chan struct{})
	go func() {
		defer close(delivered)
		idemtest.AtOnce(n, func(i int) {
			r, o, err := charge.Handle(ctx, msg)
			results[i] = result{r, o, err}
		})
	}()
	// One delivery waits on the account lock inside its transaction, the
	// other n-1 on its claim of the key.
	waitFor(t, func() bool { return waitingOnLocks(t, db, appName) == n }, "all %d deliveries to wait inside the database", n)
	hold.release()
	<-delivered

	var processed []billing.Receipt
	var duplicates int
	for _, r := range results {
		switch {
		case r.err != nil:
			t.Fatalf("Handle: %v", r.err)
		case r.o == idem.Processed:
			processed = append(processed, r.r)
		case r.o == idem.Duplicate:
			duplicates++
		}
	}
	if len(processed) != 1 || duplicates != n-1 {
		t.Fatalf("%d processed, %d duplicates; want 1 and %d", len(processed), duplicates, n-1)
	}
	for _, r := range results {
		if r.r != processed[0] {
			t.Errorf("a duplicate returned %+v, the first delivery %+v", r.r, processed[0])
		}
	}
	if got, want := chargeState(t, db, "ord-1"), (state{charges: 1, inbox: 1, balance: 750, outbox: 1}); got != want {
		t.Errorf("after %d deliveries: %+v, want %+v", n, got, want)
	}
}

// TestChargeCrashInsideTransaction kills (SIGKILL) a process in the middle of
// the handler's transaction: the charge row is written and the claim taken,
// the account update waits on a lock. Nothing may survive, and the
// redelivery must apply the charge exactly once.
func TestChargeCrashInsideTransaction(t *testing.T) {
	db := newDB(t)
	msg := billing.OrderPlaced{OrderID: "ord-2", AccountID: "acc-1", AmountCents: 100}

	hold := lockAccount(t, db.Pool, "acc-1")
	child := startChild(t, db, msg)
	waitFor(t, func() bool { return child.waitingOnLock(t, db) }, "the child's handler to wait on the account lock")
	child.kill(t)
	hold.release()
	child.waitGone(t, db)

	if got, want := chargeState(t, db, "ord-2"), (state{charges: 0, inbox: 0, balance: 1000}); got != want {
		t.Fatalf("after the crash: %+v, want nothing applied %+v", got, want)
	}
	charge := billing.NewChargeIdem(db.Pool, &billing.Service{})
	if _, o, err := charge.Handle(context.Background(), msg); err != nil || o != idem.Processed {
		t.Fatalf("redelivery: %v, %v; want Processed", o, err)
	}
	if got, want := chargeState(t, db, "ord-2"), (state{charges: 1, inbox: 1, balance: 900, outbox: 1}); got != want {
		t.Errorf("after the redelivery: %+v, want %+v", got, want)
	}
}

// TestChargeCrashAfterCommitBeforeAck kills a process after its delivery
// committed and before it could ack: the redelivery is a Duplicate with the
// stored receipt, and the charge is not applied again.
func TestChargeCrashAfterCommitBeforeAck(t *testing.T) {
	db := newDB(t)
	msg := billing.OrderPlaced{OrderID: "ord-3", AccountID: "acc-1", AmountCents: 300}

	child := startChild(t, db, msg)
	first := child.committed(t)
	child.kill(t)

	r, o, err := billing.NewChargeIdem(db.Pool, &billing.Service{}).Handle(context.Background(), msg)
	if err != nil || o != idem.Duplicate {
		t.Fatalf("redelivery: %v, %v; want Duplicate", o, err)
	}
	if r != first {
		t.Errorf("redelivery returned %+v, the crashed delivery committed %+v", r, first)
	}
	if got, want := chargeState(t, db, "ord-3"), (state{charges: 1, inbox: 1, balance: 700, outbox: 1}); got != want {
		t.Errorf("after the redelivery: %+v, want %+v", got, want)
	}
}

func TestChargeKeyReused(t *testing.T) {
	db := newDB(t)
	ctx := context.Background()
	charge := billing.NewChargeIdem(db.Pool, &billing.Service{})
	if _, _, err := charge.Handle(ctx, billing.OrderPlaced{OrderID: "ord-4", AccountID: "acc-1", AmountCents: 10}); err != nil {
		t.Fatal(err)
	}
	_, _, err := charge.Handle(ctx, billing.OrderPlaced{OrderID: "ord-4", AccountID: "acc-1", AmountCents: 99})
	if !errors.Is(err, idem.ErrKeyReused) {
		t.Fatalf("got %v, want ErrKeyReused", err)
	}
	if got, want := chargeState(t, db, "ord-4"), (state{charges: 1, inbox: 1, balance: 990, outbox: 1}); got != want {
		t.Errorf("%+v, want %+v", got, want)
	}
}

// TestChargeBusinessUniqueViolation: a charge for the order exists already
// (written by some other path), so the handler's INSERT violates the
// charges table's unique constraint. That is the handler's error, not a
// duplicate, and nothing is recorded in the inbox.
func TestChargeBusinessUniqueViolation(t *testing.T) {
	db := newDB(t)
	mustExec(t, db.Pool, `INSERT INTO charges (order_id, account_id, amount_cents) VALUES ('ord-5', 'acc-1', 1)`)
	_, o, err := billing.NewChargeIdem(db.Pool, &billing.Service{}).Handle(context.Background(),
		billing.OrderPlaced{OrderID: "ord-5", AccountID: "acc-1", AmountCents: 10})
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "23505" || pgErr.ConstraintName != "charges_order_id_key" {
		t.Fatalf("got %v, %v; want the charges unique violation", o, err)
	}
	if o == idem.Duplicate || errors.Is(err, idem.ErrInProgress) || errors.Is(err, idem.ErrKeyReused) {
		t.Errorf("a business unique violation was classified as %v / %v", o, err)
	}
	if got, want := chargeState(t, db, "ord-5"), (state{charges: 1, inbox: 0, balance: 1000}); got != want {
		t.Errorf("%+v, want %+v", got, want)
	}
}

func TestChargeHandlerErrorRollsBack(t *testing.T) {
	db := newDB(t)
	ctx := context.Background()
	charge := billing.NewChargeIdem(db.Pool, &billing.Service{CreditLimitCents: 0})
	msg := billing.OrderPlaced{OrderID: "ord-6", AccountID: "acc-1", AmountCents: 5000}
	if _, _, err := charge.Handle(ctx, msg); !errors.Is(err, billing.ErrInsufficientFunds) {
		t.Fatalf("got %v, want ErrInsufficientFunds", err)
	}
	if got, want := chargeState(t, db, "ord-6"), (state{charges: 0, inbox: 0, balance: 1000}); got != want {
		t.Fatalf("after the failed charge: %+v, want %+v", got, want)
	}
	mustExec(t, db.Pool, `UPDATE accounts SET balance_cents = 6000 WHERE id = 'acc-1'`)
	if _, o, err := charge.Handle(ctx, msg); err != nil || o != idem.Processed {
		t.Fatalf("redelivery: %v, %v; want Processed", o, err)
	}
}

func TestChargeInvalidKey(t *testing.T) {
	db := newDB(t)
	_, _, err := billing.NewChargeIdem(db.Pool, &billing.Service{}).Handle(context.Background(),
		billing.OrderPlaced{OrderID: "", AccountID: "acc-1", AmountCents: 10})
	if !errors.Is(err, idem.ErrInvalidKey) {
		t.Fatalf("got %v, want ErrInvalidKey", err)
	}
	if n := queryInt(t, db.Pool, `SELECT count(*) FROM idem_billing_charge`) + queryInt(t, db.Pool, `SELECT count(*) FROM charges`); n != 0 {
		t.Errorf("%d rows written for an invalid key", n)
	}
}

// TestBookPaymentCompositeKey: the key is (Provider, PaymentID); the same
// payment id from another provider is another message.
func TestBookPaymentCompositeKey(t *testing.T) {
	db := newDB(t)
	ctx := context.Background()
	book := billing.NewBookPaymentIdem(db.Pool, &billing.Service{})
	deliveries := []struct {
		msg  billing.PaymentReceived
		want idem.Outcome
	}{
		{billing.PaymentReceived{Provider: "stripe", PaymentID: "p-1", AccountID: "acc-1", AmountCents: 40}, idem.Processed},
		{billing.PaymentReceived{Provider: "stripe", PaymentID: "p-1", AccountID: "acc-1", AmountCents: 40}, idem.Duplicate},
		{billing.PaymentReceived{Provider: "adyen", PaymentID: "p-1", AccountID: "acc-1", AmountCents: 2}, idem.Processed},
		{billing.PaymentReceived{Provider: "adyen", PaymentID: "p-1", AccountID: "acc-1", AmountCents: 2}, idem.Duplicate},
	}
	for _, d := range deliveries {
		if o, err := book.Handle(ctx, &d.msg); err != nil || o != d.want {
			t.Fatalf("%s/%s: %v, %v; want %v", d.msg.Provider, d.msg.PaymentID, o, err, d.want)
		}
	}
	if _, err := book.Handle(ctx, nil); !errors.Is(err, idem.ErrInvalidKey) {
		t.Errorf("nil message: %v, want ErrInvalidKey", err)
	}
	if got := queryInt(t, db.Pool, `SELECT balance_cents FROM accounts WHERE id = 'acc-1'`); got != 1042 {
		t.Errorf("balance %d, want 1042", got)
	}
	if got := queryInt(t, db.Pool, `SELECT count(*) FROM idem_billing_payment`); got != 2 {
		t.Errorf("%d inbox rows, want 2", got)
	}
}

func TestOpenAccountUUIDKey(t *testing.T) {
	db := newDB(t)
	ctx := context.Background()
	open := billing.NewOpenAccountIdem(db.Pool)
	msg := billing.OpenAccountRequested{RequestID: uuid.New(), AccountID: "acc-2", Owner: "Grace"}
	a1, o1, err := open.Handle(ctx, msg)
	if err != nil || o1 != idem.Processed {
		t.Fatalf("first: %v, %v", o1, err)
	}
	a2, o2, err := open.Handle(ctx, msg)
	if err != nil || o2 != idem.Duplicate || a1 != a2 {
		t.Fatalf("second: %+v, %v, %v; want Duplicate with %+v", a2, o2, err, a1)
	}
	if _, _, err := open.Handle(ctx, billing.OpenAccountRequested{AccountID: "acc-3", Owner: "x"}); !errors.Is(err, idem.ErrInvalidKey) {
		t.Errorf("zero RequestID: %v, want ErrInvalidKey", err)
	}
}

func TestPurgeKeepsRecentRows(t *testing.T) {
	db := newDB(t)
	ctx := context.Background()
	charge := billing.NewChargeIdem(db.Pool, &billing.Service{CreditLimitCents: 1 << 40})
	for i := range 3 {
		if _, _, err := charge.Handle(ctx, billing.OrderPlaced{OrderID: fmt.Sprint("old-", i), AccountID: "acc-1", AmountCents: 1}); err != nil {
			t.Fatal(err)
		}
	}
	mustExec(t, db.Pool, `UPDATE idem_billing_charge SET created_at = now() - interval '31 days' WHERE key_order_id <> 'old-2'`)
	if n, err := charge.Purge(ctx); err != nil || n != 2 {
		t.Fatalf("Purge: %d, %v; want 2", n, err)
	}
}

// --- concurrency helpers ---

type accountLock struct {
	t  *testing.T
	tx pgx.Tx
}

// lockAccount takes the account's row lock in a transaction of its own, so
// that a handler's balance update waits inside its transaction.
func lockAccount(t *testing.T, pool *pgxpool.Pool, id string) *accountLock {
	t.Helper()
	tx, err := pool.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(context.Background(), `SELECT 1 FROM accounts WHERE id = $1 FOR UPDATE`, id); err != nil {
		t.Fatal(err)
	}
	l := &accountLock{t: t, tx: tx}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	return l
}

func (l *accountLock) release() {
	if err := l.tx.Rollback(context.Background()); err != nil {
		l.t.Fatal(err)
	}
}

// waitingOnLocks counts the sessions of the named pool that wait on a lock.
func waitingOnLocks(t *testing.T, db *idemtest.DB, appName string) int64 {
	return queryInt(t, db.Pool, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'`, appName)
}

// namedPool opens a pool on the test's schema whose sessions carry appName,
// so that pg_stat_activity tells them apart from every other test's.
func namedPool(t *testing.T, db *idemtest.DB, appName string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(withParam(t, db.URL, "application_name", appName))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = idemtest.MaxConns
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func withParam(t *testing.T, rawURL, name, value string) string {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set(name, value)
	u.RawQuery = q.Encode()
	return u.String()
}

func waitFor(t *testing.T, cond func() bool, what string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for "+what, args...)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// --- the crash child: a process that delivers one message ---

const (
	childEnv = "BILLING_CRASH_CHILD"
	childURL = "BILLING_CRASH_URL"
	childMsg = "BILLING_CRASH_MSG"
)

// crashChild delivers the message in BILLING_CRASH_MSG, reports the receipt
// on stdout once committed, and then waits to be killed before it "acks".
func crashChild() {
	ctx := context.Background()
	var msg billing.OrderPlaced
	if err := json.Unmarshal([]byte(os.Getenv(childMsg)), &msg); err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	pool, err := pgxpool.New(ctx, os.Getenv(childURL))
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	r, o, err := billing.NewChargeIdem(pool, &billing.Service{}).Handle(ctx, msg)
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	out, _ := json.Marshal(r)
	fmt.Printf("committed %s %s\n", o, out)
	select {} // killed here, before the ack
}

type child struct {
	cmd     *exec.Cmd
	out     *bufio.Scanner
	appName string
}

func startChild(t *testing.T, db *idemtest.DB, msg billing.OrderPlaced) *child {
	t.Helper()
	body, _ := json.Marshal(msg)
	c := &child{appName: "billing-crash-" + db.Schema}

	c.cmd = exec.Command(os.Args[0], "-test.run=^$")
	c.cmd.Env = append(os.Environ(), childEnv+"=1", childURL+"="+withParam(t, db.URL, "application_name", c.appName), childMsg+"="+string(body))
	c.cmd.Stderr = os.Stderr
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.cmd.Process.Kill(); _ = c.cmd.Wait() })
	c.out = bufio.NewScanner(stdout)
	return c
}

// committed waits for the child to report its committed delivery.
func (c *child) committed(t *testing.T) billing.Receipt {
	t.Helper()
	if !c.out.Scan() {
		t.Fatalf("child exited before committing: %v", c.out.Err())
	}
	line := c.out.Text()
	rest, ok := strings.CutPrefix(line, "committed processed ")
	if !ok {
		t.Fatalf("child: %s", line)
	}
	var r billing.Receipt
	if err := json.Unmarshal([]byte(rest), &r); err != nil {
		t.Fatal(err)
	}
	return r
}

func (c *child) waitingOnLock(t *testing.T, db *idemtest.DB) bool {
	return queryInt(t, db.Pool, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'`, c.appName) == 1
}

// kill sends SIGKILL: no deferred function, no rollback, no goodbye to the
// server; the connection just drops.
func (c *child) kill(t *testing.T) {
	t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err := c.cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child did not die of SIGKILL: %v", err)
	}
}

// waitGone waits until the server has noticed the dead child and ended its
// backend (rolling back its transaction).
func (c *child) waitGone(t *testing.T, db *idemtest.DB) {
	t.Helper()
	waitFor(t, func() bool {
		return queryInt(t, db.Pool, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, c.appName) == 0
	}, "the server to end the killed child's session")
}
