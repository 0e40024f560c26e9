package idemtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/idem"
)

// The batch scenarios: what HandleBatch must do with the fixture's message.
// They run when the Suite has a Batch.
const (
	// ScenarioBatchKeyTwice: a batch holding the message twice and a
	// message with its key and another payload (with a Variant) processes
	// it once: Processed, then a Duplicate with an equal result, then
	// idem.ErrKeyReused; the handler runs once, one inbox row, the effect
	// once.
	ScenarioBatchKeyTwice = "batch_key_twice"
	// ScenarioBatchProcessedKey: a batch of an already processed message
	// (twice) gives Duplicates with the stored result, without running the
	// handler.
	ScenarioBatchProcessedKey = "batch_processed_key"
	// ScenarioBatchFailingHandler: a batch whose transaction fails before
	// its commit (the hook fails in the batch's transaction) gets an error
	// for the message and commits nothing; the redelivery, as a batch, is
	// Processed once.
	ScenarioBatchFailingHandler = "batch_failing_handler"
	// ScenarioBatchConcurrent: N batches, each holding the message twice,
	// at once: exactly one Processed, every other message a Duplicate with
	// an equal result, the effect once.
	ScenarioBatchConcurrent = "batch_concurrent"
	// ScenarioBatchKilledMidBatch: the process delivering a batch (the
	// message twice) is killed with SIGKILL inside the batch's transaction,
	// after the handler ran and before the COMMIT (a child process running
	// the same test binary): nothing is recorded, no effect, no outgoing
	// message; the redelivered batch is Processed once, then a Duplicate.
	ScenarioBatchKilledMidBatch = "batch_killed_mid_batch"
)

// BatchFunc delivers messages to the consumer under test as one batch: a
// generated wrapper's HandleBatch method is one.
type BatchFunc[M, R any] func(ctx context.Context, msgs []M) ([]idem.Result[R], error)

// batchScenarios returns the batch scenarios, when the Suite has a Batch.
func (s Suite[V, M, R]) batchScenarios(seen *fixtureSeen) []Scenario {
	if s.Batch == nil {
		return nil
	}
	always := func() (bool, string) { return true, "" }
	return []Scenario{
		{Name: ScenarioBatchKeyTwice, Run: func(t testing.TB) { s.batchKeyTwice(t, seen) }, applies: always},
		{Name: ScenarioBatchProcessedKey, Run: func(t testing.TB) { s.batchProcessedKey(t, seen) }, applies: always},
		{Name: ScenarioBatchFailingHandler, Run: func(t testing.TB) { s.batchFailingHandler(t, seen) }, applies: always},
		{Name: ScenarioBatchConcurrent, Run: func(t testing.TB) { s.batchConcurrent(t, seen) }, applies: always},
		{Name: ScenarioBatchKilledMidBatch, Run: func(t testing.TB) { s.batchKilledMidBatch(t, seen) }, applies: always},
	}
}

// newBatch builds the batch consumer under test on pool, with the
// scenario's options.
func (sc *scenario[V, M, R]) newBatch(pool *pgxpool.Pool) BatchFunc[M, R] {
	opts := append(append([]idem.Option{WithTestLogger(sc.t)}, sc.s.Options...),
		idem.WithBeforeCommit(sc.beforeCommit), idem.WithClaimWait(claimWait))
	b := sc.s.Batch(sc.fx.Receiver, pool, opts...)
	if b == nil {
		sc.t.Fatal("idemtest: Suite.Batch returned a nil BatchFunc")
	}
	return b
}

// batch delivers msgs as one batch and returns what each got.
func (sc *scenario[V, M, R]) batch(b BatchFunc[M, R], msgs []M) []delivery[R] {
	sc.t.Helper()
	results, err := b(sc.ctx, msgs)
	if len(results) != len(msgs) {
		sc.t.Fatalf("a batch of %d messages returned %d results (and %v); want one per message", len(msgs), len(results), err)
	}
	out := make([]delivery[R], len(results))
	for i, r := range results {
		out[i] = delivery[R]{r: r.Value, o: r.Outcome, err: r.Err}
	}
	return out
}

func (s Suite[V, M, R]) batchKeyTwice(t testing.TB, seen *fixtureSeen) {
	t.Helper()
	s.needEffect(t, seen)
	sc := s.start(t, seen, 2)
	msg := sc.fx.Message
	msgs := []M{msg, msg}
	variant := sc.fx.Variant
	if variant == nil {
		variant = s.Variant
	}
	if variant != nil {
		msgs = append(msgs, variant(msg))
	}
	got := sc.batch(sc.newBatch(sc.pool), msgs)
	if got[0].err != nil || got[0].o != idem.Processed {
		t.Fatalf("the first message of the batch: got %v; want Processed", got[0])
	}
	sc.wantDuplicate("the same message again in the batch", got[1], got[0])
	if variant != nil && !errors.Is(got[2].err, idem.ErrKeyReused) {
		t.Errorf("the message with the same key and another payload in the batch: got %v; want idem.ErrKeyReused", got[2])
	}
	sc.wantRuns(1, "a key twice in one batch is processed once")
	sc.wantApplied(msg, 1, "after the batch")
	sc.check.wantOneDelivery("a batch holding the message twice", "a key twice in one batch is applied once")
}

func (s Suite[V, M, R]) batchProcessedKey(t testing.TB, seen *fixtureSeen) {
	t.Helper()
	s.needEffect(t, seen)
	sc := s.start(t, seen, 2)
	msg := sc.fx.Message
	first := sc.mustProcess("the delivery before the batch", msg)
	got := sc.batch(sc.newBatch(sc.pool), []M{msg, msg})
	sc.wantDuplicate("the processed message in a batch", got[0], first)
	sc.wantDuplicate("the processed message again in the batch", got[1], first)
	sc.wantRuns(1, "a batch of a processed key must not run the handler")
	sc.wantApplied(msg, 1, "after the batch")
	sc.check.wantOneDelivery("the delivery and a batch of it twice", causeDuplicate)
}

func (s Suite[V, M, R]) batchFailingHandler(t testing.TB, seen *fixtureSeen) {
	t.Helper()
	s.needEffect(t, seen)
	sc := s.start(t, seen, 2)
	failed := errors.New("idemtest: the batch's transaction fails before its commit")
	// Every run fails while the failing batch is delivered: the batch's
	// transaction, and the fallback's transaction of the message (a handler
	// that keeps failing), so nothing commits.
	var failing atomic.Bool
	failing.Store(true)
	sc.atCommit = func(_ context.Context, _ pgx.Tx, _ int64) error {
		if failing.Load() {
			return failed
		}
		return nil
	}
	msg := sc.fx.Message
	b := sc.newBatch(sc.pool)
	before := sc.check.before()
	got := sc.batch(b, []M{msg, msg})
	failing.Store(false)
	failedRuns := sc.runs.Load()
	if failedRuns < 1 {
		t.Fatalf("the failing batch ran the handler to its commit %d times; want at least once", failedRuns)
	}
	for i, d := range got {
		if d.err == nil || idem.ActionFor(d.err) == idem.Ack {
			t.Errorf("message %d of the failing batch: got %v; want the failure", i, d)
		}
	}
	sc.wantApplied(msg, 0, "after the failing batch")
	sc.check.wantSame(before, "the batch that failed before its commit", causeOutsideTx)
	again := sc.batch(b, []M{msg, msg})
	if again[0].err != nil || again[0].o != idem.Processed {
		t.Fatalf("the redelivered batch: got %v; want Processed", again[0])
	}
	sc.wantDuplicate("the message twice in the redelivered batch", again[1], again[0])
	sc.wantRuns(failedRuns+1, "the failing batch's runs, then one for the redelivered batch")
	sc.wantApplied(msg, 1, "after the redelivered batch")
	sc.check.wantOneDelivery("the failed batch and its redelivery", causeOutsideTx)
}

func (s Suite[V, M, R]) batchConcurrent(t testing.TB, seen *fixtureSeen) {
	t.Helper()
	n := s.deliveries(t)
	s.needEffect(t, seen)
	sc := s.start(t, seen, n+2)
	Warm(t, sc.pool, n)
	msg := sc.fx.Message
	b := sc.newBatch(sc.pool)
	// The first batch at its commit waits for the others, as the
	// concurrent copies of one message do: every batch then overlaps it.
	var returned atomic.Int64
	var held *holdReport
	sc.atCommit = func(_ context.Context, _ pgx.Tx, run int64) error {
		if run != 1 {
			return nil
		}
		h := sc.holdUntilOthersWait(n-1, &returned)
		held = &h
		return h.err
	}
	var mu sync.Mutex
	var all []delivery[R]
	AtOnce(n, func(int) {
		got := sc.batch(b, []M{msg, msg})
		returned.Add(1)
		mu.Lock()
		all = append(all, got...)
		mu.Unlock()
	})
	if held != nil && held.err != nil {
		t.Errorf("the batches did not overlap: %v", held.err)
	}
	first, processed := processedOf(all)
	if processed != 1 {
		t.Fatalf("%d batches of the message twice at once: %d Processed; want exactly 1 (%s)", n, processed, summarizeDeliveries(all))
	}
	for _, d := range all {
		if d.o != idem.Processed {
			sc.wantDuplicate("a message of a concurrent batch", d, *first)
		}
	}
	sc.wantConcurrentRuns(n, "concurrent batches of one key run the handler once")
	sc.wantApplied(msg, 1, "after the concurrent batches")
	sc.check.wantOneDelivery(fmt.Sprintf("%d concurrent batches of the message twice", n), causeConcurrent)
}

// batchKilledMidBatch runs a child process (this test binary, this test,
// this scenario) that delivers the message twice as one batch and kills
// itself with SIGKILL in the batch's before-commit hook, then checks that
// nothing was recorded and that the redelivered batch processes the message
// once.
func (s Suite[V, M, R]) batchKilledMidBatch(t testing.TB, seen *fixtureSeen) {
	t.Helper()
	if url := os.Getenv(envKillURL); url != "" {
		ctx, child := s.killedChild(t, url)
		results, err := s.Batch(child.recv, child.pool, child.opts...)(ctx, []M{child.msg, child.msg})
		t.Fatalf("child: the batch returned (%v, %v) instead of reaching the before-commit hook, where the process kills itself", results, err)
		return
	}
	s.needEffect(t, seen)
	sc := s.start(t, seen, 2)
	msg := sc.fx.Message
	before := sc.killedBefore()
	runKilledChild(t, sc.db, msg)
	sc.wantApplied(msg, 0, "after the process was killed inside the batch's transaction")
	sc.check.wantSame(before, "the batch killed before its commit", causeOutsideTx)
	got := sc.batch(sc.newBatch(sc.pool), []M{msg, msg})
	if got[0].err != nil || got[0].o != idem.Processed {
		t.Fatalf("the redelivered batch after the killed process: got %v; want Processed", got[0])
	}
	sc.wantDuplicate("the message twice in the redelivered batch", got[1], got[0])
	sc.wantRuns(1, "the killed run never reached this process's hook; the redelivered batch ran once")
	sc.wantApplied(msg, 1, "after the redelivered batch")
	sc.check.wantOneDelivery("the killed batch and its redelivery", causeOutsideTx)
	again := sc.batch(sc.newBatch(sc.pool), []M{msg})
	sc.wantDuplicate("a batch of the message after the redelivered one", again[0], got[0])
	sc.wantRuns(1, "a Duplicate must not run the handler")
}

// processedOf returns how many of ds were Processed, and the last of them.
func processedOf[R any](ds []delivery[R]) (last *delivery[R], processed int) {
	for i, d := range ds {
		if d.err == nil && d.o == idem.Processed {
			processed++
			last = &ds[i]
		}
	}
	return last, processed
}

func summarizeDeliveries[R any](ds []delivery[R]) string {
	var texts []string
	for _, d := range ds {
		texts = append(texts, d.String())
	}
	return summarize(texts)
}
