// Command billing-demo runs the billing example against PostgreSQL: it applies
// the service's migrations (its own tables, the inboxes idemgen generated and
// the outbox chain it copied) in a fresh schema, delivers messages through
// the generated wrappers, duplicates included, and prints what happened and
// what a consumer does with each delivery (idem.ActionFor). An relay.Relay runs
// meanwhile and publishes the ChargeCompleted messages that Charge wrote to
// the outbox, through a publisher that records them; the demo prints them,
// with their ids, which are derived from the consumer and the order id and so
// the same on every run. Stock counts of the inventory example,
// whose migrations it applies too, show its stale-message guard: a count that
// arrives after a newer one is refused with idem.ErrStale, and acked. The
// schema is dropped when the demo ends, also on an error or an interrupt
// (SIGINT, SIGTERM); only a SIGKILL leaves it behind, as billing_demo_<hex>.
//
//	go run ./examples/billing/cmd/billing-demo [-db URL]
//
// The database is -db, else the one the tests use, found the same way
// (internal/testdb): IDEMGEN_TEST_DATABASE_URL, else database idemgen_test
// on the local server's socket, created if missing. DATABASE_URL is not read.
package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"slices"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pressly/goose/v3"

	"github.com/idemgen/idemgen/examples/billing"
	"github.com/idemgen/idemgen/examples/inventory"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/relay"
	"github.com/idemgen/idemgen/internal/demo"
)

func main() {
	demo.Main("billing-demo", "billing_demo_", run)
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

	// The relay publishes what the handlers write to the outbox, woken by
	// the NOTIFY that follows the commits that wrote rows, while the
	// deliveries run.
	published := &recorder{}
	relay := relay.New(pool, published, relay.WithID("billing-demo"),
		relay.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	relayCtx, stopRelay := context.WithCancel(ctx)
	relayDone := make(chan error, 1)
	go func() { relayDone <- relay.Run(relayCtx) }()
	defer func() {
		stopRelay()
		err = errors.Join(err, <-relayDone)
	}()

	out := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(out, "DELIVERY\tOUTCOME\tTHE CONSUMER\tRESULT OR ERROR")
	svc := &billing.Service{}
	open := billing.NewOpenAccountIdem(pool)
	book := billing.NewBookPaymentIdem(pool, svc)
	charge := billing.NewChargeIdem(pool, svc)
	// A missing migration stops the demo here, naming the file to apply,
	// rather than at the first delivery.
	for _, w := range []interface{ Check(context.Context) error }{open, book, charge} {
		if err := w.Check(ctx); err != nil {
			return err
		}
	}

	request := billing.OpenAccountRequested{RequestID: uuid.New(), AccountID: "acc-1", Owner: "Ada"}
	for _, label := range []string{"open account acc-1", "the same request again"} {
		account, outcome, err := open.Handle(ctx, request)
		report(out, label, outcome, account, err)
	}

	payment := &billing.PaymentReceived{Provider: "stripe", PaymentID: "pay-1", AccountID: "acc-1", AmountCents: 5000}
	for _, label := range []string{"payment stripe/pay-1 +5000", "the same payment again"} {
		outcome, err := book.Handle(ctx, payment)
		report(out, label, outcome, nil, err)
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
	acks := 0
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			receipt, outcome, err := charge.Handle(ctx, concurrent)
			mu.Lock()
			defer mu.Unlock()
			if idem.ActionFor(err) == idem.Ack {
				acks++
			}
			if err != nil {
				counts["error"]++
				return
			}
			counts[outcome.String()]++
			receipts[receipt] = true
		}()
	}
	wg.Wait()
	acked := fmt.Sprintf("acks %d of 8", acks)
	if acks == 8 {
		acked = "acks all 8"
	}
	fmt.Fprintf(out, "charge ord-2 -300, 8 copies at once\t%d processed, %d duplicate, %d error\t%s\t%d distinct receipt(s)\n",
		counts["processed"], counts["duplicate"], counts["error"], acked, len(receipts))

	reused := order
	reused.AmountCents = 9999
	_, outcome, err := charge.Handle(ctx, reused)
	report(out, "order ord-1 with another amount", outcome, nil, err)

	_, outcome, err = charge.Handle(ctx, billing.OrderPlaced{AccountID: "acc-1", AmountCents: 1})
	report(out, "an order without an id", outcome, nil, err)

	_, outcome, err = charge.Handle(ctx, billing.OrderPlaced{OrderID: "ord-3", AccountID: "acc-1", AmountCents: 100000})
	report(out, "charge ord-3 -100000", outcome, nil, err)

	// Stock counts of one SKU are numbered; count #1 arrives after #2. (Fixed
	// ids, so that the printed key is the same on every run.)
	count := inventory.NewApplyCountIdem(pool)
	outcome, err = count.Handle(ctx, inventory.StockCounted{CountID: uuid.MustParse("c0c0c0c0-0000-4000-8000-000000000002"), SKU: "sku-1", Seq: 2, OnHand: 40})
	report(out, "stock count #2 of sku-1: 40", outcome, nil, err)
	outcome, err = count.Handle(ctx, inventory.StockCounted{CountID: uuid.MustParse("c0c0c0c0-0000-4000-8000-000000000001"), SKU: "sku-1", Seq: 1, OnHand: 55})
	report(out, "count #1 of sku-1, arriving late", outcome, nil, err)
	if err := out.Flush(); err != nil {
		return err
	}

	var balance, charges int64
	if err := pool.QueryRow(ctx, `SELECT balance_cents, (SELECT count(*) FROM charges) FROM accounts WHERE id = 'acc-1'`).Scan(&balance, &charges); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nacc-1: balance %d cents after %d charges (5000 - 1200 - 300 = 3500: each message applied once)\n", balance, charges)
	var onHand, seq int64
	if err := pool.QueryRow(ctx, `SELECT on_hand, counted_seq FROM stock WHERE sku = 'sku-1'`).Scan(&onHand, &seq); err != nil {
		return err
	}
	fmt.Fprintf(w, "sku-1: %d on hand, from count #%d (the late count #1 changed nothing)\n", onHand, seq)

	// Two charges committed, so two messages; the duplicates wrote none.
	msgs, err := published.wait(ctx, relay, 2)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "\nthe relay published %d messages from the outbox (ids derived from consumer billing.charge and the order id):\n", len(msgs))
	for _, m := range msgs {
		fmt.Fprintf(w, "%s  %s  ordering key %s  attempt %d\n  %s\n", m.ID, m.Destination, m.OrderingKey, m.Attempt, m.Payload)
	}
	return nil
}

// recorder is the demo's idem.Publisher: it confirms every message and keeps
// it, where a real one sends it to a broker and waits for its confirm.
type recorder struct {
	mu   sync.Mutex
	msgs []idem.OutgoingMessage
}

// Publish records msgs, all confirmed.
func (r *recorder) Publish(_ context.Context, msgs []idem.OutgoingMessage) []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, msgs...)
	return make([]error, len(msgs))
}

// wait returns the messages published, once relay has published at least n
// and its outbox holds nothing pending.
func (r *recorder) wait(ctx context.Context, relay *relay.Relay, n int) ([]idem.OutgoingMessage, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		backlog, err := relay.Backlog(ctx)
		if err != nil {
			return nil, err
		}
		r.mu.Lock()
		msgs := slices.Clone(r.msgs)
		r.mu.Unlock()
		if backlog.Pending == 0 && len(msgs) >= n {
			return msgs, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("the relay published %d of %d messages (%d pending): %w", len(msgs), n, backlog.Pending, context.Cause(ctx))
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// report prints one delivery and what a consumer does with it, as
// idem.ActionFor says.
func report(out *tabwriter.Writer, label string, outcome idem.Outcome, result any, err error) {
	action := consumerDoes[idem.ActionFor(err)]
	switch {
	case err != nil:
		fmt.Fprintf(out, "%s\terror\t%s\t%v\n", label, action, err)
	case result == nil:
		fmt.Fprintf(out, "%s\t%s\t%s\t(no result)\n", label, outcome, action)
	default:
		fmt.Fprintf(out, "%s\t%s\t%s\t%+v\n", label, outcome, action, result)
	}
}

// consumerDoes words each action for the demo's table.
var consumerDoes = map[idem.Action]string{
	idem.Ack:        "acks",
	idem.Retry:      "retries",
	idem.DeadLetter: "dead-letters",
}

// openSchema creates schema, applies the migrations with goose and returns a
// pool whose connections use the schema, and the function that drops it.
// Once the schema exists, it is dropped on every way out, errors included.
func openSchema(ctx context.Context, dbURL, schema string, w io.Writer) (*pgxpool.Pool, func() error, error) {
	return demo.OpenSchema(ctx, dbURL, schema, func(ctx context.Context, db *sql.DB) error {
		applied := map[string]int{}
		// Each service keeps its own goose version table: the two sequences
		// number their migrations independently.
		for _, svc := range []struct {
			name       string
			migrations fs.FS
			table      string
		}{
			{"billing", billing.Migrations(), goose.DefaultTablename},
			{"inventory", inventory.Migrations(), "goose_db_version_inventory"},
		} {
			n, err := demo.Up(ctx, db, svc.migrations, svc.table)
			if err != nil {
				return fmt.Errorf("migrate %s: %w", svc.name, err)
			}
			applied[svc.name] = n
		}
		fmt.Fprintf(w, "%d billing and %d inventory migrations applied with goose, in a fresh schema that is dropped at the end\n\n",
			applied["billing"], applied["inventory"])
		return nil
	})
}
