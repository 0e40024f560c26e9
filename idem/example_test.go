package idem_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/examples/billing"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/internal/relaytest"
)

// exampleDB is a fresh schema with examples/billing's migrations: its
// accounts and charges, its inboxes and the outbox.
func exampleDB(ctx context.Context) (*pgxpool.Pool, func()) {
	return relaytest.ExampleDB(ctx, billing.Migrations())
}

// openAccount opens the account the examples charge.
func openAccount(ctx context.Context, pool idem.DB, id string) {
	req := billing.OpenAccountRequested{RequestID: uuid.NewSHA1(uuid.NameSpaceURL, []byte(id)), AccountID: id, Owner: "Ada"}
	if _, _, err := billing.NewOpenAccountIdem(pool).Handle(ctx, req); err != nil {
		log.Fatal(err)
	}
}

// The caller acks a message exactly when Handle's error is nil; ActionFor
// says what to do otherwise.
func ExampleActionFor() {
	for _, err := range []error{
		nil,
		idem.ErrInProgress,
		idem.ErrKeyReused,
		idem.ErrInvalidKey,
		idem.ErrStale,
		errors.New("billing: insufficient funds"),
	} {
		fmt.Printf("%v: %v\n", err, idem.ActionFor(err))
	}
	// Output:
	// <nil>: ack
	// idem: another delivery of this key is in progress: retry
	// idem: key already used by a message with a different payload: dead-letter
	// idem: invalid key: dead-letter
	// idem: a newer version of the entity was processed already: ack
	// billing: insufficient funds: retry
}

// A handler that takes an *idem.Outbox publishes through it. Its messages are
// rows written in the handler's own commit, with stable ids, and a
// redelivery writes none again.
func ExampleOutbox() {
	ctx := context.Background()
	pool, done := exampleDB(ctx)
	defer done()
	openAccount(ctx, pool, "acct-1")

	// Charge calls out.Publish(billing.ChargeCompletedDestination, ...).
	charge := billing.NewChargeIdem(pool, &billing.Service{CreditLimitCents: 10_000})
	order := billing.OrderPlaced{OrderID: "order-1", AccountID: "acct-1", AmountCents: 1250}
	for range 2 {
		_, outcome, err := charge.Handle(ctx, order)
		if err != nil {
			log.Fatal(err)
		}
		var rows int
		var id string
		err = pool.QueryRow(ctx, `SELECT count(*), min(message_id::text) FROM idem_outbox`).Scan(&rows, &id)
		if err != nil {
			log.Fatal(err)
		}
		stable := id == idem.OutgoingMessageID("billing.charge", []any{order.OrderID}, 0)
		fmt.Printf("%v: %d outbox row, stable id: %v\n", outcome, rows, stable)
	}
	// Output:
	// processed: 1 outbox row, stable id: true
	// duplicate: 1 outbox row, stable id: true
}

// A Janitor purges each consumer's inbox rows past their retention (720h
// for billing.charge) in short batches.
func ExampleJanitor() {
	ctx := context.Background()
	pool, done := exampleDB(ctx)
	defer done()
	openAccount(ctx, pool, "acct-1")
	charge := billing.NewChargeIdem(pool, &billing.Service{CreditLimitCents: 10_000})
	for _, id := range []string{"order-1", "order-2"} {
		if _, _, err := charge.Handle(ctx, billing.OrderPlaced{OrderID: id, AccountID: "acct-1", AmountCents: 100}); err != nil {
			log.Fatal(err)
		}
	}
	// Age one key past the retention.
	if _, err := pool.Exec(ctx, `UPDATE idem_billing_charge SET created_at = now() - interval '31 days' WHERE key_order_id = 'order-1'`); err != nil {
		log.Fatal(err)
	}

	janitor, err := idem.NewJanitor(pool, []idem.Maintained{charge}, idem.WithJanitorInterval(time.Minute))
	if err != nil {
		log.Fatal(err)
	}
	report, err := janitor.RunOnce(ctx) // Run(ctx) runs a round every interval
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("purged from idem_billing_charge:", report.Purged["idem_billing_charge"])
	// Output:
	// purged from idem_billing_charge: 1
}
