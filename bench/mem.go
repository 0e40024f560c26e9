package main

import (
	"context"
	"math/rand/v2"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemgen/idemgen/bench/internal/stats"
	"github.com/idemgen/idemgen/bench/ledger"
)

// memResults sample the process while the generated wrapper processes new
// messages for a long run: the live heap (what the last GC kept), the
// goroutines, and the messages so far.
type memResults struct {
	workers int
	samples []memSample
	msgs    int64
	elapsed time.Duration
}

type memSample struct {
	at         time.Duration
	live       uint64 // bytes of heap objects that survived the last GC
	goroutines uint64
	gcs        uint64
	msgs       int64
}

// memWorkers is the concurrency of the long run.
const memWorkers = 16

func runMem(ctx context.Context, cfg *config) (*memResults, error) {
	logf("mem: %s of the generated scenario at %d workers", cfg.memRun, memWorkers)
	s, err := newSchema(ctx, cfg.db, cfg.accounts)
	if err != nil {
		return nil, err
	}
	defer s.drop()
	pool, _, err := s.pool(ctx, memWorkers)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	gen := ledger.NewPostIdem(pool)

	var (
		msgs  atomic.Int64
		first atomic.Value
		wg    sync.WaitGroup
	)
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	for i := range memWorkers {
		w := &worker{id: i, rng: rand.New(rand.NewPCG(uint64(i), 1)), accounts: cfg.accounts}
		wg.Go(func() {
			for runCtx.Err() == nil {
				if err := processed(gen.Handle(runCtx, w.next())); err != nil {
					if runCtx.Err() == nil {
						first.CompareAndSwap(nil, err)
						stop()
					}
					return
				}
				msgs.Add(1)
			}
		})
	}

	res := &memResults{workers: memWorkers}
	names := []string{"/gc/heap/live:bytes", "/sched/goroutines:goroutines", "/gc/cycles/total:gc-cycles"}
	ms := make([]metrics.Sample, len(names))
	for i, n := range names {
		ms[i].Name = n
	}
	start := time.Now()
	step := max(cfg.memRun/30, time.Second)
	tick := time.NewTicker(step)
	defer tick.Stop()
	for done := false; !done; {
		select {
		case <-runCtx.Done():
			done = true
		case <-tick.C:
			metrics.Read(ms)
			res.samples = append(res.samples, memSample{
				at:         time.Since(start),
				live:       ms[0].Value.Uint64(),
				goroutines: ms[1].Value.Uint64(),
				gcs:        ms[2].Value.Uint64(),
				msgs:       msgs.Load(),
			})
			done = time.Since(start) >= cfg.memRun
		}
	}
	stop()
	wg.Wait()
	res.elapsed = time.Since(start)
	res.msgs = msgs.Load()
	if err, _ := first.Load().(error); err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return res, nil
}

// growth fits live = a + b·t by least squares over the samples after the
// first third (the warm-up fills pgx's statement caches and the pool) and
// returns b in bytes per minute, the mean live heap of that part, and what
// the trend adds over that part as a fraction of the mean.
func (r *memResults) growth() (perMinute, mean, overRun float64) {
	pts := r.samples[len(r.samples)/3:]
	if len(pts) < 2 {
		return 0, 0, 0
	}
	points := make([][2]float64, len(pts))
	for i, p := range pts {
		points[i] = [2]float64{p.at.Minutes(), float64(p.live)}
	}
	fit := stats.Fit(points)
	perMinute, mean = fit.B, fit.MeanY()
	if mean > 0 {
		overRun = perMinute * (pts[len(pts)-1].at - pts[0].at).Minutes() / mean
	}
	return perMinute, mean, overRun
}
