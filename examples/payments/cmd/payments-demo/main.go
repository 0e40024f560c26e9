// Command payments-demo runs the payments example against PostgreSQL and a
// payment provider it starts itself, a net/http server on loopback that
// charges once per Idempotency-Key. It applies the service's migrations (the
// claims table idemgen generated for Charge) in a fresh schema, delivers
// charges through the generated mode=external wrapper, and prints what
// happened and what a consumer does with each delivery (idem.ActionFor): a
// charge delivered three times; eight copies of one while a worker holds its
// claim; and a worker process killed with SIGKILL after its provider call and
// before its done, whose redelivery calls the provider again with the same
// key once the lease expired. The provider charges each order once. The
// schema is dropped when the demo ends, also on an error or an interrupt
// (SIGINT, SIGTERM); only a SIGKILL leaves it behind, as payments_demo_<hex>.
//
//	go run ./examples/payments/cmd/payments-demo [-db URL]
//
// The database is -db, else the one the tests use, found the same way
// (internal/testdb): IDEMGEN_TEST_DATABASE_URL, else database idemgen_test
// on the local server's socket, created if missing. DATABASE_URL is not read.
package main

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pressly/goose/v3"

	"github.com/idemgen/idemgen/examples/payments"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/internal/demo"
)

// lease is the demo's lease, shorter than the directive's 30s so that the
// redelivery after the killed worker does not wait long, and long enough
// that the redelivery right after the kill still finds the claim live on a
// loaded machine: the killed worker's last heartbeat left at least two
// thirds of it.
const lease = 3 * time.Second

func main() {
	if os.Getenv(workerEnv) != "" {
		killedWorker()
		return
	}
	demo.Main("payments-demo", "payments_demo_", run)
}

// run creates schema, runs the demo in it, printing to w, and drops the
// schema again, whatever happened.
func run(ctx context.Context, dbURL, schema string, w io.Writer) (err error) {
	pool, drop, err := openSchema(ctx, dbURL, schema, w)
	if err != nil {
		return err
	}
	defer func() {
		pool.Close()
		err = errors.Join(err, drop())
	}()
	provider, err := payments.StartProvider()
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, provider.Close()) }()
	svc := &payments.Service{ProviderURL: provider.URL()}
	charge := payments.NewChargeIdem(pool, svc, idem.WithLease(lease))

	out := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(out, "DELIVERY\tOUTCOME\tTHE CONSUMER\tRESULT OR ERROR")
	first := payments.ChargeRequested{OrderID: "ord-1", AmountCents: 1200, Currency: "EUR"}
	for _, label := range []string{"charge ord-1 1200 EUR", "the same message again", "and a third time"} {
		receipt, outcome, err := charge.Handle(ctx, first)
		report(out, label, outcome, receipt, err)
	}

	// Eight copies of one message while a worker holds its claim, held
	// between its provider call and its done.
	second := payments.ChargeRequested{OrderID: "ord-2", AmountCents: 300, Currency: "EUR"}
	arrived, release := make(chan struct{}), make(chan struct{})
	holding := payments.NewChargeIdem(pool, svc, idem.WithLease(lease), idem.WithBeforeComplete(func(context.Context) error {
		close(arrived)
		<-release
		return nil
	}))
	type delivery struct {
		receipt payments.Receipt
		outcome idem.Outcome
		err     error
	}
	held := make(chan delivery, 1)
	go func() {
		r, o, err := holding.Handle(ctx, second)
		held <- delivery{r, o, err}
	}()
	select {
	case <-arrived:
	case d := <-held:
		return fmt.Errorf("the holding worker did not hold: %v, %v", d.outcome, d.err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	inProgress, retries := 0, 0
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, err := charge.Handle(ctx, second)
			mu.Lock()
			defer mu.Unlock()
			if errors.Is(err, idem.ErrInProgress) {
				inProgress++
			}
			if idem.ActionFor(err) == idem.Retry {
				retries++
			}
		}()
	}
	wg.Wait()
	fmt.Fprintf(out, "charge ord-2 300 EUR, 8 copies while a worker holds it\t%d in progress\tretries %d later\tidem.ErrInProgress at once, no wait\n", inProgress, retries)
	close(release)
	d := <-held
	report(out, "the holding worker's done", d.outcome, d.receipt, d.err)

	// A worker process killed after its provider call, before its done.
	third := payments.ChargeRequested{OrderID: "ord-3", AmountCents: 700, Currency: "EUR"}
	killedAt, err := killWorker(ctx, dbURL, schema, provider.URL(), third)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "charge ord-3 700 EUR: its worker SIGKILLed\t-\t-\tafter its provider call, before done\n")
	receipt, outcome, err := charge.Handle(ctx, third)
	report(out, "redelivered at once", outcome, receipt, err)
	select {
	case <-time.After(time.Until(killedAt.Add(lease + 100*time.Millisecond))):
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	receipt, outcome, err = charge.Handle(ctx, third)
	report(out, fmt.Sprintf("redelivered after the lease (%s)", lease), outcome, receipt, err)
	if err := out.Flush(); err != nil {
		return err
	}

	fmt.Fprintf(w, "\nthe provider made %d charges in %d calls: every repeat came with the idempotency key of its order\n", provider.Charges(), provider.Calls())
	key := idem.ExternalKey("payments.charge", []any{third.OrderID})
	sameKey := 0
	for _, k := range provider.Keys() {
		if k == key {
			sameKey++
		}
	}
	fmt.Fprintf(w, "ord-3's key, idem.ExternalKey(\"payments.charge\", ord-3) = %s…, came %d times\n\n", key[:16], sameKey)

	rows, err := pool.Query(ctx, `SELECT key_order_id, status, attempts FROM idem_payments_charge ORDER BY key_order_id`)
	if err != nil {
		return err
	}
	table := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(table, "ORDER\tSTATUS\tATTEMPTS")
	for rows.Next() {
		var order, status string
		var attempts int
		if err := rows.Scan(&order, &status, &attempts); err != nil {
			return err
		}
		fmt.Fprintf(table, "%s\t%s\t%d\n", order, status, attempts)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	return table.Flush()
}

// report prints one delivery and what a consumer does with it, as
// idem.ActionFor says.
func report(out *tabwriter.Writer, label string, outcome idem.Outcome, receipt payments.Receipt, err error) {
	action := consumerDoes[idem.ActionFor(err)]
	if err != nil {
		fmt.Fprintf(out, "%s\terror\t%s\t%s\n", label, action, errorName(err))
		return
	}
	fmt.Fprintf(out, "%s\t%s\t%s\t%+v\n", label, outcome, action, receipt)
}

// errorName names the sentinel an error wraps, for the demo's table: the
// error's text carries the 64-character key.
func errorName(err error) string {
	for _, e := range []struct {
		err  error
		name string
	}{{idem.ErrInProgress, "idem.ErrInProgress"}, {idem.ErrClaimLost, "idem.ErrClaimLost"}, {idem.ErrKeyReused, "idem.ErrKeyReused"}} {
		if errors.Is(err, e.err) {
			return e.name
		}
	}
	return err.Error()
}

// consumerDoes words each action for the demo's table.
var consumerDoes = map[idem.Action]string{
	idem.Ack:        "acks",
	idem.Retry:      "retries",
	idem.DeadLetter: "dead-letters",
}

// The environment of the worker process killWorker starts: the same
// program, which delivers one charge and is killed before its done.
const (
	workerEnv      = "PAYMENTS_DEMO_WORKER"
	workerDB       = "PAYMENTS_DEMO_WORKER_DB"
	workerSchema   = "PAYMENTS_DEMO_WORKER_SCHEMA"
	workerProvider = "PAYMENTS_DEMO_WORKER_PROVIDER"
	workerOrder    = "PAYMENTS_DEMO_WORKER_ORDER"
)

// killWorker runs this program again as a worker that delivers msg, and kills
// it with SIGKILL once its handler called the provider and before the key is
// done. It returns when the worker was killed.
func killWorker(ctx context.Context, dbURL, schema, providerURL string, msg payments.ChargeRequested) (time.Time, error) {
	self, err := os.Executable()
	if err != nil {
		return time.Time{}, err
	}
	cmd := exec.CommandContext(ctx, self, "-test.run=^$")
	cmd.Env = append(os.Environ(), workerEnv+"=1", workerDB+"="+dbURL, workerSchema+"="+schema,
		workerProvider+"="+providerURL, workerOrder+"="+msg.OrderID)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return time.Time{}, err
	}
	if err := cmd.Start(); err != nil {
		return time.Time{}, err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	line := bufio.NewScanner(stdout)
	if !line.Scan() || line.Text() != "called" {
		return time.Time{}, fmt.Errorf("the worker stopped before its provider call: %q %v", line.Text(), line.Err())
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return time.Time{}, err
	}
	killedAt := time.Now()
	_ = cmd.Wait()
	return killedAt, nil
}

// killedWorker is the worker process of killWorker: it delivers the charge
// with the demo's lease, says "called" once the handler called the provider,
// and waits to be killed before the key is done.
func killedWorker() {
	ctx := context.Background()
	pool, err := demo.OpenPool(ctx, os.Getenv(workerDB), os.Getenv(workerSchema))
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	svc := &payments.Service{ProviderURL: os.Getenv(workerProvider)}
	charge := payments.NewChargeIdem(pool, svc, idem.WithLease(lease), idem.WithBeforeComplete(func(context.Context) error {
		fmt.Println("called")
		select {} // killed here
	}))
	_, _, err = charge.Handle(ctx, payments.ChargeRequested{OrderID: os.Getenv(workerOrder), AmountCents: 700, Currency: "EUR"})
	fmt.Println("error: the worker was not killed:", err)
	os.Exit(1)
}

// openSchema creates schema, applies the migrations with goose and returns a
// pool whose connections use the schema, and the function that drops it.
// Once the schema exists, it is dropped on every way out, errors included.
func openSchema(ctx context.Context, dbURL, schema string, w io.Writer) (*pgxpool.Pool, func() error, error) {
	return demo.OpenSchema(ctx, dbURL, schema, func(ctx context.Context, db *sql.DB) error {
		applied, err := demo.Up(ctx, db, payments.Migrations(), goose.DefaultTablename)
		if err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
		fmt.Fprintf(w, "%d migration applied with goose, in a fresh schema that is dropped at the end; the provider listens on loopback\n\n", applied)
		return nil
	})
}
