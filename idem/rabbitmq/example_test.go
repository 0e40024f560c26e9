package rabbitmq_test

import (
	"context"
	"log"
	"os"
	"os/signal"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemgen/idemgen/idem/consumer"
	"github.com/idemgen/idemgen/idem/rabbitmq"
	"github.com/idemgen/idemgen/idem/relay"
)

// Example wires a consumer and a relay: the queue's topology declared at
// startup, deliveries handed to the handler's wrapper (here an idemimpl.Inbox;
// with idemgen, the generated constructor such as billing.NewChargeIdem(pool,
// svc)), and the outbox relayed to RabbitMQ with confirms.
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	const url = "amqp://guest:guest@127.0.0.1:5672/"
	top := rabbitmq.Topology{Queue: "billing.charge", RetryDelay: 5 * time.Second}

	// Opt-in: declare billing.charge, billing.charge.retry, billing.charge.dlx
	// and billing.charge.dlq (or have your tooling declare the same).
	conn, err := amqp.Dial(url)
	if err != nil {
		log.Fatal(err)
	}
	ch, err := conn.Channel()
	if err == nil {
		err = rabbitmq.Declare(ch, top)
	}
	conn.Close()
	if err != nil {
		log.Fatal(err)
	}

	// The relay publishes what handlers wrote to the outbox.
	pub := rabbitmq.NewPublisher(url)
	defer pub.Close()
	go func() {
		if err := relay.New(pool, pub).Run(ctx); err != nil {
			log.Print(err)
		}
	}()

	charge := chargeInbox(pool, nil) // billing.NewChargeIdem(pool, svc)
	if err := rabbitmq.Consume(ctx, url, top, charge, consumer.WithWorkers(8)); err != nil {
		log.Fatal(err)
	}
}
