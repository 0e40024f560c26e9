package relay_test

import (
	"context"
	"fmt"
	"log"

	"github.com/google/uuid"

	"github.com/idemgen/idemgen/examples/billing"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/internal/relaytest"
	"github.com/idemgen/idemgen/idem/relay"
)

// A relay publishes the committed outbox rows through a Publisher: here a
// function; in a service, a broker adapter's (rabbitmq.NewPublisher,
// jetstream.NewPublisher, kafka.NewPublisher).
func Example() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pool, done := relaytest.ExampleDB(ctx, billing.Migrations()) // billing's tables and the outbox
	defer done()

	open := billing.OpenAccountRequested{RequestID: uuid.NewSHA1(uuid.NameSpaceURL, []byte("acct-1")), AccountID: "acct-1", Owner: "Ada"}
	if _, _, err := billing.NewOpenAccountIdem(pool).Handle(ctx, open); err != nil {
		log.Fatal(err)
	}
	charge := billing.NewChargeIdem(pool, &billing.Service{CreditLimitCents: 10_000})
	if _, _, err := charge.Handle(ctx, billing.OrderPlaced{OrderID: "order-1", AccountID: "acct-1", AmountCents: 1250}); err != nil {
		log.Fatal(err)
	}

	pub := idem.PublisherFunc(func(ctx context.Context, msgs []idem.OutgoingMessage) []error {
		for _, m := range msgs {
			fmt.Printf("%s, attempt %d, ordering key %s\n", m.Destination, m.Attempt, m.OrderingKey)
		}
		cancel()                        // this example stops after one batch
		return make([]error, len(msgs)) // nil: each message confirmed
	})
	if err := relay.New(pool, pub).Run(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// billing.charge-completed, attempt 1, ordering key acct-1
}
