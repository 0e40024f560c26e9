package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/examples/billing"
	"github.com/idemgen/idemgen/examples/notifications"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemtest"
	"github.com/idemgen/idemgen/idem/relay"
	"github.com/idemgen/idemgen/internal/pgcluster"
)

// These tests run the flow on a throwaway primary and its streaming standby
// (pgcluster.Pair), and fail the primary over while orders are on their
// way. Billing's consumer, the relay, the notifications consumer and the
// janitor share one pool on the pair's multi-host URL
// (target_session_attrs=read-write). Each goes on by itself: none is
// restarted, and a janitor round after the failover succeeds.

// startPair starts a pair for the test, removed at its end.
func startPair(t *testing.T, sync bool) *pgcluster.Pair {
	t.Helper()
	p, err := pgcluster.StartPair(pgcluster.PairOptions{Prefix: "idemgen-flow-failover.", Sync: sync,
		Settings: []string{"fsync=off", "max_connections=200"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Remove)
	return p
}

// result is what a wrapper answered for one delivery, and when.
type result struct {
	outcome idem.Outcome
	err     error
	at      time.Time
}

// ledger records every delivery's result, by order (billing) and by
// message id (notifications), and every message the broker confirmed to
// the relay, by message id.
type ledger struct {
	mu      sync.Mutex
	billing map[string][]result
	notes   map[string][]result
	relayed map[string]int
	// payloads are the distinct payloads confirmed under each message id.
	payloads map[string][]string
}

func newLedger() *ledger {
	return &ledger{billing: map[string][]result{}, notes: map[string][]result{}, relayed: map[string]int{}, payloads: map[string][]string{}}
}

// recording wraps h so that l records each delivery's result under key(msg).
func recording[M any](l *ledger, into map[string][]result, key func(M) string, h idem.Handler[M]) idem.Handler[M] {
	return idem.HandlerFunc[M](func(ctx context.Context, msg M) (idem.Outcome, error) {
		o, err := h.Deliver(ctx, msg)
		if ctx.Err() == nil || err == nil {
			l.mu.Lock()
			into[key(msg)] = append(into[key(msg)], result{o, err, time.Now()})
			l.mu.Unlock()
		}
		return o, err
	})
}

// relayRecorder is the relay's publisher: pub, recording what the broker
// confirmed.
type relayRecorder struct {
	pub idem.Publisher
	l   *ledger
}

func (r relayRecorder) Publish(ctx context.Context, msgs []idem.OutgoingMessage) []error {
	errs := r.pub.Publish(ctx, msgs)
	r.l.mu.Lock()
	defer r.l.mu.Unlock()
	for i, err := range errs {
		if err == nil {
			id := msgs[i].ID
			r.l.relayed[id]++
			if !slices.Contains(r.l.payloads[id], string(msgs[i].Payload)) {
				r.l.payloads[id] = append(r.l.payloads[id], string(msgs[i].Payload))
			}
		}
	}
	return errs
}

// processed counts the results that are Processed among rs, and the ones
// whose action is a dead-letter.
func processed(rs []result) (n, dead int) {
	for _, r := range rs {
		switch {
		case r.err == nil && r.outcome == idem.Processed:
			n++
		case r.err != nil && idem.ActionFor(r.err) == idem.DeadLetter:
			dead++
		}
	}
	return n, dead
}

// failoverFlow is one flow run on a pair: the flow's schema and topology,
// its parts running, and what they did.
type failoverFlow struct {
	t    *testing.T
	pair *pgcluster.Pair
	f    *Flow
	l    *ledger
	log  *slog.Logger
	// watch is a pool of the test's own on the pair's URL, for its counts.
	watch *pgxpool.Pool

	mu    sync.Mutex
	parts map[string]*part
	// deadLettersExpected keeps waitUntil from failing at the first
	// delivery dead-lettered.
	deadLettersExpected bool
	janitor             *idem.Janitor
}

// part is a running part of the flow.
type part struct {
	cancel context.CancelFunc
	done   chan error
}

// openFailoverFlow opens a flow run on broker in a fresh schema of pair,
// through the pair's connection string: its URL, or its keyword/value form.
func openFailoverFlow(t *testing.T, pair *pgcluster.Pair, broker, conn string) *failoverFlow {
	t.Helper()
	o := options(t, broker)
	id := unique()
	log := slog.New(slog.NewTextHandler(idemtest.LogWriter(t), &slog.HandlerOptions{Level: slog.LevelWarn}))
	f, err := Open(context.Background(), conn, "flow_failover_"+id, newEndpoint(o, "flow-failover-"+id), log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.Close(); err != nil {
			t.Error(err)
		}
	})
	cfg, err := pgxpool.ParseConfig(pair.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = f.Schema
	watch, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(watch.Close)
	return &failoverFlow{t: t, pair: pair, f: f, l: newLedger(), log: log, watch: watch, parts: map[string]*part{}}
}

// start runs a part until stop (or the test's end).
func (x *failoverFlow) start(name string, run func(context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	p := &part{cancel: cancel, done: make(chan error, 1)}
	go func() { p.done <- run(ctx) }()
	x.mu.Lock()
	x.parts[name] = p
	x.mu.Unlock()
	x.t.Cleanup(func() { x.stop(name) })
}

// stop stops a part and fails the test if it returned an error.
func (x *failoverFlow) stop(name string) {
	x.mu.Lock()
	p := x.parts[name]
	delete(x.parts, name)
	x.mu.Unlock()
	if p == nil {
		return
	}
	p.cancel()
	if err := <-p.done; err != nil {
		x.t.Errorf("%s: %v", name, err)
	}
}

// startBilling, startRelay, startNotifications and startJanitor run the
// flow's parts on the flow's pool.
func (x *failoverFlow) startBilling() {
	h := recording(x.l, x.l.billing, func(m billing.OrderPlaced) string { return m.OrderID }, chargeHandler(x.f.Pool))
	x.start("billing consumer", x.f.Broker.Billing(h, 4, x.log.With("consumer", "billing")).Run)
}

// startRelay runs the relay, polling once a minute only: the NOTIFY that
// wakes it must come through its listening connection on the new primary.
func (x *failoverFlow) startRelay(opts ...relay.Option) {
	r := relay.New(x.f.Pool, relayRecorder{pub: x.f.Broker.Publisher(), l: x.l}, append([]relay.Option{
		relay.WithID(x.f.Schema), relay.WithPollInterval(time.Minute),
		relay.WithBackoff(50*time.Millisecond, time.Second), relay.WithLogger(x.log.With("relay", x.f.Schema))}, opts...)...)
	x.start("relay", r.Run)
}

func (x *failoverFlow) startNotifications() {
	h := recording(x.l, x.l.notes, func(m ChargeCompletedMsg) string { return m.ID }, notifications.NewNotifyChargeCompletedIdem(x.f.Pool))
	x.start("notifications consumer", x.f.Broker.Notifications(h, x.log.With("consumer", "notifications")).Run)
}

func (x *failoverFlow) startJanitor() {
	j, err := idem.NewJanitor(x.f.Pool, []idem.Maintained{billing.NewChargeIdem(x.f.Pool, &billing.Service{}),
		notifications.NewNotifyChargeCompletedIdem(x.f.Pool)},
		idem.WithJanitorInterval(200*time.Millisecond), idem.WithJanitorLogger(x.log.With("janitor", x.f.Schema)))
	if err != nil {
		x.t.Fatal(err)
	}
	x.janitor = j
	x.start("janitor", j.Run)
}

// janitorRound runs one round of the janitor on the flow's pool, beside
// its schedule, and fails the test if it fails.
func (x *failoverFlow) janitorRound() {
	x.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rep, err := x.janitor.RunOnce(ctx)
	if err != nil || rep.Statements == 0 {
		x.t.Fatalf("a janitor round after the failover: %d statements, %v", rep.Statements, err)
	}
}

// count reads a count through the watch pool; -1 while the database
// cannot be reached.
func (x *failoverFlow) count(sql string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var n int
	if err := x.watch.QueryRow(ctx, sql).Scan(&n); err != nil {
		return -1
	}
	return n
}

// waitUntil waits until cond holds, failing the test after timeout. Every
// 10s it logs the outbox rows still there, with their claims.
func (x *failoverFlow) waitUntil(what string, timeout time.Duration, cond func() bool) {
	x.t.Helper()
	began := time.Now()
	deadline, report := began.Add(timeout), began.Add(10*time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			x.t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		if n := x.deadLettered(); n > 0 && !x.deadLettersExpected {
			x.t.Fatalf("waiting for %s: %d deliveries dead-lettered", what, n)
		}
		if time.Now().After(report) {
			report = report.Add(10 * time.Second)
			x.t.Logf("still waiting for %s after %v; outbox: %s", what, time.Since(began).Round(time.Second), x.outboxRows())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// deadLettered counts the deliveries whose action was a dead-letter.
func (x *failoverFlow) deadLettered() int {
	x.l.mu.Lock()
	defer x.l.mu.Unlock()
	n := 0
	for _, rs := range []map[string][]result{x.l.billing, x.l.notes} {
		for _, r := range rs {
			_, dead := processed(r)
			n += dead
		}
	}
	return n
}

// outboxRows describes the outbox rows left, for a slow wait's log.
func (x *failoverFlow) outboxRows() string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rows, err := x.watch.Query(ctx, `SELECT format('%s token %s lease %s attempts %s', message_id, claim_token,
		(lease_until - now())::text, attempts) FROM idem_outbox ORDER BY id LIMIT 10`)
	if err != nil {
		return err.Error()
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err.Error()
	}
	return fmt.Sprint(got)
}

// failover fails the pair over and returns when it happened and how long
// the flow took to commit its first charge on the new primary.
func (x *failoverFlow) failover() (pgcluster.Failover, time.Duration) {
	x.t.Helper()
	f, err := x.pair.Failover()
	if err != nil {
		x.t.Fatal(err)
	}
	var first time.Time
	x.waitUntil("the first charge on the new primary", time.Minute, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		// The old primary's last commits are before Dead.
		at, ok, err := x.pair.FirstCommitAfter(ctx, "postgres", pgx.Identifier{x.f.Schema, "charges"}, f.Dead)
		first = at
		return err == nil && ok
	})
	return f, first.Sub(f.Stopped)
}

// outcome is what a run did, by order and message.
type outcome struct {
	charges, notifications, outboxLeft int
	// billingProcessed counts the billing deliveries that answered
	// Processed; twice names the orders that did so more than once.
	billingProcessed int
	twice            []string
	// relayedDistinct counts the message ids the broker confirmed to the
	// relay, relayedTotal the confirms; replaced names the ids confirmed
	// with more than one payload.
	relayedDistinct, relayedTotal int
	replaced                      []string
	notesProcessed, notesTwice    int
	notesDuplicate                int
	deadLettered                  int
	left                          map[string]int
}

// settle stops every part and reads what the run did.
func (x *failoverFlow) settle() outcome {
	x.t.Helper()
	for _, name := range []string{"billing consumer", "relay", "notifications consumer", "janitor"} {
		x.stop(name)
	}
	var o outcome
	o.charges = x.count(`SELECT count(*) FROM charges`)
	o.notifications = x.count(`SELECT count(*) FROM notifications`)
	o.outboxLeft = x.count(`SELECT count(*) FROM idem_outbox`)
	x.l.mu.Lock()
	for order, rs := range x.l.billing {
		n, dead := processed(rs)
		o.billingProcessed += n
		o.deadLettered += dead
		if n > 1 {
			o.twice = append(o.twice, order)
		}
	}
	for _, rs := range x.l.notes {
		n, dead := processed(rs)
		o.notesProcessed += n
		o.deadLettered += dead
		if n > 1 {
			o.notesTwice++
		}
		for _, r := range rs {
			if r.err == nil && r.outcome == idem.Duplicate {
				o.notesDuplicate++
			}
		}
	}
	o.relayedDistinct = len(x.l.relayed)
	for id, n := range x.l.relayed {
		o.relayedTotal += n
		if len(x.l.payloads[id]) > 1 {
			o.replaced = append(o.replaced, id)
		}
	}
	x.l.mu.Unlock()
	sort.Strings(o.twice)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	left, err := x.f.Broker.Leftover(ctx)
	if err != nil {
		x.t.Fatal(err)
	}
	o.left = left
	return o
}

// checks collects the mismatches of a run.
type checks []error

func (c *checks) want(what string, got, want int) {
	if got != want {
		*c = append(*c, fmt.Errorf("%s: %d, want %d", what, got, want))
	}
}

// exact adds the checks every run must pass: each of the n orders charged
// and notified once, every ChargeCompleted relayed under one payload,
// nothing processed twice downstream, nothing dead-lettered or left over.
func (c *checks) exact(o outcome, n int) {
	c.want("charges", o.charges, n)
	c.want("ChargeCompleted relayed (distinct message ids)", o.relayedDistinct, n)
	c.want("message ids relayed with another payload", len(o.replaced), 0)
	c.want("notifications", o.notifications, n)
	c.want("notifications Processed twice", o.notesTwice, 0)
	if o.notesProcessed > n {
		*c = append(*c, fmt.Errorf("notification deliveries Processed: %d, more than the %d messages", o.notesProcessed, n))
	}
	c.want("dead-lettered deliveries", o.deadLettered, 0)
	c.want("outbox rows left", o.outboxLeft, 0)
	for where, k := range o.left {
		*c = append(*c, fmt.Errorf("%d message(s) left in %s", k, where))
	}
}

func (c checks) err() error { return errors.Join(c...) }

// TestFlowFailoverSync runs the flow on each broker through a failover of a
// synchronous pair, one broker after the other (Rebuild makes the next
// standby). A commit returns once the standby has it: the failover loses
// none. Every count is exact. Each order is charged once, and Processed at
// most once: a commit whose answer the failover cut off is Processed
// unseen, and its redelivery is a Duplicate. Each ChargeCompleted is
// relayed under one payload and notified once. Nothing is dead-lettered or
// left in a queue. It prints the time from the primary's stop to the
// flow's first commit on the new primary.
func TestFlowFailoverSync(t *testing.T) {
	pair := startPair(t, true)
	const orders = 300
	for _, broker := range brokerNames {
		t.Run(broker, func(t *testing.T) {
			if pair.Standby() == nil {
				if err := pair.Rebuild(); err != nil {
					t.Fatal(err)
				}
			}
			// Kafka's run takes the keyword/value form of the connection
			// string, the others its URL.
			conn := pair.URL("postgres")
			if broker == "kafka" {
				conn = pair.DSN("postgres")
			}
			x := openFailoverFlow(t, pair, broker, conn)
			x.startBilling()
			x.startRelay()
			x.startNotifications()
			x.startJanitor()
			// The orders come at a steady pace, each twice, so that the
			// failover falls in the middle of the flow, with orders still to
			// come after it.
			published := make(chan error, 1)
			go func() { published <- x.publishPaced(context.Background(), orders, 2, 4*time.Millisecond) }()
			var charged int
			x.waitUntil("a third of the orders charged", time.Minute, func() bool {
				charged = x.count(`SELECT count(*) FROM charges`)
				return charged >= orders/3
			})
			f, resume := x.failover()
			t.Logf("%s: failover %d → %d with %d of %d orders charged: the flow's first commit on the new primary %v after the primary's stop (stop %v, promotion %v)",
				broker, f.From, f.To, charged, orders, resume.Round(time.Millisecond),
				f.Dead.Sub(f.Stopped).Round(time.Millisecond), f.Promoted.Sub(f.Dead).Round(time.Millisecond))
			if err := <-published; err != nil {
				t.Fatal(err)
			}
			x.waitUntil("every order notified, the outbox and the queues drained", 2*time.Minute, func() bool {
				return x.count(`SELECT count(*) FROM notifications`) == orders && x.count(`SELECT count(*) FROM idem_outbox`) == 0 && x.drained()
			})
			done := time.Since(f.Stopped)
			x.janitorRound()                   // on the new primary, through the same pool
			time.Sleep(500 * time.Millisecond) // anything extra would come now
			o := x.settle()
			t.Logf("%s: every order notified %v after the stop; charges %d, billing Processed %d, relayed %d (%d distinct), notifications %d (%d duplicates)",
				broker, done.Round(time.Millisecond), o.charges, o.billingProcessed, o.relayedTotal, o.relayedDistinct, o.notifications, o.notesDuplicate)
			var c checks
			c.exact(o, orders)
			c.want("orders Processed twice", len(o.twice), 0)
			if o.billingProcessed > orders {
				c = append(c, fmt.Errorf("billing deliveries Processed: %d, more than the %d orders", o.billingProcessed, orders))
			}
			if err := c.err(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestFlowFailoverSlowPromotion: the standby is promoted 15s after the
// primary died, as a managed service that takes its time to notice. The
// consumers' deliveries cannot reach the database meanwhile, far longer
// than their 10 attempts at RabbitMQ's 1s retry delay would last. They are
// held, not retried through the broker: no delivery is dead-lettered, and
// every count is exact once the new primary takes writes.
func TestFlowFailoverSlowPromotion(t *testing.T) {
	pair := startPair(t, true)
	const orders, down = 100, 15 * time.Second
	x := openFailoverFlow(t, pair, "rabbitmq", pair.URL("postgres"))
	x.startBilling()
	x.startRelay()
	x.startNotifications()
	published := make(chan error, 1)
	go func() { published <- x.publishPaced(context.Background(), orders, 2, 20*time.Millisecond) }()
	x.waitUntil("a few orders charged", time.Minute, func() bool { return x.count(`SELECT count(*) FROM charges`) >= 10 })
	f, err := pair.FailoverAfter(down)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-published; err != nil {
		t.Fatal(err)
	}
	// Well within a lease and a poll (30s, a minute): no row waits for its
	// lease to lapse, though the relay was idle when the primary died.
	x.waitUntil("every order notified, the outbox and the queues drained", 40*time.Second, func() bool {
		return x.count(`SELECT count(*) FROM notifications`) == orders && x.count(`SELECT count(*) FROM idem_outbox`) == 0 && x.drained()
	})
	t.Logf("promoted %v after the primary died; every order notified %v after the promotion", f.Promoted.Sub(f.Dead).Round(time.Millisecond),
		time.Since(f.Promoted).Round(time.Millisecond))
	o := x.settle()
	var c checks
	c.exact(o, orders)
	c.want("orders Processed twice", len(o.twice), 0)
	if err := c.err(); err != nil {
		t.Fatal(err)
	}
}

// TestFlowFailoverAsync runs the flow through a failover of an
// asynchronous pair that loses a burst of committed deliveries. The
// standby is cut off (PauseReplication), and the notifications consumer
// stopped, as a downstream that lags. A burst of orders is charged and
// acknowledged on the primary; then the primary fails over. The broker has
// those orders no more. The test's producer replays them, with some orders
// before the burst, as a sender replays from its last checkpoint.
//
// With relay.WithReplicated the relay publishes none of the burst before
// the failover: no standby has it. After the failover each lost order is
// Processed once more. Each order is charged and notified once, and every
// ChargeCompleted relayed under one payload. The replayed orders that were
// not lost are Duplicates. Without the option, the relay publishes the
// burst before the failover. The replays then publish other payloads under
// the same message ids. The notifications consumer applies the stale ones
// and refuses the others as reused keys.
func TestFlowFailoverAsync(t *testing.T) {
	pair := startPair(t, false)
	const before, burst, replayedBefore = 50, 100, 20
	for _, replicated := range []bool{true, false} {
		name := "WithReplicated"
		if !replicated {
			name = "without WithReplicated"
		}
		t.Run(name, func(t *testing.T) {
			if pair.Standby() == nil {
				if err := pair.Rebuild(); err != nil {
					t.Fatal(err)
				}
			}
			x := openFailoverFlow(t, pair, "rabbitmq", pair.URL("postgres"))
			x.deadLettersExpected = !replicated // the reused keys
			var opts []relay.Option
			if replicated {
				opts = append(opts, relay.WithReplicated())
			}
			x.startBilling()
			x.startRelay(opts...)
			x.startNotifications()
			x.startJanitor()
			ctx := context.Background()
			if err := x.f.PublishOrders(ctx, before, 1); err != nil {
				t.Fatal(err)
			}
			x.waitUntil("the first orders notified", time.Minute, func() bool {
				return x.count(`SELECT count(*) FROM notifications`) == before && x.count(`SELECT count(*) FROM idem_outbox`) == 0
			})
			if err := pair.CatchUp(ctx); err != nil {
				t.Fatal(err)
			}

			x.stop("notifications consumer")
			if err := pair.PauseReplication(); err != nil {
				t.Fatal(err)
			}
			if err := x.publishRange(ctx, before+1, before+burst); err != nil {
				t.Fatal(err)
			}
			x.waitUntil("the burst charged", time.Minute, func() bool { return x.processedCount() == before+burst })
			if replicated {
				time.Sleep(300 * time.Millisecond) // the relay has claimed the burst, and waits
			} else {
				x.waitUntil("the burst relayed", time.Minute, func() bool { return x.relayedCount() == before+burst })
			}
			relayedBefore := x.relayedCount() - before

			f, err := pair.Failover()
			if err != nil {
				t.Fatal(err)
			}
			lost := x.lostOrders(f)
			t.Logf("%s: failover %d → %d: %d of the %d orders acknowledged after the standby was cut off lost their commit; %d of their ChargeCompleted had been relayed",
				name, f.From, f.To, len(lost), burst, relayedBefore)
			if err := pair.Rebuild(); err != nil { // the next standby, which WithReplicated waits for
				t.Fatal(err)
			}
			if err := x.publishRange(ctx, before-replayedBefore+1, before+burst); err != nil {
				t.Fatal(err)
			}
			x.startNotifications()
			n := before + burst
			if replicated {
				x.waitUntil("every order notified, the outbox and the queues drained", 2*time.Minute, func() bool {
					return x.count(`SELECT count(*) FROM notifications`) == n && x.count(`SELECT count(*) FROM idem_outbox`) == 0 && x.drained()
				})
			} else {
				x.waitUntil("every order charged again and relayed, the stale and the new messages consumed", 2*time.Minute, func() bool {
					return x.count(`SELECT count(*) FROM charges`) == n && x.count(`SELECT count(*) FROM idem_outbox`) == 0 && x.notesSettled() >= n+burst
				})
			}
			time.Sleep(500 * time.Millisecond)
			o := x.settle()
			again := x.processedAgain(f)
			t.Logf("%s: replayed %d orders (%d before the burst); Processed once more after the failover: %d; charges %d; relayed %d (%d distinct, %d with another payload); notifications %d; dead-lettered %d",
				name, replayedBefore+burst, replayedBefore, len(again), o.charges, o.relayedTotal, o.relayedDistinct, len(o.replaced), o.notifications, o.deadLettered)

			var c checks
			c.want("commits lost (the burst)", len(lost), burst)
			c.want("burst messages relayed before the failover", relayedBefore, map[bool]int{true: 0, false: burst}[replicated])
			if !replicated {
				c.want("message ids relayed with another payload", len(o.replaced), burst)
				c.want("notifications refused as reused keys (dead-lettered)", o.deadLettered, burst)
				if err := c.err(); err != nil {
					t.Fatal(err)
				}
				return
			}
			c.exact(o, n)
			if !slices.Equal(lost, again) {
				c = append(c, fmt.Errorf("Processed once more: %v; want exactly the lost orders %v", again, lost))
			}
			c.want("billing deliveries Processed", o.billingProcessed, n+len(lost))
			if err := c.err(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// publishPaced publishes orders 1 … n, each copies times in a row, one
// order every interval.
func (x *failoverFlow) publishPaced(ctx context.Context, n, copies int, interval time.Duration) error {
	began := time.Now()
	for i := 1; i <= n; i++ {
		time.Sleep(time.Until(began.Add(time.Duration(i-1) * interval)))
		o := billing.OrderPlaced{OrderID: OrderID(i), AccountID: accountID, AmountCents: int64(100 * i)}
		for range copies {
			if err := x.f.Broker.PublishOrder(ctx, o); err != nil {
				return fmt.Errorf("publish order %s: %w", o.OrderID, err)
			}
		}
	}
	return nil
}

// drained reports whether nothing of the run is left in a queue, stream or
// topic: a copy waiting in a retry queue comes back later.
func (x *failoverFlow) drained() bool {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	left, err := x.f.Broker.Leftover(ctx)
	return err == nil && len(left) == 0
}

// publishRange publishes orders from … to once each, as the order service
// does.
func (x *failoverFlow) publishRange(ctx context.Context, from, to int) error {
	for i := from; i <= to; i++ {
		o := billing.OrderPlaced{OrderID: OrderID(i), AccountID: accountID, AmountCents: int64(100 * i)}
		if err := x.f.Broker.PublishOrder(ctx, o); err != nil {
			return err
		}
	}
	return nil
}

// processedCount counts the orders billing answered Processed for.
func (x *failoverFlow) processedCount() int {
	x.l.mu.Lock()
	defer x.l.mu.Unlock()
	n := 0
	for _, rs := range x.l.billing {
		if k, _ := processed(rs); k > 0 {
			n++
		}
	}
	return n
}

// relayedCount counts the message ids the broker confirmed to the relay.
func (x *failoverFlow) relayedCount() int {
	x.l.mu.Lock()
	defer x.l.mu.Unlock()
	return len(x.l.relayed)
}

// notesSettled counts the notifications deliveries that ended (processed,
// duplicate or refused).
func (x *failoverFlow) notesSettled() int {
	x.l.mu.Lock()
	defer x.l.mu.Unlock()
	n := 0
	for _, rs := range x.l.notes {
		for _, r := range rs {
			if r.err == nil || idem.ActionFor(r.err) == idem.DeadLetter {
				n++
			}
		}
	}
	return n
}

// lostOrders are the orders billing answered Processed for before the
// failover whose charge the new primary does not have, sorted.
func (x *failoverFlow) lostOrders(f pgcluster.Failover) []string {
	x.t.Helper()
	var have []string
	x.waitUntil("the new primary's charges", time.Minute, func() bool {
		rows, err := x.watch.Query(context.Background(), `SELECT order_id FROM charges`)
		if err != nil {
			return false
		}
		have, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err == nil
	})
	x.l.mu.Lock()
	defer x.l.mu.Unlock()
	var lost []string
	for order, rs := range x.l.billing {
		for _, r := range rs {
			if r.err == nil && r.outcome == idem.Processed && r.at.Before(f.Stopped) && !slices.Contains(have, order) {
				lost = append(lost, order)
				break
			}
		}
	}
	sort.Strings(lost)
	return lost
}

// processedAgain are the orders billing answered Processed for both before
// and after the failover, sorted.
func (x *failoverFlow) processedAgain(f pgcluster.Failover) []string {
	x.l.mu.Lock()
	defer x.l.mu.Unlock()
	var again []string
	for order, rs := range x.l.billing {
		var pre, post bool
		for _, r := range rs {
			if r.err == nil && r.outcome == idem.Processed {
				pre = pre || r.at.Before(f.Stopped)
				post = post || r.at.After(f.Promoted)
			}
		}
		if pre && post {
			again = append(again, order)
		}
	}
	sort.Strings(again)
	return again
}
