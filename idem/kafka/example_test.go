package kafka_test

import (
	"context"
	"log"
	"os"
	"os/signal"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/idem/consumer"
	"github.com/idemgen/idemgen/idem/kafka"
	"github.com/idemgen/idemgen/idem/relay"
)

// Example wires a consumer and a relay: the records of billing.charge
// handed to the handler's wrapper (here an idemimpl.Inbox; with idemgen, the
// generated constructor such as billing.NewChargeIdem(pool, svc)), their
// offsets committed after the database commit, and the outbox relayed to
// Kafka with the stable id in the idem-message-id header.
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	brokers := []string{"127.0.0.1:9092"}

	// The relay publishes what handlers wrote to the outbox.
	pub := kafka.NewPublisher(brokers)
	defer pub.Close()
	go func() {
		if err := relay.New(pool, pub).Run(ctx); err != nil {
			log.Print(err)
		}
	}()

	charge := chargeInbox(pool, nil) // billing.NewChargeIdem(pool, svc)
	err = kafka.Consume(ctx, brokers, "billing", []string{"billing.charge"}, charge,
		consumer.WithWorkers(8), kafka.WithRetryDelay(5*time.Second))
	if err != nil {
		log.Fatal(err)
	}
}
