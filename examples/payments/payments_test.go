package payments_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/examples/payments"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemtest"
)

// These tests deliver charges through the generated wrapper against a real
// PostgreSQL and the example's provider, a net/http server on loopback that
// deduplicates by the Idempotency-Key header: redeliveries, concurrent
// copies during a live claim, a declined charge, and a worker process killed
// with SIGKILL between its provider call and its done.

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		killedWorker()
		return
	}
	os.Exit(m.Run())
}

func startProvider(t *testing.T) *payments.Provider {
	t.Helper()
	p, err := payments.StartProvider()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// row returns the status and attempts of the order's claim.
func row(t *testing.T, pool *pgxpool.Pool, orderID string) (status string, attempts int) {
	t.Helper()
	err := pool.QueryRow(context.Background(), `SELECT status, attempts FROM idem_payments_charge WHERE key_order_id = $1`, orderID).Scan(&status, &attempts)
	if err != nil {
		t.Fatal(err)
	}
	return status, attempts
}

func wantKeys(t *testing.T, p *payments.Provider, orderID string, n int) {
	t.Helper()
	want := idem.ExternalKey("payments.charge", []any{orderID})
	keys := p.Keys()
	if len(keys) != n {
		t.Fatalf("the provider received %d keys, want %d: %q", len(keys), n, keys)
	}
	for _, k := range keys {
		if k != want {
			t.Fatalf("the provider received the key %q, want %q = idem.ExternalKey(payments.charge, %s)", k, want, orderID)
		}
	}
}

// The migrations go down to 0 and up again, as CI's goose round trip does.
func TestMigrationsGoDownAndUpAgain(t *testing.T) {
	db := idemtest.New(t, payments.Migrations())
	ctx := context.Background()
	p := db.Migrations(t, payments.Migrations())
	if _, err := p.DownTo(ctx, 0); err != nil {
		t.Fatalf("down to 0: %v", err)
	}
	var tables int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename <> 'goose_db_version'`, db.Schema).Scan(&tables); err != nil || tables != 0 {
		t.Fatalf("%d tables left after down to 0 (%v)", tables, err)
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatalf("up again: %v", err)
	}
}

// A charge delivered three times is charged once; the redeliveries get the
// stored receipt without calling the provider.
func TestRedeliveriesChargeOnce(t *testing.T) {
	db := idemtest.New(t, payments.Migrations())
	p := startProvider(t)
	charge := payments.NewChargeIdem(db.Pool, &payments.Service{ProviderURL: p.URL()})
	msg := payments.ChargeRequested{OrderID: "ord-1", AmountCents: 1200, Currency: "EUR"}

	var first payments.Receipt
	for i, want := range []idem.Outcome{idem.Processed, idem.Duplicate, idem.Duplicate} {
		r, outcome, err := charge.Handle(context.Background(), msg)
		if err != nil || outcome != want {
			t.Fatalf("delivery %d: %v, %v; want %v", i+1, outcome, err, want)
		}
		if i == 0 {
			first = r
		} else if r != first {
			t.Fatalf("delivery %d: receipt %+v, want the stored %+v", i+1, r, first)
		}
	}
	if p.Charges() != 1 || p.Calls() != 1 {
		t.Fatalf("provider: %d charges in %d calls; want 1 in 1", p.Charges(), p.Calls())
	}
	wantKeys(t, p, "ord-1", 1)
	if status, attempts := row(t, db.Pool, "ord-1"); status != "done" || attempts != 1 {
		t.Fatalf("row: %s, attempts %d; want done, 1", status, attempts)
	}
	t.Logf("3 deliveries: 1 processed, 2 duplicate; provider: %d charge in %d call", p.Charges(), p.Calls())
}

// While one worker holds the claim (held between its provider call and its
// done), 16 copies of the message get idem.ErrInProgress at once; after done,
// 16 more are duplicates with the stored receipt.
func TestConcurrentCopiesDuringClaim(t *testing.T) {
	const copies = 16
	db := idemtest.New(t, payments.Migrations())
	p := startProvider(t)
	svc := &payments.Service{ProviderURL: p.URL()}
	arrived, release := make(chan struct{}), make(chan struct{})
	holding := payments.NewChargeIdem(db.Pool, svc, idem.WithBeforeComplete(func(ctx context.Context) error {
		close(arrived)
		<-release
		return nil
	}))
	charge := payments.NewChargeIdem(db.Pool, svc)
	msg := payments.ChargeRequested{OrderID: "ord-2", AmountCents: 300, Currency: "EUR"}

	type delivery struct {
		r   payments.Receipt
		o   idem.Outcome
		err error
	}
	held := make(chan delivery, 1)
	go func() {
		r, o, err := holding.Handle(context.Background(), msg)
		held <- delivery{r, o, err}
	}()
	<-arrived

	deliver := func() []delivery {
		out := make([]delivery, copies)
		var wg sync.WaitGroup
		for i := range copies {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				r, o, err := charge.Handle(ctx, msg)
				out[i] = delivery{r, o, err}
			}()
		}
		wg.Wait()
		return out
	}
	start := time.Now()
	for i, d := range deliver() {
		if !errors.Is(d.err, idem.ErrInProgress) || idem.ActionFor(d.err) != idem.Retry {
			t.Fatalf("copy %d during the claim: %v, %v; want idem.ErrInProgress (retry)", i, d.o, d.err)
		}
	}
	during := time.Since(start)
	close(release)
	first := <-held
	if first.err != nil || first.o != idem.Processed {
		t.Fatalf("the holding worker: %v, %v; want processed", first.o, first.err)
	}
	for i, d := range deliver() {
		if d.err != nil || d.o != idem.Duplicate || d.r != first.r {
			t.Fatalf("copy %d after done: %+v, %v, %v; want duplicate %+v", i, d.r, d.o, d.err, first.r)
		}
	}
	if p.Charges() != 1 || p.Calls() != 1 {
		t.Fatalf("provider: %d charges in %d calls; want 1 in 1", p.Charges(), p.Calls())
	}
	t.Logf("%d copies during the claim: all ErrInProgress in %v; %d after done: all duplicate; provider: %d charge in %d call",
		copies, during.Round(time.Millisecond), copies, p.Charges(), p.Calls())
}

// A declined charge is the handler's error: the claim is released for the
// retry (attempts + 1), nothing is stored, and the consumer retries.
func TestDeclinedChargeReleasesClaim(t *testing.T) {
	db := idemtest.New(t, payments.Migrations())
	p := startProvider(t)
	p.MaxAmountCents = 1000
	charge := payments.NewChargeIdem(db.Pool, &payments.Service{ProviderURL: p.URL()})
	msg := payments.ChargeRequested{OrderID: "ord-3", AmountCents: 5000, Currency: "EUR"}
	for attempt := 1; attempt <= 2; attempt++ {
		_, _, err := charge.Handle(context.Background(), msg)
		if !errors.Is(err, payments.ErrDeclined) || idem.ActionFor(err) != idem.Retry {
			t.Fatalf("attempt %d: %v; want payments.ErrDeclined, retried", attempt, err)
		}
		if status, attempts := row(t, db.Pool, "ord-3"); status != "released" || attempts != attempt+1 {
			t.Fatalf("after attempt %d: %s, attempts %d; want released, %d", attempt, status, attempts, attempt+1)
		}
	}
	if p.Charges() != 0 || p.Calls() != 2 {
		t.Fatalf("provider: %d charges in %d calls; want 0 in 2", p.Charges(), p.Calls())
	}
}

// A worker process killed with SIGKILL after its provider call and before
// done leaves its claim running; a redelivery while the lease lives is
// idem.ErrInProgress, and the one after it expired takes the claim over,
// calls the provider again with the same key, gets the same charge, and
// records it done with attempts = 2: the provider charged once.
func TestKilledWorkerChargesOnce(t *testing.T) {
	const lease = time.Second
	db := idemtest.New(t, payments.Migrations())
	p := startProvider(t)
	msg := payments.ChargeRequested{OrderID: "ord-4", AmountCents: 700, Currency: "EUR"}

	w := exec.Command(os.Args[0], "-test.run=^$")
	w.Env = append(os.Environ(), childEnv+"=1", childURL+"="+db.URL, childProvider+"="+p.URL(), childOrder+"="+msg.OrderID)
	w.Stderr = os.Stderr
	stdout, err := w.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Process.Kill(); _ = w.Wait() })
	out := bufio.NewScanner(stdout)
	if !out.Scan() {
		t.Fatalf("the worker exited before its provider call: %v", out.Err())
	}
	if out.Text() != "called" {
		t.Fatalf("worker: %s", out.Text())
	}
	chargeID, charged := p.ChargeFor(idem.ExternalKey("payments.charge", []any{msg.OrderID}))
	if !charged || p.Calls() != 1 {
		t.Fatalf("the worker reported its call, but the provider made no charge for its key (%d calls)", p.Calls())
	}
	killedAt := time.Now()
	if err := w.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = w.Wait()
	if status, attempts := row(t, db.Pool, msg.OrderID); status != "running" || attempts != 1 {
		t.Fatalf("after the kill: %s, attempts %d; want running, 1", status, attempts)
	}

	charge := payments.NewChargeIdem(db.Pool, &payments.Service{ProviderURL: p.URL()}, idem.WithLease(lease))
	if _, _, err := charge.Handle(context.Background(), msg); time.Since(killedAt) < lease && !errors.Is(err, idem.ErrInProgress) {
		t.Fatalf("a redelivery while the dead worker's lease lives: %v; want idem.ErrInProgress", err)
	}
	time.Sleep(time.Until(killedAt.Add(lease + 100*time.Millisecond)))
	r, outcome, err := charge.Handle(context.Background(), msg)
	if err != nil || outcome != idem.Processed {
		t.Fatalf("the redelivery after the lease: %v, %v; want processed", outcome, err)
	}
	if r.ChargeID != chargeID {
		t.Fatalf("the redelivery got charge %s, the killed worker %s: the provider charged twice", r.ChargeID, chargeID)
	}
	if p.Charges() != 1 || p.Calls() != 2 {
		t.Fatalf("provider: %d charges in %d calls; want 1 in 2", p.Charges(), p.Calls())
	}
	wantKeys(t, p, msg.OrderID, 2)
	if status, attempts := row(t, db.Pool, msg.OrderID); status != "done" || attempts != 2 {
		t.Fatalf("after the redelivery: %s, attempts %d; want done, 2", status, attempts)
	}
	t.Logf("killed after the call (charge %s); redelivery after the lease: processed, charge %s; provider: %d charge in %d calls with one key; row done, attempts 2",
		chargeID, r.ChargeID, p.Charges(), p.Calls())
}

const (
	childEnv      = "PAYMENTS_KILLED_WORKER"
	childURL      = "PAYMENTS_KILLED_WORKER_DB"
	childProvider = "PAYMENTS_KILLED_WORKER_PROVIDER"
	childOrder    = "PAYMENTS_KILLED_WORKER_ORDER"
)

// killedWorker delivers the charge of PAYMENTS_KILLED_WORKER_ORDER with a
// lease of a second; once the handler called the provider, and before the
// key is done, it says so and waits to be killed.
func killedWorker() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv(childURL))
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	svc := &payments.Service{ProviderURL: os.Getenv(childProvider)}
	charge := payments.NewChargeIdem(pool, svc, idem.WithLease(time.Second), idem.WithBeforeComplete(func(ctx context.Context) error {
		fmt.Println("called")
		select {} // killed here, before done
	}))
	_, _, err = charge.Handle(ctx, payments.ChargeRequested{OrderID: os.Getenv(childOrder), AmountCents: 700, Currency: "EUR"})
	fmt.Println("error: the worker was not killed:", err)
	os.Exit(1)
}
