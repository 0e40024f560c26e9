// Command billing-demo runs the billing example against PostgreSQL: it applies
// the service's migrations (its own tables and the inboxes idemgen generated)
// in a fresh schema, delivers messages through the generated wrappers,
// duplicates included, and prints what happened and what a consumer would do
// with each delivery.
//
//	go run ./examples/billing/cmd/billing-demo -db 'postgres:///postgres?host=/var/run/postgresql'
//
// The database defaults to $DATABASE_URL. The demo works in the schema
// billing_demo, which it drops and recreates on every run.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"sync"
	"text/tabwriter"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/idemgen/idemgen/examples/billing"
	"github.com/idemgen/idemgen/idem"
)

const schema = "billing_demo"

func main() {
	dbURL := flag.String("db", os.Getenv("DATABASE_URL"), "PostgreSQL URL (default $DATABASE_URL)")
	flag.Parse()
	if *dbURL == "" {
		fmt.Fprintln(os.Stderr, "billing-demo: no database: pass -db URL or set DATABASE_URL, e.g. -db 'postgres:///postgres?host=/var/run/postgresql'")
		os.Exit(2)
	}
	if err := run(context.Background(), *dbURL); err != nil {
		fmt.Fprintln(os.Stderr, "billing-demo:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, dbURL string) error {
	pool, err := openSchema(ctx, dbURL)
	if err != nil {
		return err
	}
	defer pool.Close()

	out := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	defer out.Flush()
	fmt.Fprintln(out, "DELIVERY\tOUTCOME\tTHE CONSUMER\tRESULT OR ERROR")

	svc := &billing.Service{}
	open := billing.NewOpenAccountIdem(pool)
	book := billing.NewBookPaymentIdem(pool, svc)
	charge := billing.NewChargeIdem(pool, svc)

	request := billing.OpenAccountRequested{RequestID: uuid.New(), AccountID: "acc-1", Owner: "Ada"}
	for _, label := range []string{"open account acc-1", "the same request again"} {
		account, outcome, err := open.Handle(ctx, request)
		report(out, label, outcome, account, err)
	}

	payment := &billing.PaymentReceived{Provider: "stripe", PaymentID: "pay-1", AccountID: "acc-1", AmountCents: 5000}
	for _, label := range []string{"payment stripe/pay-1 +5000", "the same payment again"} {
		outcome, err := book.Handle(ctx, payment)
		report(out, label, outcome, "", err)
	}

	order := billing.OrderPlaced{OrderID: "ord-1", AccountID: "acc-1", AmountCents: 1200}
	for _, label := range []string{"charge ord-1 -1200", "the same order again"} {
		receipt, outcome, err := charge.Handle(ctx, order)
		report(out, label, outcome, receipt, err)
	}

	// Eight copies of one message at once, as after a visibility timeout.
	concurrent := billing.OrderPlaced{OrderID: "ord-2", AccountID: "acc-1", AmountCents: 300}
	var wg sync.WaitGroup
	var mu sync.Mutex
	counts := map[string]int{}
	receipts := map[billing.Receipt]bool{}
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			receipt, outcome, err := charge.Handle(ctx, concurrent)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				counts["error"]++
				return
			}
			counts[outcome.String()]++
			receipts[receipt] = true
		}()
	}
	wg.Wait()
	fmt.Fprintf(out, "charge ord-2 -300, 8 copies at once\t%d processed, %d duplicate, %d error\tacks all 8\t%d distinct receipt(s)\n",
		counts["processed"], counts["duplicate"], counts["error"], len(receipts))

	reused := order
	reused.AmountCents = 9999
	_, outcome, err := charge.Handle(ctx, reused)
	report(out, "order ord-1 with another amount", outcome, "", err)

	_, outcome, err = charge.Handle(ctx, billing.OrderPlaced{AccountID: "acc-1", AmountCents: 1})
	report(out, "an order without an id", outcome, "", err)

	_, outcome, err = charge.Handle(ctx, billing.OrderPlaced{OrderID: "ord-3", AccountID: "acc-1", AmountCents: 100000})
	report(out, "charge ord-3 -100000", outcome, "", err)
	out.Flush()

	var balance, charges int64
	if err := pool.QueryRow(ctx, `SELECT balance_cents, (SELECT count(*) FROM charges) FROM accounts WHERE id = 'acc-1'`).Scan(&balance, &charges); err != nil {
		return err
	}
	fmt.Printf("\nacc-1: balance %d cents after %d charges (5000 - 1200 - 300 = 3500: each message applied once)\n", balance, charges)
	return nil
}

// report prints one delivery and what a consumer does with it: ack exactly
// when err is nil; otherwise the error says whether to retry or dead-letter.
func report(out *tabwriter.Writer, label string, outcome idem.Outcome, result any, err error) {
	if err == nil {
		fmt.Fprintf(out, "%s\t%s\tacks\t%+v\n", label, outcome, result)
		return
	}
	action := "nacks: retried"
	switch {
	case errors.Is(err, idem.ErrKeyReused), errors.Is(err, idem.ErrInvalidKey):
		action = "dead-letters"
	case errors.Is(err, idem.ErrInProgress), errors.Is(err, idem.ErrRetryable):
		action = "nacks with a delay"
	}
	fmt.Fprintf(out, "%s\terror\t%s\t%v\n", label, action, err)
}

// openSchema recreates the demo schema, applies the migrations with goose and
// returns a pool whose connections use the schema.
func openSchema(ctx context.Context, dbURL string) (*pgxpool.Pool, error) {
	admin, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	if _, err := admin.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE; CREATE SCHEMA "+schema); err != nil {
		return nil, fmt.Errorf("create schema %s: %w", schema, err)
	}

	u, err := url.Parse(dbURL)
	if err != nil {
		return nil, err
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	pool, err := pgxpool.New(ctx, u.String())
	if err != nil {
		return nil, err
	}
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	provider, err := goose.NewProvider(goose.DialectPostgres, db, billing.Migrations())
	if err != nil {
		pool.Close()
		return nil, err
	}
	results, err := provider.Up(ctx)
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("migrate: %w", err)
	}
	fmt.Printf("schema %s: applied %d migrations with goose\n\n", schema, len(results))
	return pool, nil
}
