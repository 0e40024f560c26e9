package jetstream_test

import (
	"context"
	"log"
	"os"
	"os/signal"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgen/idemgen/idem/consumer"
	idemjs "github.com/idemgen/idemgen/idem/jetstream"
	"github.com/idemgen/idemgen/idem/relay"
)

// Example wires a consumer and a relay: the stream, the durable consumer and
// the dead-letter stream declared at startup, messages handed to the
// handler's wrapper (here an idemimpl.Inbox; with idemgen, the generated
// constructor such as billing.NewChargeIdem(pool, svc)), and the outbox
// relayed to JetStream with PubAcks.
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	nc, err := nats.Connect(nats.DefaultURL, nats.MaxReconnects(-1))
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	top := idemjs.Topology{Stream: "ORDERS", Subjects: []string{"orders.>"}, Consumer: "billing", AckWait: 30 * time.Second}

	// Opt-in: declare ORDERS, ORDERS_DLQ (on idem.dlq.ORDERS) and the
	// durable consumer billing (or have your tooling declare the same).
	if err := idemjs.Declare(ctx, js, top); err != nil {
		log.Fatal(err)
	}

	// The relay publishes what handlers wrote to the outbox; the stable id
	// becomes the Nats-Msg-Id.
	go func() {
		if err := relay.New(pool, idemjs.NewPublisher(nc)).Run(ctx); err != nil {
			log.Print(err)
		}
	}()

	charge := chargeInbox(pool, nil) // billing.NewChargeIdem(pool, svc)
	if err := idemjs.Consume(ctx, js, top, charge, consumer.WithWorkers(8)); err != nil {
		log.Fatal(err)
	}
}
