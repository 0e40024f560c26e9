// Command webhooks-server serves the webhooks example's API against
// PostgreSQL, to call with curl or stripe-go (docs/http.md). It applies the
// example's migrations in a fresh schema, books a payment pi_demo of 10000
// to refund, and serves until SIGINT or SIGTERM, then drops the schema:
//
//	POST /v2/refunds       JSON, Idempotency-Key, Authorization: Bearer sk_test_demo
//	POST /v1/refunds       the same as a form
//	POST /webhooks/stripe  Stripe events signed with whsec_demo
//
// With -amqp it also consumes Stripe events from the RabbitMQ queue -queue
// (declared if missing) into the same consumer as the webhook.
//
//	go run ./examples/webhooks/cmd/webhooks-server [-addr 127.0.0.1:8080] [-amqp URL] [-db URL]
//
// The database is -db, else the one the tests use, found the same way
// (internal/testdb): IDEMGEN_TEST_DATABASE_URL, else database idemgen_test
// on the local server's socket, created if missing. DATABASE_URL is not read.
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stripe/stripe-go/v82"

	"github.com/idemgen/idemgen/examples/webhooks"
	"github.com/idemgen/idemgen/idem/rabbitmq"
	"github.com/idemgen/idemgen/internal/demo"
)

// The demo's credentials.
const (
	demoAPIKey  = "sk_test_demo"
	demoClient  = "acct_demo"
	demoSecret  = "whsec_demo"
	demoPayment = "pi_demo"
)

var (
	addr    = flag.String("addr", "127.0.0.1:8080", "the `address` to listen on")
	amqpURL = flag.String("amqp", "", "RabbitMQ `URL` to consume Stripe events from as well (default: none)")
	queue   = flag.String("queue", "webhooks.stripe-events", "the RabbitMQ queue of the events, with -amqp")
)

func main() {
	demo.Main("webhooks-server", "webhooks_server_", func(ctx context.Context, dbURL, schema string, w io.Writer) error {
		return run(ctx, dbURL, schema, *addr, *amqpURL, *queue, w)
	})
}

// run serves the API on addr from a fresh schema until ctx ends, printing
// what a client needs to w, and drops the schema.
func run(ctx context.Context, dbURL, schema, addr, amqpURL, queue string, w io.Writer) (err error) {
	pool, drop, err := demo.OpenSchema(ctx, dbURL, schema, func(ctx context.Context, db *sql.DB) error {
		_, err := demo.Up(ctx, db, webhooks.Migrations(), "goose_db_version")
		return err
	})
	if err != nil {
		return err
	}
	defer func() {
		pool.Close()
		err = errors.Join(err, drop())
	}()
	if _, err := pool.Exec(ctx, `INSERT INTO payments (id, event, amount) VALUES ($1, 'evt_demo', 10000)`, demoPayment); err != nil {
		return fmt.Errorf("book the demo payment: %w", err)
	}
	svc := &webhooks.Service{APIKeys: map[string]string{demoAPIKey: demoClient}, WebhookSecret: demoSecret}

	ctx, stop := context.WithCancel(ctx)
	defer stop()
	consumed := make(chan error, 1)
	if amqpURL == "" {
		consumed <- nil
	} else {
		// The queue exists before the server says it is up, so that what is
		// published to it once it is up is routed.
		top := rabbitmq.Topology{Queue: queue}
		if err := declare(amqpURL, top); err != nil {
			return err
		}
		go func() {
			consumed <- webhooks.ConsumeEvents(ctx, amqpURL, top, webhooks.NewRecordEventIdem(pool, svc))
		}()
	}

	ln, err := net.Listen("tcp", addr)
	if err != nil {
		stop()
		return errors.Join(err, <-consumed)
	}
	srv := &http.Server{Handler: svc.Routes(pool), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Fprintf(w, "serving http://%s from schema %s\n", ln.Addr(), schema)
	fmt.Fprintf(w, "API key %s (client %s), webhook secret %s, Stripe API version %s, payment %s of 10000\n",
		demoAPIKey, demoClient, demoSecret, stripe.APIVersion, demoPayment)
	if amqpURL != "" {
		fmt.Fprintf(w, "consuming Stripe events from RabbitMQ queue %s\n", queue)
	}

	var serveErr error
	select {
	case serveErr = <-served:
	case <-ctx.Done():
	}
	stop()
	shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	shutdownErr := srv.Shutdown(shutdown)
	if serveErr == nil {
		serveErr = <-served
	}
	if errors.Is(serveErr, http.ErrServerClosed) {
		serveErr = nil
	}
	consumeErr := <-consumed
	if errors.Is(consumeErr, context.Canceled) {
		consumeErr = nil
	}
	return errors.Join(serveErr, shutdownErr, consumeErr)
}

// declare declares the events queue's topology.
func declare(url string, top rabbitmq.Topology) error {
	conn, err := amqp.Dial(url)
	if err != nil {
		return fmt.Errorf("connect to RabbitMQ: %w", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	return rabbitmq.Declare(ch, top)
}
