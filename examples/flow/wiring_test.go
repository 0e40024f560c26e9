package main

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/idemgen/idemgen/examples/billing"
	idemjs "github.com/idemgen/idemgen/idem/jetstream"
	"github.com/idemgen/idemgen/idem/kafka"
	"github.com/idemgen/idemgen/idem/rabbitmq"
	"github.com/idemgen/idemgen/idem/relay"
)

// readmeWiring is the wiring the README's Brokers section shows, line for
// line, so that it compiles; the flow's own wiring, with its names and
// options, is brokers.go.
func readmeWiring(ctx context.Context, pool *pgxpool.Pool, svc *billing.Service, amqpURL string, nc *nats.Conn, js natsjs.JetStream, brokers []string) error {
	var errs []error
	{
		go relay.New(pool, rabbitmq.NewPublisher(amqpURL)).Run(ctx)
		err := rabbitmq.Consume(ctx, amqpURL, rabbitmq.Topology{Queue: "billing.charge"}, billing.NewChargeIdem(pool, svc))
		errs = append(errs, err)
	}
	{
		go relay.New(pool, idemjs.NewPublisher(nc)).Run(ctx)
		err := idemjs.Consume(ctx, js, idemjs.Topology{Stream: "ORDERS", Consumer: "billing"}, billing.NewChargeIdem(pool, svc))
		errs = append(errs, err)
	}
	{
		go relay.New(pool, kafka.NewPublisher(brokers)).Run(ctx)
		err := kafka.Consume(ctx, brokers, "billing", []string{"billing.charge"}, billing.NewChargeIdem(pool, svc))
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// TestREADMEWiringCompiles pins the README's wiring at compile time.
func TestREADMEWiringCompiles(t *testing.T) {
	_ = readmeWiring
}
