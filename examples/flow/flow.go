package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/idemgen/idemgen/examples/billing"
	"github.com/idemgen/idemgen/examples/notifications"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/relay"
	"github.com/idemgen/idemgen/internal/demo"
)

// accountID is the account every order of the flow is charged to.
const accountID = "acc-flow"

// Counts are what a run of the flow did.
type Counts struct {
	// Published is how many order messages the broker accepted: each order
	// as many times as the order service's retries sent it.
	Published int
	// Charges are the rows in billing's charges table.
	Charges int
	// Relayed is how many ChargeCompleted messages the broker confirmed to
	// the relay's publisher.
	Relayed int
	// Notifications are the rows in the notifications table.
	Notifications int
	// BillingDuplicates and NotificationDuplicates are the deliveries the
	// generated wrappers answered with idem.Duplicate (and that were acked):
	// copies and redeliveries of a message already processed.
	BillingDuplicates      int
	NotificationDuplicates int
}

// Duplicates is every duplicate the two consumers saw.
func (c Counts) Duplicates() int { return c.BillingDuplicates + c.NotificationDuplicates }

// Expect is what a run must count exactly.
type Expect struct {
	// Orders is how many distinct orders were published.
	Orders int
	// BillingProcessed and BillingDuplicates are the deliveries the billing
	// consumer of this process handles: Processed (it charges) and Duplicate.
	BillingProcessed  int
	BillingDuplicates int
	// Redeliveries, when set, lets either consumer see duplicates beyond
	// BillingDuplicates: a broker that fails over may deliver again a
	// message whose ack it lost, and the wrapper answers Duplicate. Each
	// message must still be processed once.
	Redeliveries bool
}

// Flow is one run of the flow: a fresh schema with both services'
// migrations, the run's topology on one broker, and the counters of the two
// consumers and the relay.
type Flow struct {
	Endpoint Endpoint
	Broker   Broker
	Pool     *pgxpool.Pool
	DBURL    string
	Schema   string
	log      *slog.Logger

	published atomic.Int64
	relayed   atomic.Int64
	billing   tally
	notes     tally

	cleanup []func() error
}

// tally counts a consumer's deliveries by what the wrapper answered.
type tally struct {
	mu        sync.Mutex
	processed int
	duplicate int
	failed    []error
}

func (t *tally) add(o idem.Outcome, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case err != nil:
		t.failed = append(t.failed, err)
	case o == idem.Duplicate:
		t.duplicate++
	default:
		t.processed++
	}
}

func (t *tally) get() (processed, duplicate int, failed []error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.processed, t.duplicate, slices.Clone(t.failed)
}

// counting wraps h so that t counts its deliveries.
func counting[M any](t *tally, h idem.Handler[M]) idem.Handler[M] {
	return idem.HandlerFunc[M](func(ctx context.Context, msg M) (idem.Outcome, error) {
		o, err := h.Deliver(ctx, msg)
		if ctx.Err() == nil || err == nil {
			// A delivery cut short by the stop is not an outcome: the
			// broker delivers it again.
			t.add(o, err)
		}
		return o, err
	})
}

// Open creates the schema, applies billing's and notifications' migrations
// in it, opens the account the orders are charged to, and connects to the
// broker and declares the run's topology. Close undoes all of it.
func Open(ctx context.Context, dbURL, schema string, e Endpoint, log *slog.Logger) (f *Flow, err error) {
	f = &Flow{DBURL: dbURL, Schema: schema, log: log}
	defer func() {
		if err != nil {
			err = errors.Join(err, f.Close())
			f = nil
		}
	}()
	if err := createSchema(ctx, dbURL, schema); err != nil {
		return f, err
	}
	f.cleanup = append(f.cleanup, func() error { return demo.DropSchema(dbURL, schema) })
	if f.Pool, err = demo.OpenPool(ctx, dbURL, schema); err != nil {
		return f, err
	}
	f.cleanup = append(f.cleanup, func() error { f.Pool.Close(); return nil })
	if err := migrate(ctx, f.Pool); err != nil {
		return f, err
	}
	open := billing.NewOpenAccountIdem(f.Pool)
	if _, _, err := open.Handle(ctx, billing.OpenAccountRequested{RequestID: uuid.New(), AccountID: accountID, Owner: "Flow"}); err != nil {
		return f, fmt.Errorf("open account %s: %w", accountID, err)
	}

	if f.Broker, f.Endpoint, err = connect(e, log); err != nil {
		return f, err
	}
	f.cleanup = append(f.cleanup, func() error { f.Broker.Close(); return nil })
	if err := f.Broker.Declare(ctx); err != nil {
		return f, fmt.Errorf("%s: declare the run's topology: %w", e.Broker, err)
	}
	f.cleanup = append(f.cleanup, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return f.Broker.Delete(ctx)
	})
	return f, nil
}

// Close removes the topology, closes the broker and drops the schema, also
// after an interrupt.
func (f *Flow) Close() error {
	var errs []error
	for i := len(f.cleanup) - 1; i >= 0; i-- {
		errs = append(errs, f.cleanup[i]())
	}
	f.cleanup = nil
	return errors.Join(errs...)
}

// OrderID is the id of the i-th order of a run.
func OrderID(i int) string { return fmt.Sprintf("ord-%d", i) }

// PublishOrders publishes orders ord-1 … ord-n, each copies times in a row,
// as an order service whose publish is retried does.
func (f *Flow) PublishOrders(ctx context.Context, n, copies int) error {
	for i := 1; i <= n; i++ {
		o := billing.OrderPlaced{OrderID: OrderID(i), AccountID: accountID, AmountCents: int64(100 * i)}
		for range copies {
			if err := f.Broker.PublishOrder(ctx, o); err != nil {
				return fmt.Errorf("%s: publish order %s: %w", f.Endpoint.Broker, o.OrderID, err)
			}
			f.published.Add(1)
		}
	}
	return nil
}

// chargeHandler is the billing consumer's handler: the generated wrapper
// of billing.Charge, which publishes ChargeCompleted through the outbox.
func chargeHandler(pool *pgxpool.Pool) idem.Handler[billing.OrderPlaced] {
	// Every order fits: the flow is about counts, not about credit.
	return billing.NewChargeIdem(pool, &billing.Service{CreditLimitCents: 1 << 40})
}

// Process runs the billing consumer, the relay and the notifications
// consumer until every order went through, waits a moment for anything
// that should not come, stops them and returns the counts; the error says
// what is not as want says, so a nil error means the counts are exact.
func (f *Flow) Process(ctx context.Context, want Expect, timeout time.Duration) (Counts, error) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var runErrs []error
	var mu sync.Mutex
	start := func(name string, run func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := run(ctx); err != nil && ctx.Err() == nil {
				mu.Lock()
				runErrs = append(runErrs, fmt.Errorf("%s: %w", name, err))
				mu.Unlock()
				cancel()
			}
		}()
	}
	relay := relay.New(f.Pool, &confirmCounter{pub: f.Broker.Publisher(), n: &f.relayed},
		relay.WithID(f.Schema), relay.WithPollInterval(100*time.Millisecond),
		relay.WithBackoff(50*time.Millisecond, time.Second), relay.WithLogger(f.log.With("relay", f.Schema)))
	start("billing consumer", f.Broker.Billing(counting(&f.billing, chargeHandler(f.Pool)), 4, f.log.With("consumer", "billing")).Run)
	start("relay", relay.Run)
	start("notifications consumer", f.Broker.Notifications(counting(&f.notes, notifications.NewNotifyChargeCompletedIdem(f.Pool)),
		f.log.With("consumer", "notifications")).Run)

	waitErr := f.waitFor(ctx, want, timeout)
	if waitErr == nil {
		// Anything extra (a third delivery, a second relay of a message)
		// would arrive now.
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
	cancel()
	wg.Wait()
	counts, err := f.counts(context.WithoutCancel(ctx))
	if err != nil {
		return counts, err
	}
	if len(runErrs) > 0 {
		return counts, errors.Join(runErrs...)
	}
	if waitErr != nil {
		return counts, waitErr
	}
	return counts, f.check(context.WithoutCancel(ctx), counts, want)
}

// waitFor waits until the run has done all want says.
func (f *Flow) waitFor(ctx context.Context, want Expect, timeout time.Duration) error {
	deadline := time.After(timeout)
	for {
		bp, bd, bf := f.billing.get()
		np, _, nf := f.notes.get()
		pending, err := queryInt(ctx, f.Pool, `SELECT count(*) FROM idem_outbox`)
		if err != nil {
			return err
		}
		if len(bf) > 0 || len(nf) > 0 {
			return fmt.Errorf("a delivery failed: %v", errors.Join(append(bf, nf...)...))
		}
		billed := bp+bd >= want.BillingProcessed+want.BillingDuplicates
		if want.Redeliveries {
			billed = bp >= want.BillingProcessed
		}
		if billed && np >= want.Orders && pending == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-deadline:
			return fmt.Errorf("timed out after %v: billing handled %d of %d deliveries, %d notifications of %d applied, %d outbox rows pending",
				timeout, bp+bd, want.BillingProcessed+want.BillingDuplicates, np, want.Orders, pending)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (f *Flow) counts(ctx context.Context) (Counts, error) {
	c := Counts{Published: int(f.published.Load()), Relayed: int(f.relayed.Load())}
	_, c.BillingDuplicates, _ = f.billing.get()
	_, c.NotificationDuplicates, _ = f.notes.get()
	var err error
	if c.Charges, err = queryInt(ctx, f.Pool, `SELECT count(*) FROM charges`); err != nil {
		return c, err
	}
	c.Notifications, err = queryInt(ctx, f.Pool, `SELECT count(*) FROM notifications`)
	return c, err
}

// check compares the counts, the consumers' tallies, the outbox and the
// broker's leftovers with want.
func (f *Flow) check(ctx context.Context, c Counts, want Expect) error {
	bp, bd, bf := f.billing.get()
	np, nd, nf := f.notes.get()
	var errs []error
	mismatch := func(what string, got, want int) {
		if got != want {
			errs = append(errs, fmt.Errorf("%s: %d, want %d", what, got, want))
		}
	}
	mismatch("charges", c.Charges, want.Orders)
	mismatch("ChargeCompleted relayed", c.Relayed, want.Orders)
	mismatch("notifications applied", c.Notifications, want.Orders)
	mismatch("billing deliveries processed", bp, want.BillingProcessed)
	mismatch("notification deliveries processed", np, want.Orders)
	if !want.Redeliveries {
		mismatch("billing duplicates", bd, want.BillingDuplicates)
		mismatch("notification duplicates", nd, 0)
	}
	mismatch("failed deliveries", len(bf)+len(nf), 0)
	// A published row is deleted: none is left once every message went out.
	unpublished, err := queryInt(ctx, f.Pool, `SELECT count(*) FROM idem_outbox`)
	if err != nil {
		return err
	}
	mismatch("outbox rows left", unpublished, 0)
	left, err := f.Broker.Leftover(ctx)
	if err != nil {
		return fmt.Errorf("%s: inspect what is left: %w", f.Endpoint.Broker, err)
	}
	for _, where := range slices.Sorted(maps.Keys(left)) {
		errs = append(errs, fmt.Errorf("%d message(s) left in %s", left[where], where))
	}
	return errors.Join(errs...)
}

// confirmCounter is the relay's publisher: pub, counting the messages the
// broker confirmed.
type confirmCounter struct {
	pub idem.Publisher
	n   *atomic.Int64
}

func (c *confirmCounter) Publish(ctx context.Context, msgs []idem.OutgoingMessage) []error {
	errs := c.pub.Publish(ctx, msgs)
	for _, err := range errs {
		if err == nil {
			c.n.Add(1)
		}
	}
	return errs
}

func queryInt(ctx context.Context, pool *pgxpool.Pool, sql string) (int, error) {
	var n int
	if err := pool.QueryRow(ctx, sql).Scan(&n); err != nil {
		return 0, fmt.Errorf("%s: %w", sql, err)
	}
	return n, nil
}

// createSchema creates schema on the server of dbURL.
func createSchema(ctx context.Context, dbURL, schema string) error {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", redactURL(dbURL), err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		return fmt.Errorf("create schema %s: %w", schema, err)
	}
	return nil
}

// migrate applies billing's and notifications' migrations with goose, each
// service with its own version table: the two sequences number their
// migrations independently.
func migrate(ctx context.Context, pool *pgxpool.Pool) error {
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	for _, svc := range []struct {
		name       string
		migrations fs.FS
		table      string
	}{
		{"billing", billing.Migrations(), goose.DefaultTablename},
		{"notifications", notifications.Migrations(), "goose_db_version_notifications"},
	} {
		if _, err := demo.Up(ctx, db, svc.migrations, svc.table); err != nil {
			return fmt.Errorf("migrate %s: %w", svc.name, err)
		}
	}
	return nil
}

// redactURL hides a URL's password, as psql does.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(a URL that does not parse)"
	}
	return u.Redacted()
}
