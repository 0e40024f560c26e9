package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/examples/billing"
	"github.com/idemgen/idemgen/examples/notifications"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/relay"
)

// The roles of the soak's child processes: the parent re-executes its own
// binary with -role, one OS process per consumer or relay, so that a fault
// can SIGKILL it.
const (
	roleBilling = "billing"
	roleNotify  = "notifications"
	roleRelay   = "relay"
)

// stats are what a child process did so far; it prints them to its standard
// output every statsEvery, so a SIGKILL loses at most that much of them.
type stats struct {
	processed, duplicate, retried, deadLettered, relayed atomic.Int64
}

const statsEvery = 200 * time.Millisecond

func (s *stats) line() string {
	return fmt.Sprintf("stats %d %d %d %d %d", s.processed.Load(), s.duplicate.Load(), s.retried.Load(), s.deadLettered.Load(), s.relayed.Load())
}

// counting wraps h so that st counts what the generated wrapper answered.
func counting[M any](st *stats, h idem.Handler[M]) idem.Handler[M] {
	return idem.HandlerFunc[M](func(ctx context.Context, msg M) (idem.Outcome, error) {
		o, err := h.Deliver(ctx, msg)
		switch {
		case err == nil && o == idem.Duplicate:
			st.duplicate.Add(1)
		case err == nil:
			st.processed.Add(1)
		case idem.ActionFor(err) == idem.DeadLetter:
			st.deadLettered.Add(1)
		default:
			st.retried.Add(1)
		}
		return o, err
	})
}

// countingPublisher counts the messages the broker confirmed to the relay.
type countingPublisher struct {
	pub idem.Publisher
	st  *stats
}

func (c countingPublisher) Publish(ctx context.Context, msgs []idem.OutgoingMessage) []error {
	errs := c.pub.Publish(ctx, msgs)
	for _, err := range errs {
		if err == nil {
			c.st.relayed.Add(1)
		}
	}
	return errs
}

// runChild is a child process: one consumer or relay until SIGTERM.
func runChild(args []string) int {
	fs := flag.NewFlagSet("soak child", flag.ExitOnError)
	role := fs.String("role", "", "")
	db := fs.String("db", "", "")
	kind := fs.String("broker", "", "")
	url := fs.String("url", "", "")
	prefix := fs.String("prefix", "", "")
	name := fs.String("name", "", "")
	fs.Parse(args)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})).With("process", *name)

	cfg, err := pgxpool.ParseConfig(*db)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// pg_terminate_backend picks the soak's sessions by this name.
	cfg.ConnConfig.RuntimeParams["application_name"] = *name
	cfg.MaxConns = 16
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer pool.Close()

	var b broker
	for {
		// The broker may be unreachable just now (a closed connection, a
		// restart): retry with backoff, as a deployed service would.
		if b, err = dial(endpoint{kind: *kind, url: *url, prefix: *prefix}, *name+" control"); err == nil {
			break
		}
		log.Error("soak child: connect to the broker", "err", err)
		select {
		case <-ctx.Done():
			return 0
		case <-time.After(200 * time.Millisecond):
		}
	}
	defer b.close()

	var st stats
	var run func(context.Context) error
	switch *role {
	case roleBilling:
		h := counting(&st, idem.Handler[billing.OrderPlaced](billing.NewChargeIdem(pool, &billing.Service{CreditLimitCents: 1 << 60})))
		run = b.billing(h, *name, log).Run
	case roleNotify:
		h := counting(&st, idem.Handler[idem.Message[billing.ChargeCompleted]](notifications.NewNotifyChargeCompletedIdem(pool)))
		run = b.notifications(h, *name, log).Run
	case roleRelay:
		pub, closePub := b.publisher(*name, log)
		defer closePub()
		run = relay.New(pool, countingPublisher{pub: pub, st: &st}, relay.WithID(*name),
			relay.WithPollInterval(200*time.Millisecond), relay.WithBatchSize(200),
			relay.WithBackoff(50*time.Millisecond, 2*time.Second), relay.WithLogger(log)).Run
	default:
		fmt.Fprintf(os.Stderr, "unknown role %q\n", *role)
		return 2
	}

	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	tick := time.NewTicker(statsEvery)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			fmt.Println(st.line())
			if err != nil {
				fmt.Fprintf(os.Stderr, "%s: %v\n", *name, err)
				return 1
			}
			return 0
		case <-tick.C:
			fmt.Println(st.line())
		}
	}
}
