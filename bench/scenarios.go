package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/bench/internal/procstat"
	"github.com/idemgen/idemgen/bench/internal/stats"
	"github.com/idemgen/idemgen/bench/ledger"
	"github.com/idemgen/idemgen/idem"
)

// A scenario delivers messages of the ledger consumer one way. prepare runs
// once per cell, in the cell's fresh schema, and returns what a worker calls
// for each message.
type scenario struct {
	name    string
	what    string
	prepare func(ctx context.Context, pool *pgxpool.Pool, accounts int) (deliverFunc, error)
	// migrations are the cell's schema (nil: the ledger's, no outbox).
	migrations fs.FS
	// check, if set, runs after the measurement on the cell's schema and
	// says whether the deliveries wrote what they should.
	check func(ctx context.Context, pool *pgxpool.Pool) error
	// perCall is how many messages one call of the deliverFunc delivers
	// (0: one); latencies stay per call.
	perCall int
}

// deliverFunc delivers the worker's seq-th message.
type deliverFunc func(ctx context.Context, w *worker) error

// worker is one concurrent consumer: its messages and their latencies.
type worker struct {
	id        int
	seq       int
	rng       *rand.Rand
	accounts  int
	latencies []time.Duration
}

// next returns the worker's next new message: a unique id, a random account.
func (w *worker) next() ledger.Deposit {
	w.seq++
	return ledger.Deposit{
		MessageID: "m-" + strconv.Itoa(w.id) + "-" + strconv.Itoa(w.seq),
		Account:   w.rng.Int64N(int64(w.accounts)) + 1,
		Amount:    w.rng.Int64N(100) + 1,
	}
}

// The scenario names, used as keys of the results.
const (
	scBare        = "bare"
	scHand        = "hand-written"
	scGenerated   = "generated"
	scDuplicate   = "generated, duplicates"
	scPessimistic = "generated, pessimistic"
	scPgBare      = "pgbench bare"
	scPgInbox     = "pgbench inbox"
	// The protocols from pgbench: the claim-first one's three round trips,
	// the optimistic one's two, and the optimistic one without the key's
	// read.
	scPgClaimFirst = "pgbench claim-first"
	scPgOptimistic = "pgbench read, then insert"
	scPgNoRead     = "pgbench insert, no read"
)

// duplicateKeys is how many messages the duplicates scenario processes
// before it measures; then it delivers only those again.
const duplicateKeys = 1000

// firstDeliveries delivers new messages through ledger.PostIdem built with
// opts, each of which must be processed.
func firstDeliveries(opts ...idem.Option) func(context.Context, *pgxpool.Pool, int) (deliverFunc, error) {
	return func(ctx context.Context, pool *pgxpool.Pool, _ int) (deliverFunc, error) {
		gen := ledger.NewPostIdem(pool, opts...)
		return func(ctx context.Context, w *worker) error {
			return processed(gen.Handle(ctx, w.next()))
		}, nil
	}
}

// processed is err, or an error when a delivery that must have been
// processed came back with another outcome.
func processed[R any](_ R, outcome idem.Outcome, err error) error {
	if err == nil && outcome != idem.Processed {
		err = fmt.Errorf("outcome %v, want processed", outcome)
	}
	return err
}

func goScenarios() []scenario {
	return []scenario{
		{
			name: scBare,
			what: "`ledger.Apply` on the pool: the UPDATE in its own (implicit) transaction, no deduplication",
			prepare: func(ctx context.Context, pool *pgxpool.Pool, _ int) (deliverFunc, error) {
				return func(ctx context.Context, w *worker) error {
					_, err := ledger.Apply(ctx, pool, w.next())
					return err
				}, nil
			},
		},
		{
			name: scHand,
			what: "`ledger.HandWritten`: BEGIN; INSERT … ON CONFLICT DO NOTHING; the UPDATE; store the result; COMMIT — one statement per round trip",
			prepare: func(ctx context.Context, pool *pgxpool.Pool, _ int) (deliverFunc, error) {
				hand := ledger.NewHandWritten(pool)
				return func(ctx context.Context, w *worker) error {
					_, dup, err := hand.Handle(ctx, w.next())
					if err == nil && dup {
						err = errors.New("a new message was taken for a duplicate")
					}
					return err
				}, nil
			},
		},
		{
			name:    scGenerated,
			what:    "`ledger.PostIdem`, the generated wrapper around the same UPDATE, new messages only",
			prepare: firstDeliveries(),
		},
		{
			name:    scPessimistic,
			what:    "the same wrapper built with `idem.WithPessimisticClaim()`: the claim-first protocol, BEGIN and the claim, the UPDATE, the result and COMMIT, new messages only",
			prepare: firstDeliveries(idem.WithPessimisticClaim()),
		},
		{
			name: scDuplicate,
			what: fmt.Sprintf("the same wrapper fed only messages it has processed (%d, processed before the warm-up)", duplicateKeys),
			prepare: func(ctx context.Context, pool *pgxpool.Pool, accounts int) (deliverFunc, error) {
				gen := ledger.NewPostIdem(pool)
				msgs := make([]ledger.Deposit, duplicateKeys)
				for i := range msgs {
					msgs[i] = ledger.Deposit{MessageID: "d-" + strconv.Itoa(i), Account: int64(i%accounts) + 1, Amount: 1}
				}
				if err := processAll(ctx, gen, msgs); err != nil {
					return nil, err
				}
				return func(ctx context.Context, w *worker) error {
					w.seq++
					_, outcome, err := gen.Handle(ctx, msgs[(w.id*7919+w.seq)%len(msgs)])
					if err == nil && outcome != idem.Duplicate {
						err = fmt.Errorf("outcome %v, want duplicate", outcome)
					}
					return err
				}, nil
			},
		},
	}
}

// processAll delivers msgs once, eight at a time.
func processAll(ctx context.Context, gen *ledger.PostIdem, msgs []ledger.Deposit) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for g := range 8 {
		wg.Go(func() {
			for i := g; i < len(msgs); i += 8 {
				if _, _, err := gen.Handle(ctx, msgs[i]); err != nil {
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

// keepFirst returns the first of two errors that is not nil.
func keepFirst(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// sample is what one cell measured in one round.
type sample struct {
	msgs      int64
	elapsed   time.Duration
	trips     int64 // round trips counted on the wire
	latencies []time.Duration
	// clientCPU is the CPU time of the client (this process, or pgbench);
	// serverCPU that of the PostgreSQL backends serving it (-1 when
	// unknown); busy the fraction of the machine's CPUs that were busy.
	clientCPU, serverCPU time.Duration
	busy                 float64
}

func (s sample) rate() float64 { return float64(s.msgs) / s.elapsed.Seconds() }

// runGoCell runs one scenario at the given concurrency in a fresh schema:
// warm-up, then the measurement.
func runGoCell(ctx context.Context, cfg *config, sc scenario, workers int) (sample, error) {
	return runGoCellVia(ctx, cfg, sc, workers, "", cfg.duration)
}

// runGoCellVia is runGoCell with the workers' connections going through the
// netproxy.Proxy at address via ("": straight to the server), measuring for d.
func runGoCellVia(ctx context.Context, cfg *config, sc scenario, workers int, via string, d time.Duration) (sample, error) {
	migrations := sc.migrations
	if migrations == nil {
		migrations = ledger.Migrations()
	}
	s, err := newSchemaWith(ctx, cfg.db, cfg.accounts, migrations)
	if err != nil {
		return sample{}, err
	}
	defer s.drop()
	s.via = via
	pool, counter, err := s.pool(ctx, workers)
	if err != nil {
		return sample{}, err
	}
	defer pool.Close()
	deliver, err := sc.prepare(ctx, pool, cfg.accounts)
	if err != nil {
		return sample{}, fmt.Errorf("%s: prepare: %w", sc.name, err)
	}

	ws := make([]*worker, workers)
	for i := range ws {
		ws[i] = &worker{id: i, rng: rand.New(rand.NewPCG(uint64(i), uint64(time.Now().UnixNano()))), accounts: cfg.accounts}
	}
	if _, err := runPhase(ctx, ws, cfg.warmup, deliver, false); err != nil {
		return sample{}, fmt.Errorf("%s: warm-up: %w", sc.name, err)
	}
	counter.reset()
	meter := procstat.Start()
	server0, serverOK := counter.serverCPU()
	res, err := runPhase(ctx, ws, d, deliver, true)
	if err != nil {
		return sample{}, fmt.Errorf("%s: %w", sc.name, err)
	}
	res.clientCPU, res.busy = meter.Stop()
	res.serverCPU = -1
	if server1, ok := counter.serverCPU(); ok && serverOK {
		res.serverCPU = server1 - server0
	}
	res.trips = counter.load()
	if sc.perCall > 1 {
		res.msgs *= int64(sc.perCall)
	}
	if sc.check != nil {
		if err := sc.check(ctx, pool); err != nil {
			return sample{}, fmt.Errorf("%s: %w", sc.name, err)
		}
	}
	return res, nil
}

// runPhase lets every worker deliver messages until d has passed, and waits
// until the last one has finished its last message: every round trip counted
// belongs to a message counted.
func runPhase(ctx context.Context, ws []*worker, d time.Duration, deliver deliverFunc, record bool) (sample, error) {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		msgs  int64
	)
	start := time.Now()
	deadline := start.Add(d)
	for _, w := range ws {
		w.latencies = w.latencies[:0]
		wg.Go(func() {
			n := int64(0)
			for ctx.Err() == nil {
				t0 := time.Now()
				if t0.After(deadline) {
					break
				}
				err := deliver(ctx, w)
				if err != nil {
					mu.Lock()
					first = keepFirst(first, err)
					mu.Unlock()
					return
				}
				n++
				if record {
					w.latencies = append(w.latencies, time.Since(t0))
				}
			}
			mu.Lock()
			msgs += n
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if first == nil {
		first = ctx.Err()
	}
	if first != nil {
		return sample{}, first
	}
	res := sample{msgs: msgs, elapsed: elapsed}
	if record {
		for _, w := range ws {
			res.latencies = append(res.latencies, w.latencies...)
		}
	}
	return res, nil
}

// cell is one scenario at one concurrency: a sample per round.
type cell struct {
	samples []sample
}

// summary pools a cell's rounds: total messages over total time, latency
// percentiles over every message, round trips and CPU over every message.
type summary struct {
	rate        float64
	p50, p99    time.Duration
	tripsPerMsg float64
	clientCPU   time.Duration // per message
	serverCPU   time.Duration // per message; -1 when unknown
	busy        float64       // mean over the rounds
}

func (c *cell) summary() summary {
	var (
		msgs, trips          int64
		elapsed              time.Duration
		clientCPU, serverCPU time.Duration
		lat                  []time.Duration
		s                    summary
	)
	serverKnown := true
	for _, smp := range c.samples {
		msgs += smp.msgs
		elapsed += smp.elapsed
		trips += smp.trips
		clientCPU += smp.clientCPU
		serverCPU += smp.serverCPU
		serverKnown = serverKnown && smp.serverCPU >= 0
		s.busy += smp.busy / float64(len(c.samples))
		lat = append(lat, smp.latencies...)
	}
	slices.Sort(lat)
	s.p50, s.p99 = stats.Percentile(lat, 50), stats.Percentile(lat, 99)
	if elapsed > 0 && msgs > 0 {
		s.rate = float64(msgs) / elapsed.Seconds()
		s.tripsPerMsg = float64(trips) / float64(msgs)
		s.clientCPU = clientCPU / time.Duration(msgs)
		s.serverCPU = serverCPU / time.Duration(msgs)
	}
	if !serverKnown {
		s.serverCPU = -1
	}
	return s
}

// runPaired delivers one message of every Go scenario in turn, on one
// connection, for d: the latencies of the scenarios then differ by what each
// does, not by when it ran. Duplicates get their own processed messages.
func runPaired(ctx context.Context, cfg *config, d time.Duration) (map[string][]time.Duration, error) {
	s, err := newSchema(ctx, cfg.db, cfg.accounts)
	if err != nil {
		return nil, err
	}
	defer s.drop()
	pool, _, err := s.pool(ctx, 1)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	scs := goScenarios()
	delivers := make([]deliverFunc, len(scs))
	ws := make([]*worker, len(scs))
	for i, sc := range scs {
		if delivers[i], err = sc.prepare(ctx, pool, cfg.accounts); err != nil {
			return nil, fmt.Errorf("%s: prepare: %w", sc.name, err)
		}
		// Each its own id: two scenarios may share an inbox table.
		ws[i] = &worker{id: i, rng: rand.New(rand.NewPCG(uint64(i), uint64(time.Now().UnixNano()))), accounts: cfg.accounts}
	}
	lat := map[string][]time.Duration{}
	start := time.Now()
	for turn := 0; ; turn++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		elapsed := time.Since(start)
		if elapsed > cfg.warmup+d {
			return lat, nil
		}
		for j := range scs {
			i := (turn + j) % len(scs)
			t0 := time.Now()
			if err := delivers[i](ctx, ws[i]); err != nil {
				return nil, fmt.Errorf("%s: %w", scs[i].name, err)
			}
			if elapsed >= cfg.warmup {
				lat[scs[i].name] = append(lat[scs[i].name], time.Since(t0))
			}
		}
	}
}
