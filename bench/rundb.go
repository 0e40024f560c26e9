package main

import (
	"context"
	"fmt"
	"time"
)

// dbResults are the cells of the scenario table.
type dbResults struct {
	scenarios []scenario // the Go scenarios, in table order
	pgbench   bool
	cells     map[cellKey]*cell
	order     [][]string // the order the cells of each round ran in
	// paired are the latencies of the scenarios delivered in turn, one
	// message each, on one connection (runPaired), over every round.
	paired map[string][]time.Duration
	// log is what the server logged during the log runs (logerrors.go).
	log *logResults
}

type cellKey struct {
	scenario string
	workers  int
}

func (r *dbResults) cell(name string, workers int) *cell {
	return r.cells[cellKey{name, workers}]
}

// names are the scenarios of the table, the pgbench ones last.
func (r *dbResults) names() []string {
	var names []string
	for _, sc := range r.scenarios {
		names = append(names, sc.name)
	}
	if r.pgbench {
		names = append(names, pgbenchNames...)
	}
	return names
}

// runDB runs every scenario at every concurrency, cfg.rounds times. Within a
// round the concurrencies run in turn, and at each the scenarios run one
// after another in an order that rotates from round to round, so that a
// disturbance of the shared machine hits every scenario alike.
func runDB(ctx context.Context, cfg *config) (*dbResults, error) {
	res := &dbResults{scenarios: goScenarios(), pgbench: cfg.pgbench != "", cells: map[cellKey]*cell{}, paired: map[string][]time.Duration{}}
	byName := map[string]scenario{}
	for _, sc := range res.scenarios {
		byName[sc.name] = sc
	}
	names := res.names()
	for _, n := range cfg.workers {
		for _, name := range names {
			res.cells[cellKey{name, n}] = &cell{}
		}
	}

	total := cfg.rounds * len(cfg.workers) * len(names)
	done := 0
	for round := range cfg.rounds {
		var order []string
		for wi, n := range cfg.workers {
			for i := range names {
				name := names[(i+round+wi)%len(names)]
				done++
				logf("db %d/%d: round %d, %d worker(s), %s", done, total, round+1, n, name)
				var (
					smp sample
					err error
				)
				if sc, ok := byName[name]; ok {
					smp, err = runGoCell(ctx, cfg, sc, n)
				} else {
					smp, err = runPgbenchCell(ctx, cfg, name, n)
				}
				if err != nil {
					return nil, fmt.Errorf("round %d, %d worker(s), %s: %w", round+1, n, name, err)
				}
				logf("    %.0f msgs/s, %.2f round trips/msg", smp.rate(), float64(smp.trips)/float64(max(smp.msgs, 1)))
				c := res.cell(name, n)
				c.samples = append(c.samples, smp)
				order = append(order, fmt.Sprintf("%s at %d", name, n))
				// Let the server settle (the dropped schema, the
				// background writer) before the next cell.
				select {
				case <-ctx.Done():
					return nil, ctx.Err()
				case <-time.After(200 * time.Millisecond):
				}
			}
		}
		logf("db: round %d, the scenarios in turn, message by message, on one connection", round+1)
		paired, err := runPaired(ctx, cfg, cfg.duration)
		if err != nil {
			return nil, fmt.Errorf("round %d, message by message: %w", round+1, err)
		}
		for name, lat := range paired {
			res.paired[name] = append(res.paired[name], lat...)
		}
		order = append(order, "the scenarios message by message")
		res.order = append(res.order, order)
	}
	var err error
	if res.log, err = runLogErrors(ctx, cfg); err != nil {
		return nil, err
	}
	return res, nil
}
