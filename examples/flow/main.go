// Command flow runs the end-to-end example on a real broker: orders
// published, each several times (an order service whose publish is retried),
// → billing consumes them with the generated wrapper of billing.Charge, which
// writes ChargeCompleted to the outbox in the charge's transaction → an
// relay.Relay publishes it with the broker's confirms, its stable id as the
// broker's message id → a notifications consumer applies each ChargeCompleted
// once (notifications.NotifyChargeCompleted, keyed on that id). It prints
// the counts and exits 0 only when they are exact: one charge, one relayed
// message and one notification per order, every other delivery a Duplicate,
// nothing left in a queue, stream, topic or dead-letter destination.
//
//	go run ./examples/flow -broker rabbitmq
//	go run ./examples/flow -broker jetstream
//	go run ./examples/flow -broker kafka
//
// RabbitMQ is -amqp (default $IDEMGEN_TEST_AMQP_URL, else
// amqp://guest:guest@127.0.0.1:5672/), NATS with JetStream is -nats (default
// $IDEMGEN_TEST_NATS_URL, else nats://127.0.0.1:4222; a cluster's servers
// comma-separated, with -replicas 3 for replicated streams); Kafka is an
// in-process kfake cluster. The run's queues, streams, topics and groups are
// named flow-<hex>.… and deleted at the end. The database is -db, else the
// one the tests use, found as they find it (internal/testdb); the run works
// in a fresh schema, flow_<hex>, dropped at the end, also on an error or an
// interrupt.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/idemgen/idemgen/internal/testdb"
)

// Options of a run.
type Options struct {
	Broker      string
	AMQPURL     string
	NATSURL     string
	Replicas    int
	DBURL       string
	Orders      int
	Copies      int
	Timeout     time.Duration
	LogLevel    slog.Level
	Log, Output io.Writer

	id string // the run's suffix (default: a fresh one), for tests
}

func main() {
	o := Options{Log: os.Stderr, Output: os.Stdout, LogLevel: slog.LevelWarn}
	flag.StringVar(&o.Broker, "broker", "", "the `broker`: "+strings.Join(brokerNames, ", "))
	flag.StringVar(&o.AMQPURL, "amqp", envOr("IDEMGEN_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/"), "RabbitMQ `URL`")
	flag.StringVar(&o.NATSURL, "nats", envOr("IDEMGEN_TEST_NATS_URL", "nats://127.0.0.1:4222"), "NATS `URL` (with JetStream); a cluster's servers comma-separated")
	flag.IntVar(&o.Replicas, "replicas", 1, "with -broker jetstream: how many servers of the cluster hold each of the run's streams")
	flag.StringVar(&o.DBURL, "db", "", "PostgreSQL `URL` (default: $IDEMGEN_TEST_DATABASE_URL, else database idemgen_test on the local socket, created if missing)")
	flag.IntVar(&o.Orders, "orders", 10, "how many orders to publish")
	flag.IntVar(&o.Copies, "copies", 3, "how many times each order is published")
	flag.DurationVar(&o.Timeout, "timeout", time.Minute, "how long the run may take")
	verbose := flag.Bool("v", false, "log what the consumers and the relay do (info level)")
	flag.Parse()
	if *verbose {
		o.LogLevel = slog.LevelInfo
	}
	if flag.NArg() > 0 || o.Broker == "" || o.Orders < 1 || o.Copies < 1 {
		fmt.Fprintln(os.Stderr, "usage: go run ./examples/flow -broker rabbitmq|jetstream|kafka [-orders N] [-copies N]")
		flag.PrintDefaults()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		// After the first signal the run stops and cleans up; a second one
		// kills it.
		<-ctx.Done()
		stop()
	}()
	if _, err := Run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "flow:", err)
		os.Exit(1)
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// newEndpoint is where o's broker is, with a fresh prefix for the run's
// names.
func newEndpoint(o Options, prefix string) Endpoint {
	e := Endpoint{Broker: o.Broker, Prefix: prefix}
	switch o.Broker {
	case "rabbitmq":
		e.URL = o.AMQPURL
	case "jetstream":
		e.URL, e.Replicas = o.NATSURL, o.Replicas
	}
	return e
}

// unique returns a fresh hex suffix for the run's names.
func unique() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Run runs the flow as o says, prints the counts to o.Output and returns
// them; the error is not nil when they are not exact.
func Run(ctx context.Context, o Options) (c Counts, err error) {
	if o.DBURL == "" {
		if o.DBURL, err = testdb.Find(ctx, testdb.Options{Note: func(msg string) { fmt.Fprintln(o.Log, "flow:", msg) }}); err != nil {
			return c, fmt.Errorf("find the database (or pass -db URL): %w", err)
		}
	}
	id := o.id
	if id == "" {
		id = unique()
	}
	log := slog.New(slog.NewTextHandler(o.Log, &slog.HandlerOptions{Level: o.LogLevel}))
	f, err := Open(ctx, o.DBURL, "flow_"+id, newEndpoint(o, "flow-"+id), log)
	if err != nil {
		return c, err
	}
	defer func() { err = errors.Join(err, f.Close()) }()
	fmt.Fprintf(o.Output, "%s: schema %s; %s %s.*\n", o.Broker, f.Schema, topologyWords[o.Broker], f.Endpoint.Prefix)
	if err := f.PublishOrders(ctx, o.Orders, o.Copies); err != nil {
		return c, err
	}
	c, err = f.Process(ctx, Expect{Orders: o.Orders, BillingProcessed: o.Orders, BillingDuplicates: o.Orders * (o.Copies - 1)}, o.Timeout)
	fmt.Fprintf(o.Output, "%s: %s\n", o.Broker, c.Line(o.Copies))
	if err != nil {
		return c, fmt.Errorf("the counts are not exact: %w", err)
	}
	fmt.Fprintf(o.Output, "%s: exact: each order charged once, relayed once, notified once; every other delivery a duplicate; nothing left over\n", o.Broker)
	return c, nil
}

// topologyWords say what the run's names are on each broker.
var topologyWords = map[string]string{
	"rabbitmq":  "queues",
	"jetstream": "streams and subjects",
	"kafka":     "topics and groups on an in-process kfake cluster,",
}

// Line is the counts on one line.
func (c Counts) Line(copies int) string {
	return fmt.Sprintf("orders published %d (%dx each), charges %d, ChargeCompleted relayed %d, notifications applied %d, duplicates seen %d (billing %d, notifications %d)",
		c.Published, copies, c.Charges, c.Relayed, c.Notifications, c.Duplicates(), c.BillingDuplicates, c.NotificationDuplicates)
}
