package main

import (
	"context"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/bench/internal/procstat"
	"github.com/idemgen/idemgen/bench/orders"
	"github.com/idemgen/idemgen/idem"
)

// The entity part (-parts entity): one INSERT per message of package
// bench/orders, as the bare business transaction, through a mode=entity
// wrapper (the row is the marker) and through a mode=tx wrapper (an inbox
// row beside it), at 1 and 16 workers, with round trips counted on the wire
// and the WAL each message writes.

// The entity part's scenarios.
const (
	scEntityBare = "bare transaction"
	scEntity     = "mode=entity"
	scEntityTx   = "mode=tx"
)

var entityScenarios = []string{scEntityBare, scEntity, scEntityTx}

// entityWorkers are the concurrencies of the entity part (the issue's).
var entityWorkers = []int{1, 16}

// entityResults are the entity part's cells, and the WAL bytes per message
// each round measured.
type entityResults struct {
	cells map[cellKey]*cell
	wal   map[cellKey][]float64
}

func (r *entityResults) cell(name string, workers int) *cell { return r.cells[cellKey{name, workers}] }

// walPerMsg is the least WAL per message of the cell's rounds: the WAL
// position is the server's, which other sessions of the shared machine
// advance too, so the least disturbed round is the closest to the cell's own.
func (r *entityResults) walPerMsg(name string, workers int) float64 {
	w := r.wal[cellKey{name, workers}]
	if len(w) == 0 {
		return 0
	}
	return slices.Min(w)
}

func runEntity(ctx context.Context, cfg *config) (*entityResults, error) {
	res := &entityResults{cells: map[cellKey]*cell{}, wal: map[cellKey][]float64{}}
	total := cfg.rounds * len(entityWorkers) * len(entityScenarios)
	done := 0
	for round := range cfg.rounds {
		for wi, n := range entityWorkers {
			for i := range entityScenarios {
				name := entityScenarios[(i+round+wi)%len(entityScenarios)]
				done++
				logf("entity %d/%d: round %d, %d worker(s), %s", done, total, round+1, n, name)
				smp, wal, err := runEntityCell(ctx, cfg, name, n)
				if err != nil {
					return nil, fmt.Errorf("entity: round %d, %d worker(s), %s: %w", round+1, n, name, err)
				}
				perMsg := float64(wal) / float64(max(smp.msgs, 1))
				logf("    %.0f msgs/s, %.2f round trips/msg, %.0f WAL bytes/msg", smp.rate(), float64(smp.trips)/float64(max(smp.msgs, 1)), perMsg)
				key := cellKey{name, n}
				if res.cells[key] == nil {
					res.cells[key] = &cell{}
				}
				res.cells[key].samples = append(res.cells[key].samples, smp)
				res.wal[key] = append(res.wal[key], perMsg)
				select {
				case <-ctx.Done():
					return nil, ctx.Err()
				case <-time.After(200 * time.Millisecond):
				}
			}
		}
	}
	return res, nil
}

// runEntityCell runs one scenario at one concurrency in a fresh schema:
// warm-up, then the measurement, with the WAL position read before and after
// it.
func runEntityCell(ctx context.Context, cfg *config, name string, workers int) (sample, int64, error) {
	s, err := newOrdersSchema(ctx, cfg.db)
	if err != nil {
		return sample{}, 0, err
	}
	defer s.drop()
	pool, counter, err := s.pool(ctx, workers)
	if err != nil {
		return sample{}, 0, err
	}
	defer pool.Close()
	deliver := entityDeliver(name, pool)

	ws := make([]*worker, workers)
	for i := range ws {
		ws[i] = &worker{id: i, rng: mrand.New(mrand.NewPCG(uint64(i), uint64(time.Now().UnixNano())))}
	}
	if _, err := runPhase(ctx, ws, cfg.warmup, deliver, false); err != nil {
		return sample{}, 0, fmt.Errorf("warm-up: %w", err)
	}
	admin, err := pgx.Connect(ctx, cfg.db)
	if err != nil {
		return sample{}, 0, err
	}
	defer admin.Close(ctx)
	var lsn string
	if err := admin.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&lsn); err != nil {
		return sample{}, 0, fmt.Errorf("read the WAL position: %w", err)
	}
	counter.reset()
	meter := procstat.Start()
	server0, serverOK := counter.serverCPU()
	res, err := runPhase(ctx, ws, cfg.duration, deliver, true)
	if err != nil {
		return sample{}, 0, err
	}
	res.clientCPU, res.busy = meter.Stop()
	res.trips = counter.load()
	res.serverCPU = -1
	if server1, ok := counter.serverCPU(); ok && serverOK {
		res.serverCPU = server1 - server0
	}
	var wal int64
	if err := admin.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::text::pg_lsn)::bigint`, lsn).Scan(&wal); err != nil {
		return sample{}, 0, fmt.Errorf("read the WAL position: %w", err)
	}
	// Every message wrote its row (and only its row): the deliveries did
	// what they should.
	table := "orders"
	if name == scEntityTx {
		table = "orders_tx"
	}
	var rows int64
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&rows); err != nil {
		return sample{}, 0, err
	}
	if rows < res.msgs {
		return sample{}, 0, fmt.Errorf("%d rows in %s after %d messages", rows, table, res.msgs)
	}
	return res, wal, nil
}

// entityDeliver returns what a worker does for each message of scenario
// name: a new order, delivered once.
func entityDeliver(name string, pool *pgxpool.Pool) deliverFunc {
	next := func(w *worker) orders.Order {
		w.seq++
		return orders.Order{OrderID: "o-" + strconv.Itoa(w.id) + "-" + strconv.Itoa(w.seq), Customer: "c-" + strconv.Itoa(w.rng.IntN(1000)), Amount: w.rng.Int64N(10000) + 1}
	}
	processed := func(o idem.Outcome, err error) error {
		if err == nil && o != idem.Processed {
			err = fmt.Errorf("a new order was %v", o)
		}
		return err
	}
	switch name {
	case scEntity:
		w := orders.NewPlaceEntityIdem(pool)
		return func(ctx context.Context, wk *worker) error { return processed(w.Deliver(ctx, next(wk))) }
	case scEntityTx:
		w := orders.NewPlaceTxIdem(pool)
		return func(ctx context.Context, wk *worker) error { return processed(w.Deliver(ctx, next(wk))) }
	}
	return func(ctx context.Context, wk *worker) error { return orders.Bare(ctx, pool, next(wk)) }
}

// newOrdersSchema creates a fresh schema with the migrations of
// bench/orders.
func newOrdersSchema(ctx context.Context, base string) (*schema, error) {
	s, pool, err := newMigratedSchema(ctx, base, orders.Migrations())
	if err != nil {
		return nil, err
	}
	pool.Close()
	return s, nil
}
