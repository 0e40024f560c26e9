package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/examples/billing"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemtest"
	"github.com/idemgen/idemgen/idem/idemtest/brokertest"
	"github.com/idemgen/idemgen/internal/demo"
)

// These tests run the flow against real RabbitMQ and NATS servers (the
// ones brokertest finds: IDEMGEN_TEST_AMQP_URL and IDEMGEN_TEST_NATS_URL,
// else the local ones, else throwaway servers it starts from the machine's
// rabbitmq-server and nats-server), an in-process kfake cluster for Kafka,
// and the test database.

func TestMain(m *testing.M) {
	if cfg := os.Getenv(childEnv); cfg != "" {
		killedChild(cfg)
		return
	}
	os.Exit(brokertest.Main(m))
}

// options are the command's options for broker in a test: its servers,
// the test database, the consumers' warnings in the test log.
func options(t *testing.T, broker string) Options {
	log := idemtest.LogWriter(t)
	o := Options{
		Broker:   broker,
		DBURL:    idemtest.DatabaseURL(t),
		Timeout:  time.Minute,
		LogLevel: slog.LevelWarn,
		Log:      log,
		Output:   log,
	}
	switch broker {
	case "rabbitmq":
		o.AMQPURL = brokertest.RabbitMQURL(t)
	case "jetstream":
		o.NATSURL = brokertest.NATSURL(t)
	}
	return o
}

// TestFlowPublishedThreeTimes runs the command's flow on each broker: 5
// orders, each published 3 times (a producer's retries): 5 charges, 5
// ChargeCompleted relayed, 5 notifications, 10 duplicates, and the schema
// gone afterwards.
func TestFlowPublishedThreeTimes(t *testing.T) {
	for _, broker := range brokerNames {
		t.Run(broker, func(t *testing.T) {
			t.Parallel()
			o := options(t, broker)
			o.Orders, o.Copies, o.id = 5, 3, unique()
			c, err := Run(context.Background(), o)
			t.Logf("%s: published %dx%d, charges %d, relayed %d, notifications %d, duplicates %d",
				broker, o.Orders, o.Copies, c.Charges, c.Relayed, c.Notifications, c.Duplicates())
			if err != nil {
				t.Fatal(err)
			}
			want := Counts{Published: 15, Charges: 5, Relayed: 5, Notifications: 5, BillingDuplicates: 10}
			if c != want {
				t.Fatalf("counts %+v; want %+v", c, want)
			}
			if schemaExists(t, o.DBURL, "flow_"+o.id) {
				t.Errorf("the run left its schema flow_%s behind", o.id)
			}
		})
	}
}

// schemaExists reports whether the schema is in the database.
func schemaExists(t *testing.T, dbURL, schema string) bool {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, schema).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	return exists
}

// TestFlowKilledAfterCommit publishes one order 3 times on each broker,
// then runs a billing consumer in a child process (this test binary) that
// is killed with SIGKILL right after its first transaction committed and
// before it acked the delivery (or, on Kafka, committed the offset). The
// broker delivers that message again: the flow then ends with exactly one
// charge, one ChargeCompleted relayed, one notification, and the three
// deliveries this process sees (the two other copies and the redelivery)
// all Duplicates.
func TestFlowKilledAfterCommit(t *testing.T) {
	for _, broker := range brokerNames {
		t.Run(broker, func(t *testing.T) {
			t.Parallel()
			o := options(t, broker)
			id := unique()
			log := slog.New(slog.NewTextHandler(o.Log, &slog.HandlerOptions{Level: o.LogLevel}))
			f, err := Open(context.Background(), o.DBURL, "flow_test_"+id, newEndpoint(o, "flow-test-"+id), log)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if err := f.Close(); err != nil {
					t.Error(err)
				}
			})
			if err := f.PublishOrders(context.Background(), 1, 3); err != nil {
				t.Fatal(err)
			}

			committed := runKilledChild(t, f)
			t.Logf("%s: the child committed %s and was killed with SIGKILL before its ack", broker, committed)
			if n, err := queryInt(context.Background(), f.Pool, `SELECT count(*) FROM charges`); err != nil || n != 1 {
				t.Fatalf("charges after the kill: %d (%v); want the child's 1", n, err)
			}

			c, err := f.Process(context.Background(), Expect{Orders: 1, BillingProcessed: 0, BillingDuplicates: 3}, time.Minute)
			t.Logf("%s: published %dx, charges %d, relayed %d, notifications %d, duplicates %d (billing %d: 2 copies and 1 redelivery; notifications %d)",
				broker, c.Published, c.Charges, c.Relayed, c.Notifications, c.Duplicates(), c.BillingDuplicates, c.NotificationDuplicates)
			if err != nil {
				t.Fatal(err)
			}
			want := Counts{Published: 3, Charges: 1, Relayed: 1, Notifications: 1, BillingDuplicates: 3}
			if c != want {
				t.Fatalf("counts %+v; want %+v", c, want)
			}
		})
	}
}

const childEnv = "FLOW_KILLED_CHILD"

// childConfig is what the child process gets: where the run's broker and
// schema are.
type childConfig struct {
	Endpoint Endpoint `json:"endpoint"`
	DBURL    string   `json:"db_url"`
	Schema   string   `json:"schema"`
}

// runKilledChild runs the billing consumer of f's run in a child process
// until it kills itself after its first commit, and returns the order it
// committed.
func runKilledChild(t *testing.T, f *Flow) string {
	t.Helper()
	cfg, err := json.Marshal(childConfig{Endpoint: f.Endpoint, DBURL: f.DBURL, Schema: f.Schema})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+string(cfg))
	cmd.Stderr = idemtest.LogWriter(t)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var lines []string
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the child ended with %v, want killed by SIGKILL; it printed %q", err, lines)
	}
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "committed ") {
		t.Fatalf("the child printed %q; want one line: committed <order id>", lines)
	}
	return strings.TrimPrefix(lines[0], "committed ")
}

// killedChild is the child process: the run's billing consumer with one
// worker, killed (SIGKILL, by itself) right after the wrapper committed the
// first delivery, so the broker never gets its ack.
func killedChild(raw string) {
	var cfg childConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	pool, err := demo.OpenPool(ctx, cfg.DBURL, cfg.Schema)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(1)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	b, _, err := connect(cfg.Endpoint, log)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(1)
	}
	charge := chargeHandler(pool)
	h := idem.HandlerFunc[billing.OrderPlaced](func(ctx context.Context, msg billing.OrderPlaced) (idem.Outcome, error) {
		o, err := charge.Deliver(ctx, msg)
		if err == nil && o == idem.Processed {
			// Committed; the consumer would ack when this returns.
			fmt.Printf("committed %s\n", msg.OrderID)
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
		return o, err
	})
	err = b.Billing(h, 1, log).Run(ctx)
	fmt.Fprintln(os.Stderr, "child: the consumer stopped before any commit:", err)
	os.Exit(3)
}

// cancelOnWrite cancels a context when it is first written to.
type cancelOnWrite struct {
	cancel context.CancelFunc
}

func (w cancelOnWrite) Write(p []byte) (int, error) {
	w.cancel()
	return len(p), nil
}

// TestFlowDropsSchemaWhenInterrupted cancels the run's context (what SIGINT
// does) as soon as its schema and topology exist: Run must stop with the
// cancellation and still drop its schema.
func TestFlowDropsSchemaWhenInterrupted(t *testing.T) {
	for _, broker := range brokerNames {
		t.Run(broker, func(t *testing.T) {
			t.Parallel()
			o := options(t, broker)
			o.Orders, o.Copies, o.id = 5, 3, unique()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			o.Output = cancelOnWrite{cancel}
			_, err := Run(ctx, o)
			if !errors.Is(err, context.Canceled) {
				t.Errorf("Run after an interrupt: %v; want context.Canceled", err)
			}
			if schemaExists(t, o.DBURL, "flow_"+o.id) {
				t.Errorf("interrupted, the run left its schema flow_%s behind", o.id)
			}
		})
	}
}

// TestFlowExtraDeliveryIsNotExact: an order published twice while the run
// expects it once: Process waits for the one delivery, and the second copy,
// arriving in the moment it waits for anything extra, makes the counts not
// exact. (What makes the command exit 1.)
func TestFlowExtraDeliveryIsNotExact(t *testing.T) {
	for _, broker := range brokerNames {
		t.Run(broker, func(t *testing.T) {
			t.Parallel()
			o := options(t, broker)
			id := unique()
			log := slog.New(slog.NewTextHandler(o.Log, &slog.HandlerOptions{Level: o.LogLevel}))
			f, err := Open(context.Background(), o.DBURL, "flow_test_"+id, newEndpoint(o, "flow-test-"+id), log)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if err := f.Close(); err != nil {
					t.Error(err)
				}
			})
			if err := f.PublishOrders(context.Background(), 1, 2); err != nil {
				t.Fatal(err)
			}
			c, err := f.Process(context.Background(), Expect{Orders: 1, BillingProcessed: 1, BillingDuplicates: 0}, time.Minute)
			t.Logf("%s: %s; error: %v", broker, c.Line(2), err)
			if err == nil || !strings.Contains(err.Error(), "billing duplicates: 1, want 0") {
				t.Fatalf("Process: %v; want the extra duplicate reported", err)
			}
		})
	}
}
