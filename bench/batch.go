package main

import (
	"cmp"
	"context"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/bench/ledger"
	"github.com/idemgen/idemgen/idem"
)

// The batch part: HandleBatch (one transaction for a batch of messages)
// against one message per transaction, at -batchworkers workers, each call
// delivering -batchsize messages. A batch's messages are sorted by account
// before they are delivered, in every batched scenario alike: two
// transactions that update the same accounts in different orders deadlock,
// which a consumer that batches avoids the same way.

const (
	scBareBatched = "bare batched"
	scBatch       = "HandleBatch"
	scBatchSet    = "HandleBatch, set-based"
	scBatchDup    = "HandleBatch, duplicates"
)

// batchScenarios are the scenarios of the batch part, in table order: the
// single-message ones of the db part beside the batched ones.
func batchScenarios(size int) []scenario {
	byName := map[string]scenario{}
	for _, sc := range goScenarios() {
		byName[sc.name] = sc
	}
	batch := func(w *worker) []ledger.Deposit {
		msgs := make([]ledger.Deposit, size)
		for i := range msgs {
			msgs[i] = w.next()
		}
		slices.SortFunc(msgs, func(a, b ledger.Deposit) int { return cmp.Compare(a.Account, b.Account) })
		return msgs
	}
	// newBatches delivers each worker's batches of new messages through the
	// HandleBatch that wrapper builds on the cell's pool.
	newBatches := func(name, what string, wrapper func(*pgxpool.Pool) handleBatch) scenario {
		return scenario{name: name, what: what, perCall: size,
			prepare: func(ctx context.Context, pool *pgxpool.Pool, _ int) (deliverFunc, error) {
				handle := wrapper(pool)
				return func(ctx context.Context, w *worker) error {
					return expectAll(handle(ctx, batch(w)))(idem.Processed)
				}, nil
			}}
	}
	return []scenario{
		byName[scBare],
		{
			name:    scBareBatched,
			what:    fmt.Sprintf("the same UPDATEs, %d in one transaction (one pgx batch: one round trip, then the COMMIT), no deduplication", size),
			perCall: size,
			prepare: func(ctx context.Context, pool *pgxpool.Pool, _ int) (deliverFunc, error) {
				return func(ctx context.Context, w *worker) error {
					return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
						b := &pgx.Batch{}
						for _, m := range batch(w) {
							b.Queue(`UPDATE accounts SET balance = balance + $1 WHERE id = $2`, m.Amount, m.Account)
						}
						return tx.SendBatch(ctx, b).Close()
					})
				}, nil
			},
		},
		byName[scGenerated],
		newBatches(scBatch, fmt.Sprintf("`ledger.PostIdem.HandleBatch` of %d new messages: one transaction", size),
			func(pool *pgxpool.Pool) handleBatch { return ledger.NewPostIdem(pool).HandleBatch }),
		newBatches(scBatchSet, fmt.Sprintf("`ledger.PostAllIdem.HandleBatch` of %d new messages: one transaction, and the set-based handler `PostAll` makes them all with one `UPDATE ... FROM unnest(...)`", size),
			func(pool *pgxpool.Pool) handleBatch { return ledger.NewPostAllIdem(pool).HandleBatch }),
		byName[scDuplicate],
		{
			name:    scBatchDup,
			what:    fmt.Sprintf("`HandleBatch` of %d messages it has processed (a replay; %d processed before the warm-up)", size, duplicateKeys),
			perCall: size,
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
					from := ((w.id*7919 + w.seq) * size) % len(msgs)
					b := make([]ledger.Deposit, size)
					for i := range b {
						b[i] = msgs[(from+i)%len(msgs)]
					}
					return expectAll(gen.HandleBatch(ctx, b))(idem.Duplicate)
				}, nil
			},
		},
	}
}

// handleBatch is a generated ledger wrapper's HandleBatch.
type handleBatch func(ctx context.Context, msgs []ledger.Deposit) ([]idem.Result[ledger.Posted], error)

// expectAll turns a batch's results into an error unless every outcome is want.
func expectAll(results []idem.Result[ledger.Posted], err error) func(want idem.Outcome) error {
	return func(want idem.Outcome) error {
		if err != nil {
			return err
		}
		for i, r := range results {
			if r.Err != nil || r.Outcome != want {
				return fmt.Errorf("message %d of the batch: %v, %v; want %v", i, r.Outcome, r.Err, want)
			}
		}
		return nil
	}
}

// batchResults are the cells of the batch part.
type batchResults struct {
	size      int
	workers   []int
	scenarios []scenario
	cells     map[cellKey]*cell
	cores     int
}

func (r *batchResults) cell(name string, workers int) *cell { return r.cells[cellKey{name, workers}] }

// runBatch runs every batch scenario at every concurrency, cfg.rounds times,
// rotating as the db part does.
func runBatch(ctx context.Context, cfg *config) (*batchResults, error) {
	res := &batchResults{size: cfg.batchSize, workers: cfg.batchWorkers, scenarios: batchScenarios(cfg.batchSize), cells: map[cellKey]*cell{}, cores: runtime.NumCPU()}
	for _, n := range res.workers {
		for _, sc := range res.scenarios {
			res.cells[cellKey{sc.name, n}] = &cell{}
		}
	}
	total := cfg.rounds * len(res.workers) * len(res.scenarios)
	done := 0
	for round := range cfg.rounds {
		for wi, n := range res.workers {
			for i := range res.scenarios {
				sc := res.scenarios[(i+round+wi)%len(res.scenarios)]
				done++
				logf("batch %d/%d: round %d, %d worker(s), %s", done, total, round+1, n, sc.name)
				smp, err := runGoCellVia(ctx, cfg, sc, n, "", cfg.duration)
				if err != nil {
					return nil, fmt.Errorf("batch round %d, %d worker(s), %s: %w", round+1, n, sc.name, err)
				}
				logf("    %.0f msgs/s, %.3f round trips/msg", smp.rate(), float64(smp.trips)/float64(max(smp.msgs, 1)))
				res.cell(sc.name, n).samples = append(res.cell(sc.name, n).samples, smp)
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
