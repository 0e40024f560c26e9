package main

import (
	"testing"
	"time"
)

// TestBatchPartTiny runs the batch part small (batches of 10, 2 workers,
// 1s cells): every batched delivery is checked by the part (all Processed,
// or all Duplicate for the replay); this checks that a batch of 10 takes
// fewer round trips a message than one message a transaction, and the
// set-based one fewer than that, and that the report writes its section and
// its targets.
func TestBatchPartTiny(t *testing.T) {
	ctx, url := testDB(t, 3*time.Minute)
	cfg := &config{db: url, accounts: 100, rounds: 1, warmup: 200 * time.Millisecond, duration: time.Second, batchSize: 10, batchWorkers: []int{2}}
	res, err := runBatch(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, sc := range res.scenarios {
		s := res.cell(sc.name, 2).summary()
		t.Logf("%s: %.0f msgs/s, %.3f round trips/msg", sc.name, s.rate, s.tripsPerMsg)
	}
	// A call costs 2 round trips and the handler's: Post's 10 UPDATEs, one
	// a round trip, and the set-based PostAll's one statement.
	for name, want := range map[string]float64{scBatch: 2 + 10, scBatchSet: 2 + 1} {
		if got := res.cell(name, 2).summary().tripsPerMsg * 10; got < want-0.01 || got > want+0.01 {
			t.Errorf("%s of 10: %.3f round trips a call, want %.0f", name, got, want)
		}
	}
	r := &report{cfg: cfg, batch: res}
	checkTargets(t, reportHas(t, []string{"## Batches", "| 2 | HandleBatch |", "| 2 | HandleBatch, set-based |", "HandleBatch of 10 ≥ 5× single-message generated at 2 workers",
		"set-based HandleBatch of 10 ≥ 0.6× bare batched at 2 workers", "a replay through HandleBatch",
		"HandleBatch of 10: 2 round trips plus the handler's"},
		r.writeTargets, r.writeBatch))
}
