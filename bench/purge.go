package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/bench/internal/mdtable"
	"github.com/idemgen/idemgen/bench/internal/stats"
	"github.com/idemgen/idemgen/bench/ledger"
	"github.com/idemgen/idemgen/idem"
)

// The purge part: idem.Janitor deletes purgeRows expired rows of the
// ledger's inbox while purgeWorkers workers deliver new messages through the
// generated wrapper. The workers' latencies are measured first without the
// purge (for purgeBaseline), then while the janitor runs, in the same
// schema, the same run. A sampler reads pg_stat_activity every
// purgeSampleEvery and records every backend that waits on a lock held by
// another one, with who holds it: a delivery waiting on the janitor or the
// janitor waiting on a delivery is what the target bounds.

// purgeSampleEvery is the sampler's period.
const purgeSampleEvery = 5 * time.Millisecond

// purgeResults is what the purge part measured.
type purgeResults struct {
	rows, keep, workers int
	batch               int
	seed                time.Duration // seeding the expired rows
	without, during     []time.Duration
	purgeTook           time.Duration
	report              idem.JanitorReport
	purged              int64
	left, keptLeft      int64 // inbox rows after the purge; of them, the near-expiry ones seeded
	delivered           int64 // rows the workers' deliveries wrote (Processed)
	samples             int
	// The longest lock waits seen between the janitor and a delivery, each
	// way, from the first sample that saw it to the last (at least one
	// sample period when seen once), and how many sampled waits of each.
	janitorBlocks, janitorWaits time.Duration
	blockSeen, waitSeen         int
	otherWaits                  int // lock waits between deliveries (not the janitor's)
	// statements are the durations of the janitor's statements, sorted,
	// timed on its connection (a pgx tracer).
	statements []time.Duration
	// Redeliveries of keys at the purge's front: how many, and how many
	// found their row still there (ErrKeyReused: the payload differs from
	// the seeded one) or gone (processed anew, a row to keep).
	redelivered, reused int64
	// retried counts the redeliveries tried again after a retryable error:
	// the claim met the row and the purge deleted it before the read back.
	retried int64
	// WAL: the server's WAL position moved walDuring bytes while the
	// janitor ran and walWithout while the workers delivered without it
	// (over deliveredWithout deliveries; deliveredDuring during the purge).
	walWithout, walDuring             int64
	deliveredWithout, deliveredDuring int64
	// partitioned is the same measurement of the partitioned layout.
	partitioned *partitionedPurge
}

// purgeRedeliverEvery: one delivery in so many during the purge re-sends the
// key of an expired row just ahead of the purge, so that deliveries touch the
// rows the purge is deleting.
const purgeRedeliverEvery = 10

// statementTimer times the statements of a connection, and the batches
// that the janitor sends its statements in.
type statementTimer struct {
	mu    sync.Mutex
	start map[*pgx.Conn]time.Time
	took  []time.Duration
}

func (st *statementTimer) TraceQueryStart(ctx context.Context, c *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	st.mu.Lock()
	st.start[c] = time.Now()
	st.mu.Unlock()
	return ctx
}

func (st *statementTimer) TraceQueryEnd(_ context.Context, c *pgx.Conn, _ pgx.TraceQueryEndData) {
	st.mu.Lock()
	st.took = append(st.took, time.Since(st.start[c]))
	st.mu.Unlock()
}

// The janitor sends each statement in a batch of its own (begin, the
// setting, the statement, commit): a batch is one statement's round trip.

func (st *statementTimer) TraceBatchStart(ctx context.Context, c *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return st.TraceQueryStart(ctx, c, pgx.TraceQueryStartData{})
}

func (st *statementTimer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

func (st *statementTimer) TraceBatchEnd(ctx context.Context, c *pgx.Conn, _ pgx.TraceBatchEndData) {
	st.TraceQueryEnd(ctx, c, pgx.TraceQueryEndData{})
}

func (st *statementTimer) done() int {
	st.mu.Lock()
	defer st.mu.Unlock()
	return len(st.took)
}

// runPurge runs the purge part in a fresh schema.
func runPurge(ctx context.Context, cfg *config) (*purgeResults, error) {
	s, err := newSchema(ctx, cfg.db, cfg.accounts)
	if err != nil {
		return nil, err
	}
	defer s.drop()
	res := &purgeResults{rows: cfg.purgeRows, keep: cfg.purgeRows / 100, workers: cfg.purgeWorkers, batch: idem.DefaultJanitorBatchSize}

	admin, _, err := s.pool(ctx, 2)
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	logf("purge: seeding %d expired inbox rows and %d that expire in a day", res.rows, res.keep)
	started := time.Now()
	if _, err := admin.Exec(ctx, `INSERT INTO idem_bench_ledger (key_message_id, fingerprint, result, created_at)
		SELECT 'expired-' || g, '\x01'::bytea || sha256(g::text::bytea), '{"account":1,"amount":1}', now() - interval '31 days' - g * interval '1 ms'
		FROM generate_series(1, $1::int) g`, res.rows); err != nil {
		return nil, fmt.Errorf("seed the expired rows: %w", err)
	}
	if _, err := admin.Exec(ctx, `INSERT INTO idem_bench_ledger (key_message_id, fingerprint, result, created_at)
		SELECT 'kept-' || g, '\x01'::bytea || sha256(g::text::bytea), '{"account":1,"amount":1}', now() - interval '29 days' - g * interval '1 ms'
		FROM generate_series(1, $1::int) g`, res.keep); err != nil {
		return nil, fmt.Errorf("seed the rows to keep: %w", err)
	}
	if _, err := admin.Exec(ctx, `VACUUM ANALYZE idem_bench_ledger`); err != nil {
		return nil, err
	}
	res.seed = time.Since(started)
	logf("purge: seeded in %s", res.seed.Round(time.Millisecond))

	pool, err := s.namedPool(ctx, res.workers, "idembench-worker", nil)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	timer := &statementTimer{start: map[*pgx.Conn]time.Time{}}
	jpool, err := s.namedPool(ctx, 1, "idembench-janitor", timer)
	if err != nil {
		return nil, err
	}
	defer jpool.Close()
	post := ledger.NewPostIdem(pool)
	var seq, processed, redelivered, reused, retried atomic.Int64
	// front is the key number of the oldest expired row not yet purged: the
	// rows are 'expired-<g>', older as g grows, and the purge takes them
	// oldest first, a batch per statement.
	front := func() int64 {
		return int64(res.rows) - int64(timer.done())*int64(res.batch)
	}
	deliver := func(ctx context.Context, stop <-chan struct{}, redeliver bool) ([]time.Duration, error) {
		return deliverUntil(ctx, stop, res.workers, func(w int) (time.Duration, bool, error) {
			n := seq.Add(1)
			msg := ledger.Deposit{MessageID: "m-" + strconv.FormatInt(n, 10), Account: n%int64(cfg.accounts) + 1, Amount: 1}
			again := redeliver && n%purgeRedeliverEvery == 0
			if again {
				// A key the current batch or the next holds.
				g := max(front()-n%int64(2*res.batch), 1)
				msg.MessageID = "expired-" + strconv.FormatInt(g, 10)
			}
			t0 := time.Now()
			_, outcome, err := post.Handle(ctx, msg)
			for tries := 0; again && errors.Is(err, idem.ErrRetryable) && tries < 10; tries++ {
				// The claim met the row, the purge deleted it before
				// the read back: what the broker's redelivery does.
				retried.Add(1)
				_, outcome, err = post.Handle(ctx, msg)
			}
			switch {
			case again && errors.Is(err, idem.ErrKeyReused):
				redelivered.Add(1)
				reused.Add(1)
				return time.Since(t0), true, nil
			case again && err == nil && outcome == idem.Duplicate:
				// An earlier redelivery of the key processed it anew.
				redelivered.Add(1)
				return time.Since(t0), true, nil
			case err == nil && outcome == idem.Processed:
				processed.Add(1)
				if again {
					redelivered.Add(1)
				}
			}
			if err != nil || outcome != idem.Processed {
				return 0, false, fmt.Errorf("worker %d: %v, %v", w, outcome, err)
			}
			return time.Since(t0), true, nil
		})
	}

	logf("purge: %d workers deliver for %s without the purge", res.workers, cfg.purgeBaseline)
	lsn, err := walPosition(ctx, admin)
	if err != nil {
		return nil, err
	}
	stop := make(chan struct{})
	time.AfterFunc(cfg.purgeBaseline, func() { close(stop) })
	if res.without, err = deliver(ctx, stop, false); err != nil {
		return nil, err
	}
	if res.walWithout, err = walSince(ctx, admin, lsn); err != nil {
		return nil, err
	}
	res.deliveredWithout = processed.Load()

	// The janitor's statements run on the db of the inbox it is given: a
	// wrapper of its own pool, as a janitor process of its own would have.
	j, err := idem.NewJanitor(jpool, []idem.Maintained{ledger.NewPostIdem(jpool)}, idem.WithJanitorLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return nil, err
	}
	logf("purge: the janitor purges while %d workers deliver", res.workers)
	stop = make(chan struct{})
	sampled := make(chan error, 1)
	sctx, stopSampler := context.WithCancel(ctx)
	go func() { sampled <- res.sample(sctx, s) }()
	var janErr, walErr error
	go func() {
		defer close(stop)
		var lsn string
		if lsn, walErr = walPosition(ctx, admin); walErr != nil {
			return
		}
		before := processed.Load()
		t0 := time.Now()
		res.report, janErr = j.RunOnce(ctx)
		res.purgeTook = time.Since(t0)
		res.walDuring, walErr = walSince(ctx, admin, lsn)
		res.deliveredDuring = processed.Load() - before
	}()
	res.during, err = deliver(ctx, stop, true)
	stopSampler()
	if serr := <-sampled; serr != nil && !errors.Is(serr, context.Canceled) {
		return nil, fmt.Errorf("sample pg_stat_activity: %w", serr)
	}
	if err != nil {
		return nil, err
	}
	if janErr != nil {
		return nil, janErr
	}
	if walErr != nil {
		return nil, walErr
	}
	res.purged = res.report.Purged["idem_bench_ledger"]
	res.delivered = processed.Load()
	res.redelivered, res.reused, res.retried = redelivered.Load(), reused.Load(), retried.Load()
	res.statements = slices.Clone(timer.took)
	slices.Sort(res.statements)
	if err := admin.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE key_message_id LIKE 'kept-%') FROM idem_bench_ledger`).Scan(&res.left, &res.keptLeft); err != nil {
		return nil, err
	}
	logf("purge: %d rows purged in %s (%d statements, p50 %s, p99 %s, the longest %s); p99 %s without, %s during; %d rows left (%d kept + %d delivered); %d redeliveries at the front, %d found their row",
		res.purged, res.purgeTook.Round(time.Millisecond), res.report.Statements, mdtable.Dur(stats.Percentile(res.statements, 50)), mdtable.Dur(stats.Percentile(res.statements, 99)), mdtable.Dur(res.report.Longest),
		mdtable.Dur(stats.Percentile(res.without, 99)), mdtable.Dur(stats.Percentile(res.during, 99)), res.left, res.keptLeft, res.delivered, res.redelivered, res.reused)
	if res.purged != int64(res.rows) || res.keptLeft != int64(res.keep) || res.left != int64(res.keep)+res.delivered {
		return nil, fmt.Errorf("the purge deleted %d rows, want %d; %d rows left, want %d kept + %d delivered", res.purged, res.rows, res.left, res.keep, res.delivered)
	}
	if res.partitioned, err = runPurgePartitioned(ctx, cfg); err != nil {
		return nil, fmt.Errorf("the partitioned layout: %w", err)
	}
	return res, nil
}

// namedPool is a pool of up to size connections on the schema whose
// backends carry application_name name, traced by tracer if not nil.
func (s *schema) namedPool(ctx context.Context, size int, name string, tracer pgx.QueryTracer) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(s.base)
	if err != nil {
		return nil, err
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = s.name
	cfg.ConnConfig.RuntimeParams["application_name"] = name
	cfg.ConnConfig.Tracer = tracer
	cfg.MaxConns = int32(size)
	return pgxpool.NewWithConfig(ctx, cfg)
}

// lockWait is a backend waiting on a lock, as one sample saw it.
type lockWait struct {
	app      string
	pid      int32
	since    time.Time // query_start of the waiting statement
	blockers []int32
}

// sample reads pg_stat_activity until ctx ends and records the lock waits
// between the janitor and the deliveries.
func (r *purgeResults) sample(ctx context.Context, s *schema) error {
	conn, err := pgx.Connect(ctx, s.base)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	apps := map[int32]string{}
	type waitKey struct {
		pid   int32
		since time.Time
	}
	first, last := map[waitKey]time.Time{}, map[waitKey]time.Time{}
	kind := map[waitKey]string{}
	// The longest waits, however the sampling ends (a cancel may come in
	// the middle of a query).
	defer func() {
		for k, f := range first {
			d := last[k].Sub(f) + purgeSampleEvery
			switch kind[k] {
			case "blocks":
				r.janitorBlocks = max(r.janitorBlocks, d)
			case "waits":
				r.janitorWaits = max(r.janitorWaits, d)
			}
		}
	}()
	tick := time.NewTicker(purgeSampleEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		rows, err := conn.Query(ctx, `SELECT pid, application_name, coalesce(wait_event_type, ''), coalesce(query_start, now()), pg_blocking_pids(pid)
			FROM pg_stat_activity WHERE application_name IN ('idembench-worker', 'idembench-janitor')`)
		if err != nil {
			return err
		}
		now := time.Now()
		var waits []lockWait
		for rows.Next() {
			var (
				w     lockWait
				event string
			)
			if err := rows.Scan(&w.pid, &w.app, &event, &w.since, &w.blockers); err != nil {
				rows.Close()
				return err
			}
			apps[w.pid] = w.app
			if event == "Lock" && len(w.blockers) > 0 {
				waits = append(waits, w)
			}
		}
		if err := rows.Err(); err != nil {
			return err
		}
		r.samples++
		for _, w := range waits {
			k := waitKey{w.pid, w.since}
			for _, b := range w.blockers {
				switch {
				case w.app == "idembench-worker" && apps[b] == "idembench-janitor":
					kind[k] = "blocks"
					r.blockSeen++
				case w.app == "idembench-janitor" && apps[b] == "idembench-worker":
					kind[k] = "waits"
					r.waitSeen++
				default:
					r.otherWaits++
					continue
				}
				if _, ok := first[k]; !ok {
					first[k] = now
				}
				last[k] = now
			}
		}
	}
}

// deliverUntil runs workers goroutines, each calling one(w) until stop is
// closed or ctx ends, and returns every delivery's latency, sorted. one
// returns how long its delivery took and whether it counts (false: a
// delivery whose latency is not kept); an error stops its worker and is
// returned, joined with the others'.
func deliverUntil(ctx context.Context, stop <-chan struct{}, workers int, one func(w int) (time.Duration, bool, error)) ([]time.Duration, error) {
	var (
		mu   sync.Mutex
		all  []time.Duration
		errs []error
		wg   sync.WaitGroup
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var lat []time.Duration
			defer func() {
				mu.Lock()
				all = append(all, lat...)
				mu.Unlock()
			}()
			for {
				select {
				case <-stop:
					return
				case <-ctx.Done():
					return
				default:
				}
				d, keep, err := one(w)
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
				if keep {
					lat = append(lat, d)
				}
			}
		}()
	}
	wg.Wait()
	slices.Sort(all)
	return all, errors.Join(errs...)
}
