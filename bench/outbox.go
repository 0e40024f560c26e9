package main

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/bench/internal/mdtable"
	"github.com/idemgen/idemgen/bench/internal/procstat"
	"github.com/idemgen/idemgen/bench/internal/stats"
	"github.com/idemgen/idemgen/bench/ledger"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/relay"
)

// The outbox part measures a handler that publishes through idem's outbox
// (ledger.NewPublishingPost: Post's UPDATE, then n messages) and relay.Relay:
//
//   - first deliveries that publish 0, 1 and 10 messages, and 1 and 10
//     without the NOTIFY (idem.WithoutNotify), as cells like those of the db
//     part, at the lowest and the highest concurrency;
//   - commit-to-publish latency at each steady rate of -obxrate, a relay
//     woken by NOTIFY against a relay that only polls;
//   - relay throughput over a backlog, for 1 and more relays.
//
// The rounds interleave the cells as in the db part.

// obxVariant is one kind of first delivery of the outbox part.
type obxVariant struct {
	msgs   int  // messages each delivery publishes
	notify bool // false: idem.WithoutNotify()
}

func (v obxVariant) name() string {
	s := strconv.Itoa(v.msgs) + " messages"
	if v.msgs == 1 {
		s = "1 message"
	}
	if !v.notify {
		s += ", WithoutNotify"
	}
	return s
}

// obxVariants are the first-delivery cells, in table order.
var obxVariants = []obxVariant{{0, true}, {1, true}, {10, true}, {1, false}, {10, false}}

// outboxResults is what the outbox part measured.
type outboxResults struct {
	workers []int // the concurrencies of the first-delivery cells
	cells   map[obxKey]*cell
	// latency holds the commit-to-publish runs, by rate and poll-only
	// (true) or NOTIFY (false), one per round.
	latency map[latencyKey][]latencyRun
	// relays holds the throughput runs by number of relays, one per round.
	relays     map[int][]relayRun
	relayNs    []int
	order      [][]string
	rates      []int // messages per second of the latency runs
	poll       time.Duration
	backlog    int
	fillWorker int
}

// latencyKey is one latency cell: a rate, and a poll-only or NOTIFY relay.
type latencyKey struct {
	rate     int
	pollOnly bool
}

type obxKey struct {
	variant obxVariant
	workers int
}

func (r *outboxResults) cell(v obxVariant, workers int) *cell { return r.cells[obxKey{v, workers}] }

// latencyProducers is how many producers deliver the messages of a latency
// run at rate, each at its scheduled time: enough that a slow commit does not
// delay the next message (a producer for every 100 messages per second, at
// least 4).
func latencyProducers(rate int) int { return min(max(4, rate/100), 64) }

// fillWorkers write the relay runs' backlog.
const fillWorkers = 16

// fillMessages is how many messages each delivery of the backlog publishes.
const fillMessages = 10

func runOutbox(ctx context.Context, cfg *config) (*outboxResults, error) {
	res := &outboxResults{
		cells:   map[obxKey]*cell{},
		latency: map[latencyKey][]latencyRun{},
		relays:  map[int][]relayRun{},
		relayNs: cfg.obxRelays, rates: cfg.obxRates, poll: cfg.obxPoll, backlog: cfg.obxBacklog,
		fillWorker: fillWorkers,
	}
	res.workers = []int{slices.Min(cfg.workers)}
	if hi := slices.Max(cfg.workers); hi != res.workers[0] {
		res.workers = append(res.workers, hi)
	}
	for _, n := range res.workers {
		for _, v := range obxVariants {
			res.cells[obxKey{v, n}] = &cell{}
		}
	}
	total := cfg.rounds * (len(res.workers)*len(obxVariants) + 2*len(cfg.obxRates) + len(cfg.obxRelays))
	done := 0
	step := func(format string, args ...any) {
		done++
		logf("outbox %d/%d: %s", done, total, fmt.Sprintf(format, args...))
	}
	settle := func() error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
			return nil
		}
	}
	for round := range cfg.rounds {
		var order []string
		for wi, n := range res.workers {
			for i := range obxVariants {
				v := obxVariants[(i+round+wi)%len(obxVariants)]
				step("round %d, %d worker(s), %s", round+1, n, v.name())
				sc, err := outboxScenario(v)
				if err != nil {
					return nil, err
				}
				smp, err := runGoCell(ctx, cfg, sc, n)
				if err != nil {
					return nil, fmt.Errorf("outbox round %d, %d worker(s), %s: %w", round+1, n, v.name(), err)
				}
				logf("    %.0f msgs/s, %.2f round trips/msg", smp.rate(), float64(smp.trips)/float64(max(smp.msgs, 1)))
				c := res.cell(v, n)
				c.samples = append(c.samples, smp)
				order = append(order, fmt.Sprintf("%s at %d", v.name(), n))
				if err := settle(); err != nil {
					return nil, err
				}
			}
		}
		for _, rate := range cfg.obxRates {
			for _, pollOnly := range pairOrder(round) {
				step("round %d, commit-to-publish latency at %d/s, %s", round+1, rate, latencyMode(pollOnly))
				run, err := runLatency(ctx, cfg, rate, pollOnly)
				if err != nil {
					return nil, fmt.Errorf("outbox round %d, latency at %d/s %s: %w", round+1, rate, latencyMode(pollOnly), err)
				}
				slices.Sort(run.lat)
				logf("    %d messages at %.0f/s: p50 %s, p99 %s", len(run.lat), run.achieved(), mdtable.Dur(stats.Percentile(run.lat, 50)), mdtable.Dur(stats.Percentile(run.lat, 99)))
				k := latencyKey{rate, pollOnly}
				res.latency[k] = append(res.latency[k], run)
				order = append(order, fmt.Sprintf("latency %s at %d/s", latencyMode(pollOnly), rate))
				if err := settle(); err != nil {
					return nil, err
				}
			}
		}
		for i := range cfg.obxRelays {
			n := cfg.obxRelays[(i+round)%len(cfg.obxRelays)]
			step("round %d, relay throughput, %d relay(s)", round+1, n)
			run, err := runRelays(ctx, cfg, n)
			if err != nil {
				return nil, fmt.Errorf("outbox round %d, %d relay(s): %w", round+1, n, err)
			}
			logf("    %d rows in %s: %.0f msgs/s", run.rows, run.elapsed.Round(time.Millisecond), run.rate())
			res.relays[n] = append(res.relays[n], run)
			order = append(order, fmt.Sprintf("%d relay(s)", n))
			if err := settle(); err != nil {
				return nil, err
			}
		}
		res.order = append(res.order, order)
	}
	return res, nil
}

func latencyMode(pollOnly bool) string {
	if pollOnly {
		return "poll-only"
	}
	return "NOTIFY"
}

// outboxScenario is the first-delivery cell of v: new messages through
// ledger.NewPublishingPost, in a schema with the outbox table; afterwards it
// checks that every delivery wrote its v.msgs rows.
func outboxScenario(v obxVariant) (scenario, error) {
	migrations, err := ledger.MigrationsWithOutbox()
	if err != nil {
		return scenario{}, err
	}
	var opts []idem.Option
	if !v.notify {
		opts = append(opts, idem.WithoutNotify())
	}
	return scenario{
		name:       v.name(),
		migrations: migrations,
		prepare: func(ctx context.Context, pool *pgxpool.Pool, _ int) (deliverFunc, error) {
			in := ledger.NewPublishingPost(pool, v.msgs, opts...)
			return func(ctx context.Context, w *worker) error {
				return processed(in.Handle(ctx, w.next()))
			}, nil
		},
		check: func(ctx context.Context, pool *pgxpool.Pool) error {
			var rows, deliveries int64
			if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM idem_outbox), (SELECT count(*) FROM idem_bench_ledger)`).Scan(&rows, &deliveries); err != nil {
				return err
			}
			if rows != int64(v.msgs)*deliveries {
				return fmt.Errorf("%d deliveries wrote %d outbox rows, want %d each", deliveries, rows, v.msgs)
			}
			return nil
		},
	}, nil
}

// recorder is the recording publisher: it confirms every message at once and
// records when it first saw each id, and how many it saw from each relay.
type recorder struct {
	mu        sync.Mutex
	first     map[string]time.Time
	publishes int
	byRelay   map[string]int
}

func newRecorder() *recorder {
	return &recorder{first: map[string]time.Time{}, byRelay: map[string]int{}}
}

func (r *recorder) publisher(relay string) idem.Publisher {
	return idem.PublisherFunc(func(_ context.Context, msgs []idem.OutgoingMessage) []error {
		now := time.Now()
		r.mu.Lock()
		for _, m := range msgs {
			if _, ok := r.first[m.ID]; !ok {
				r.first[m.ID] = now
			}
		}
		r.publishes += len(msgs)
		r.byRelay[relay] += len(msgs)
		r.mu.Unlock()
		return make([]error, len(msgs))
	})
}

// distinct is how many different ids it has seen.
func (r *recorder) distinct() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.first)
}

func (r *recorder) seen(id string) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.first[id]
	return t, ok
}

// relayGroup runs relays until stop, which returns the first error of their Run.
type relayGroup struct {
	cancel context.CancelFunc
	errs   chan error
	n      int
}

func startRelays(ctx context.Context, pool *pgxpool.Pool, rec *recorder, n int, opts ...relay.Option) *relayGroup {
	rctx, cancel := context.WithCancel(ctx)
	g := &relayGroup{cancel: cancel, errs: make(chan error, n), n: n}
	quiet := slog.New(slog.DiscardHandler)
	for i := range n {
		id := "bench-" + strconv.Itoa(i)
		relay := relay.New(pool, rec.publisher(id), append([]relay.Option{relay.WithID(id), relay.WithLogger(quiet)}, opts...)...)
		go func() { g.errs <- relay.Run(rctx) }()
	}
	return g
}

func (g *relayGroup) stop() error {
	g.cancel()
	var first error
	for range g.n {
		first = keepFirst(first, <-g.errs)
	}
	return first
}

// latencyRun is one commit-to-publish measurement.
type latencyRun struct {
	msgs    int           // measured messages (after the warm-up)
	elapsed time.Duration // from the first measured message's scheduled time to the last one's commit
	lat     []time.Duration
	dups    int     // publishes of an id seen before
	busy    float64 // the machine's busy fraction while the producers committed
}

func (l latencyRun) achieved() float64 { return float64(l.msgs) / l.elapsed.Seconds() }

// latencyPools opens the two pools of a latency run on s: a connection for
// each of n producers, and 3 for the relay.
func (s *schema) latencyPools(ctx context.Context, n int) (producers, relay *pgxpool.Pool, err error) {
	producers, _, err = s.pool(ctx, n)
	if err != nil {
		return nil, nil, err
	}
	relay, _, err = s.pool(ctx, 3)
	if err != nil {
		producers.Close()
		return nil, nil, err
	}
	return producers, relay, nil
}

// runLatency delivers rate messages per second, each publishing one
// message, for the warm-up and the measured time, with one relay running on
// a pool of its own (woken by NOTIFY, or poll-only), both polling every
// cfg.obxPoll. A message's latency runs from the moment Handle returned (the
// commit acknowledged) to the moment the Publisher was handed it.
func runLatency(ctx context.Context, cfg *config, rate int, pollOnly bool) (latencyRun, error) {
	s, err := newOutboxSchema(ctx, cfg.db, cfg.accounts)
	if err != nil {
		return latencyRun{}, err
	}
	defer s.drop()
	nProducers := latencyProducers(rate)
	producers, relayPool, err := s.latencyPools(ctx, nProducers)
	if err != nil {
		return latencyRun{}, err
	}
	defer producers.Close()
	defer relayPool.Close()

	rec := newRecorder()
	opts := []relay.Option{relay.WithPollInterval(cfg.obxPoll)}
	if pollOnly {
		opts = append(opts, relay.WithPollOnly())
	}
	relays := startRelays(ctx, relayPool, rec, 1, opts...)
	stopped := false
	defer func() {
		if !stopped {
			_ = relays.stop()
		}
	}()

	in := ledger.NewPublishingPost(producers, 1)
	interval := time.Second / time.Duration(rate)
	warm := int(cfg.warmup / interval)
	total := warm + int(cfg.duration/interval)
	ids := make([]string, total)
	commits := make([]time.Time, total)
	var (
		next  atomic.Int64
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	meter := procstat.Start()
	start := time.Now()
	for p := range nProducers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(p), uint64(start.UnixNano())))
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= total {
					return
				}
				if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
					time.Sleep(d)
				}
				msg := ledger.Deposit{MessageID: "l-" + strconv.Itoa(i), Account: rng.Int64N(int64(cfg.accounts)) + 1, Amount: 1}
				id, err := ledger.OutgoingID(msg, 0)
				if err == nil {
					err = processed(in.Handle(ctx, msg))
				}
				if err != nil {
					mu.Lock()
					first = keepFirst(first, err)
					mu.Unlock()
					return
				}
				ids[i], commits[i] = id, time.Now()
			}
		})
	}
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	if first != nil {
		return latencyRun{}, first
	}
	run := latencyRun{msgs: total - warm}
	_, run.busy = meter.Stop()
	for _, c := range commits[warm:] {
		run.elapsed = max(run.elapsed, c.Sub(start.Add(time.Duration(warm)*interval)))
	}

	// Every message must reach the publisher: the poll catches any that a
	// NOTIFY did not.
	deadline := time.Now().Add(3*cfg.obxPoll + 10*time.Second)
	for rec.distinct() < total {
		if time.Now().After(deadline) {
			return latencyRun{}, fmt.Errorf("the relay published %d of %d messages by %s after the last commit", rec.distinct(), total, 3*cfg.obxPoll+10*time.Second)
		}
		select {
		case <-ctx.Done():
			return latencyRun{}, ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
	stopped = true
	if err := relays.stop(); err != nil {
		return latencyRun{}, err
	}
	for i := warm; i < total; i++ {
		t, _ := rec.seen(ids[i])
		run.lat = append(run.lat, t.Sub(commits[i]))
	}
	run.dups = rec.publishes - rec.distinct()
	return run, nil
}

// relayRun is one throughput measurement.
type relayRun struct {
	relays    int
	rows      int
	elapsed   time.Duration // from the start of the relays until no row is pending
	publishes int           // messages handed to the publisher (more than rows if any twice)
	byRelay   []int         // messages each relay published, highest first
	trips     int64         // round trips of the relays' connections
	busy      float64
}

func (r relayRun) rate() float64 { return float64(r.rows) / r.elapsed.Seconds() }

// runRelays writes a backlog of at least cfg.obxBacklog rows through the
// publishing wrapper (10 messages per delivery, without NOTIFY), then starts
// n relays with the recording publisher and times them until every row is
// published and marked.
func runRelays(ctx context.Context, cfg *config, n int) (relayRun, error) {
	s, err := newOutboxSchema(ctx, cfg.db, cfg.accounts)
	if err != nil {
		return relayRun{}, err
	}
	defer s.drop()
	pool, _, err := s.pool(ctx, fillWorkers)
	if err != nil {
		return relayRun{}, err
	}
	defer pool.Close()
	deliveries := (cfg.obxBacklog + fillMessages - 1) / fillMessages
	if err := fillBacklog(ctx, pool, deliveries, cfg.accounts); err != nil {
		return relayRun{}, fmt.Errorf("write the backlog: %w", err)
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE idem_outbox`); err != nil {
		return relayRun{}, err
	}
	rows := deliveries * fillMessages

	// Each relay runs one statement at a time, renews its lease beside a
	// publish, and takes one connection for listening.
	relayPool, counter, err := s.pool(ctx, 3*n)
	if err != nil {
		return relayRun{}, err
	}
	defer relayPool.Close()
	rec := newRecorder()
	counter.reset()
	meter := procstat.Start()
	start := time.Now()
	relays := startRelays(ctx, relayPool, rec, n)
	var pending int64
	deadline := start.Add(5 * time.Minute)
	for {
		if rec.distinct() >= rows {
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM idem_outbox`).Scan(&pending); err != nil {
				_ = relays.stop()
				return relayRun{}, err
			}
			if pending == 0 {
				break
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			_ = relays.stop()
			return relayRun{}, keepFirst(ctx.Err(), fmt.Errorf("%d relay(s) published %d of %d rows in %s", n, rec.distinct(), rows, time.Since(start).Round(time.Second)))
		}
		time.Sleep(time.Millisecond)
	}
	run := relayRun{relays: n, rows: rows, elapsed: time.Since(start)}
	_, run.busy = meter.Stop()
	if err := relays.stop(); err != nil {
		return relayRun{}, err
	}
	run.trips = counter.load()
	run.publishes = rec.publishes
	for _, k := range rec.byRelay {
		run.byRelay = append(run.byRelay, k)
	}
	slices.Sort(run.byRelay)
	slices.Reverse(run.byRelay)
	return run, nil
}

// fillBacklog delivers deliveries messages that publish fillMessages each,
// fillWorkers at a time, without NOTIFY (no relay is running yet).
func fillBacklog(ctx context.Context, pool *pgxpool.Pool, deliveries, accounts int) error {
	in := ledger.NewPublishingPost(pool, fillMessages, idem.WithoutNotify())
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for g := range fillWorkers {
		wg.Go(func() {
			for i := g; i < deliveries; i += fillWorkers {
				msg := ledger.Deposit{MessageID: "b-" + strconv.Itoa(i), Account: int64(i%accounts) + 1, Amount: 1}
				if _, _, err := in.Handle(ctx, msg); err != nil {
					mu.Lock()
					first = keepFirst(first, err)
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	return first
}

// pooledRelayRate is the relays' throughput over every round: rows over time.
func pooledRelayRate(runs []relayRun) float64 {
	var rows int
	var elapsed time.Duration
	for _, r := range runs {
		rows += r.rows
		elapsed += r.elapsed
	}
	if elapsed <= 0 {
		return 0
	}
	return float64(rows) / elapsed.Seconds()
}

// pooledLatencies are the latencies of every run, sorted.
// pooledRate is the measured messages of runs and the rate they were
// committed at, pooled over the runs.
func pooledRate(runs []latencyRun) (msgs int, rate float64) {
	var elapsed time.Duration
	for _, r := range runs {
		msgs += r.msgs
		elapsed += r.elapsed
	}
	return msgs, float64(msgs) / elapsed.Seconds()
}

func pooledLatencies(runs []latencyRun) []time.Duration {
	var all []time.Duration
	for _, r := range runs {
		all = append(all, r.lat...)
	}
	slices.Sort(all)
	return all
}

// equalTrips reports whether the round trips per message of cells are the
// same, to the second decimal, and returns them.
func equalTrips(cells []*cell) (bool, []float64) {
	var trips []float64
	for _, c := range cells {
		trips = append(trips, c.summary().tripsPerMsg)
	}
	if len(trips) == 0 {
		return false, nil
	}
	return slices.Max(trips)-slices.Min(trips) < 0.005, trips
}
