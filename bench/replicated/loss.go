package main

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/bench/ledger"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/internal/pgcluster"
)

// The loss part: how many acknowledged deliveries a failover loses. The
// ledger's publishing deliveries commit as fast as the producers go on a
// pair whose standby keeps up (nothing cut off); halfway through the
// burst the primary stops in immediate mode and the standby is promoted.
// A delivery acknowledged before the old primary died (Handle returned
// Processed) whose inbox row the new primary lacks was lost.

// lossRun is one failover of the loss part.
type lossRun struct {
	acked, lost int
}

// measureLoss fails a pair over `failovers` times, each in the middle of
// a burst of runFor, and returns what each lost.
func measureLoss(ctx context.Context, sync bool, failovers, producers int, runFor time.Duration, accounts int) ([]lossRun, error) {
	pair, err := pgcluster.StartPair(pgcluster.PairOptions{Prefix: "idemgen-bench-replicated.", Sync: sync, Settings: []string{"max_connections=200"}})
	if err != nil {
		return nil, err
	}
	defer pair.Remove()
	var runs []lossRun
	for i := range failovers {
		if pair.Standby() == nil {
			if err := pair.Rebuild(); err != nil {
				return nil, err
			}
		}
		r, err := lossOnce(ctx, pair, producers, runFor, accounts)
		if err != nil {
			return nil, fmt.Errorf("failover %d: %w", i+1, err)
		}
		runs = append(runs, r)
	}
	return runs, nil
}

// lossOnce is one burst and one failover in a fresh schema.
func lossOnce(ctx context.Context, pair *pgcluster.Pair, producers int, runFor time.Duration, accounts int) (lossRun, error) {
	base := pair.URL("postgres")
	schema, drop, err := newSchema(ctx, base, accounts)
	if err != nil {
		return lossRun{}, err
	}
	defer drop()
	if err := pair.CatchUp(ctx); err != nil {
		return lossRun{}, err
	}
	pool, err := openPool(ctx, base+"&search_path="+schema, producers)
	if err != nil {
		return lossRun{}, err
	}
	defer pool.Close()
	// The deliveries cut off by the failover fail: nothing to log.
	in := ledger.NewPublishingPost(pool, 1, idem.WithLogger(slog.New(slog.DiscardHandler)))
	var (
		mu    sync.Mutex
		acked = map[string]time.Time{}
		wg    sync.WaitGroup
	)
	end := time.Now().Add(runFor)
	for p := range producers {
		wg.Go(func() {
			for i := 0; time.Now().Before(end) && ctx.Err() == nil; i++ {
				msg := ledger.Deposit{MessageID: "p" + strconv.Itoa(p) + "-" + strconv.Itoa(i), Account: int64(1 + (i*7+p)%accounts), Amount: 1}
				if _, outcome, err := in.Handle(ctx, msg); err == nil && outcome == idem.Processed {
					mu.Lock()
					acked[msg.MessageID] = time.Now()
					mu.Unlock()
				}
			}
		})
	}
	time.Sleep(runFor / 2)
	f, err := pair.Failover()
	wg.Wait()
	if err != nil {
		return lossRun{}, err
	}
	conn, err := pgx.Connect(ctx, pair.PrimaryURL("postgres"))
	if err != nil {
		return lossRun{}, err
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, "SELECT key_message_id FROM "+pgx.Identifier{schema, "idem_bench_ledger"}.Sanitize())
	if err != nil {
		return lossRun{}, err
	}
	kept, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return lossRun{}, err
	}
	have := map[string]bool{}
	for _, k := range kept {
		have[k] = true
	}
	var r lossRun
	for id, at := range acked {
		if at.Before(f.Dead) { // acknowledged by the old primary
			r.acked++
			if !have[id] {
				r.lost++
			}
		}
	}
	return r, nil
}
