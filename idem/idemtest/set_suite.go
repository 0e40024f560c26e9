package idemtest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/idem"
)

// The batch scenarios of a set-based handler, one that takes the whole batch
// (msgs []M). They run when the Suite has Rekey (and SetWith, for all but
// ScenarioBatchOverlapping), besides the batch scenarios every handler runs.
const (
	// ScenarioBatchFreshMessages: after the message was processed, a batch
	// of it, a message of another key, it again, its key with another
	// payload (with a Variant) and a message of a third key calls the
	// handler once, with exactly the two messages of the new keys, in input
	// order: the processed key is a Duplicate with the stored result, the
	// reused key idem.ErrKeyReused, the new keys Processed.
	ScenarioBatchFreshMessages = "batch_fresh_messages"
	// ScenarioBatchOverlapping: N batches at once, of two keys out of three
	// each, overlapping and in different orders, process each key exactly
	// once: one Processed a key, every other message a Duplicate with its
	// result, no error (no deadlock), three inbox rows, and at most three
	// commits.
	ScenarioBatchOverlapping = "batch_overlapping"
	// ScenarioBatchEachAlone: a batch of two keys whose handler fails when
	// it is given both is rolled back, and each message is then delivered
	// alone, as a batch of one, and Processed: the handler is given 2, then
	// 1 and 1 messages; two inbox rows.
	ScenarioBatchEachAlone = "batch_each_alone"
	// ScenarioBatchWrongLength: a handler that returns one result more than
	// the messages it is given fails every message with an error naming the
	// handler and both lengths, and commits nothing (no inbox row, no
	// effect, no outgoing message).
	ScenarioBatchWrongLength = "batch_wrong_length"
)

// SetWrap is what a scenario puts around a set-based handler (Wrapped): it
// gets the messages the handler was given and what it returned, and returns
// what the wrapper gets instead.
type SetWrap[M, R any] func(ctx context.Context, msgs []M, results []R, err error) ([]R, error)

// Wrapped returns handler, a set-based handler (adapt one without a result
// with idemimpl.NoResultSet), with wrap applied to what it returns: for
// Suite.SetWith.
func Wrapped[M, R any](wrap SetWrap[M, R], handler func(ctx context.Context, tx pgx.Tx, msgs []M) ([]R, error)) func(context.Context, pgx.Tx, []M) ([]R, error) {
	return func(ctx context.Context, tx pgx.Tx, msgs []M) ([]R, error) {
		results, err := handler(ctx, tx, msgs)
		return wrap(ctx, msgs, results, err)
	}
}

// WrappedPublishing is Wrapped for a set-based handler that takes an
// *idem.Outbox (adapt one without a result with
// idemimpl.NoResultPublishingSet).
func WrappedPublishing[M, R any](wrap SetWrap[M, R], handler func(ctx context.Context, tx pgx.Tx, out *idem.Outbox, msgs []M) ([]R, error)) func(context.Context, pgx.Tx, *idem.Outbox, []M) ([]R, error) {
	return func(ctx context.Context, tx pgx.Tx, out *idem.Outbox, msgs []M) ([]R, error) {
		results, err := handler(ctx, tx, out, msgs)
		return wrap(ctx, msgs, results, err)
	}
}

// setScenarios returns the scenarios of a set-based handler, when the Suite
// has what they need.
func (s Suite[V, M, R]) setScenarios(seen *fixtureSeen) []Scenario {
	if s.Batch == nil || s.Rekey == nil {
		return nil
	}
	always := func() (bool, string) { return true, "" }
	scenarios := []Scenario{
		{Name: ScenarioBatchOverlapping, Run: func(t testing.TB) { s.batchOverlapping(t, seen) }, applies: always},
	}
	if s.SetWith == nil {
		return scenarios
	}
	return append([]Scenario{
		{Name: ScenarioBatchFreshMessages, Run: func(t testing.TB) { s.batchFreshMessages(t, seen) }, applies: always},
	}, append(scenarios,
		Scenario{Name: ScenarioBatchEachAlone, Run: func(t testing.TB) { s.batchEachAlone(t, seen) }, applies: always},
		Scenario{Name: ScenarioBatchWrongLength, Run: func(t testing.TB) { s.batchWrongLength(t, seen) }, applies: always},
	)...)
}

// calls records what a wrapped set-based handler was given, run by run.
type calls[M any] struct {
	mu   sync.Mutex
	msgs [][]M
}

func (c *calls[M]) record(msgs []M) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.msgs = append(c.msgs, append([]M(nil), msgs...))
}

func (c *calls[M]) lengths() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := make([]int, len(c.msgs))
	for i, m := range c.msgs {
		n[i] = len(m)
	}
	return n
}

// newSet builds the batch consumer under test with wrap around its handler.
func (sc *scenario[V, M, R]) newSet(wrap SetWrap[M, R]) BatchFunc[M, R] {
	opts := append(append([]idem.Option{WithTestLogger(sc.t)}, sc.s.Options...),
		idem.WithBeforeCommit(sc.beforeCommit), idem.WithClaimWait(claimWait))
	b := sc.s.SetWith(sc.fx.Receiver, sc.pool, wrap, opts...)
	if b == nil {
		sc.t.Fatal("idemtest: Suite.SetWith returned a nil BatchFunc")
	}
	return b
}

func (s Suite[V, M, R]) batchFreshMessages(t testing.TB, seen *fixtureSeen) {
	t.Helper()
	s.needEffect(t, seen)
	sc := s.start(t, seen, 2)
	msg := sc.fx.Message
	first := sc.mustProcess("the delivery before the batch", msg)
	b, c := s.Rekey(msg), s.Rekey(msg)
	batch := []M{msg, b, msg}
	variant := sc.fx.Variant
	if variant == nil {
		variant = s.Variant
	}
	if variant != nil {
		batch = append(batch, variant(msg))
	}
	batch = append(batch, c)
	var given calls[M]
	got := sc.batch(sc.newSet(func(_ context.Context, msgs []M, results []R, err error) ([]R, error) {
		given.record(msgs)
		return results, err
	}), batch)
	if len(given.msgs) != 1 || !reflect.DeepEqual(given.msgs[0], []M{b, c}) {
		t.Fatalf("the handler was given %d batches (%v); want one, the two messages of new keys in input order, [%v %v]", len(given.msgs), given.msgs, b, c)
	}
	sc.wantDuplicate("the processed message in the batch", got[0], first)
	sc.wantDuplicate("the processed message again in the batch", got[2], first)
	for _, i := range []int{1, len(batch) - 1} {
		if got[i].err != nil || got[i].o != idem.Processed {
			t.Errorf("message %d of the batch, of a new key: got %v; want Processed", i, got[i])
		}
	}
	if variant != nil && !errors.Is(got[3].err, idem.ErrKeyReused) {
		t.Errorf("the message with the processed key and another payload in the batch: got %v; want idem.ErrKeyReused", got[3])
	}
	sc.wantRuns(2, "the delivery before the batch, then the batch")
	sc.wantInboxRows(3, "after the batch")
}

func (s Suite[V, M, R]) batchOverlapping(t testing.TB, seen *fixtureSeen) {
	t.Helper()
	s.needEffect(t, seen)
	n := s.deliveries(t)
	sc := s.start(t, seen, n+2)
	Warm(t, sc.pool, n)
	keys := []M{sc.fx.Message, s.Rekey(sc.fx.Message), s.Rekey(sc.fx.Message)}
	batches := [][]int{{0, 1}, {1, 2}, {2, 0}, {1, 0}, {2, 1}, {0, 2}}
	b := sc.newBatch(sc.pool)
	var mu sync.Mutex
	got := make([][]delivery[R], len(keys))
	AtOnce(n, func(i int) {
		which := batches[i%len(batches)]
		msgs := make([]M, len(which))
		for j, k := range which {
			msgs[j] = keys[k]
		}
		results := sc.batch(b, msgs)
		mu.Lock()
		for j, k := range which {
			got[k] = append(got[k], results[j])
		}
		mu.Unlock()
	})
	for k, ds := range got {
		first, processed := processedOf(ds)
		if processed != 1 {
			t.Errorf("key %d of 3 in %d overlapping batches at once: %d Processed; want exactly 1 (%s)", k+1, n, processed, summarizeDeliveries(ds))
			continue
		}
		for _, d := range ds {
			if d.o != idem.Processed {
				sc.wantDuplicate(fmt.Sprintf("a message of key %d in an overlapping batch", k+1), d, *first)
			}
		}
	}
	// The claim-first protocol runs a batch only on keys it claimed. The
	// default one lets a batch run and roll back at its INSERT, and its
	// messages then go one by one: the outcomes above prove one commit.
	switch runs := sc.runs.Load(); {
	case pessimistic(s.Options) && (runs < 1 || runs > 3):
		t.Errorf("overlapping batches of 3 keys committed %d times; want 1 to 3: each commit processes a key that none did before", runs)
	case runs < 1:
		t.Errorf("overlapping batches of 3 keys reached their commit %d times; want at least 1", runs)
	default:
		t.Logf("%d overlapping batches of 3 keys: the handler reached its commit %d times", n, runs)
	}
	sc.wantInboxRows(3, "after the overlapping batches")
}

func (s Suite[V, M, R]) batchEachAlone(t testing.TB, seen *fixtureSeen) {
	t.Helper()
	s.needEffect(t, seen)
	sc := s.start(t, seen, 2)
	failed := errors.New("idemtest: the handler fails when it is given more than one message")
	msgs := []M{sc.fx.Message, s.Rekey(sc.fx.Message)}
	var given calls[M]
	got := sc.batch(sc.newSet(func(_ context.Context, msgs []M, results []R, err error) ([]R, error) {
		given.record(msgs)
		if err == nil && len(msgs) > 1 {
			return nil, failed
		}
		return results, err
	}), msgs)
	if l := given.lengths(); !reflect.DeepEqual(l, []int{2, 1, 1}) {
		t.Errorf("the handler was given batches of %v messages; want [2 1 1]: the failed batch, then each message alone", l)
	}
	for i, d := range got {
		if d.err != nil || d.o != idem.Processed {
			t.Errorf("message %d, delivered alone after the failed batch: got %v; want Processed", i, d)
		}
	}
	sc.wantRuns(2, "the failed batch never reached its commit; each message alone did")
	sc.wantInboxRows(2, "after each message was delivered alone")
	again := sc.batch(sc.newBatch(sc.pool), msgs)
	for i := range again {
		sc.wantDuplicate(fmt.Sprintf("message %d in the batch again", i), again[i], got[i])
	}
}

func (s Suite[V, M, R]) batchWrongLength(t testing.TB, seen *fixtureSeen) {
	t.Helper()
	s.needEffect(t, seen)
	sc := s.start(t, seen, 2)
	msg := sc.fx.Message
	before := sc.check.before()
	var ran atomic.Int64
	got := sc.batch(sc.newSet(func(_ context.Context, msgs []M, results []R, err error) ([]R, error) {
		ran.Add(1)
		var zero R
		return append(results, zero), err
	}), []M{msg, s.Rekey(msg)})
	if ran.Load() < 1 {
		t.Fatal("the handler was never called")
	}
	for i, d := range got {
		switch {
		case d.err == nil:
			t.Errorf("message %d, whose handler returned one result too many: got %v; want an error", i, d)
		case !strings.Contains(d.err.Error(), s.Handler) || !strings.Contains(d.err.Error(), "returned 2 results for 1 message"):
			t.Errorf("message %d, whose handler returned one result too many: the error %q does not name the handler %s and both lengths (returned 2 results for 1 message, delivered alone after the batch)",
				i, d.err, s.Handler)
		}
	}
	sc.wantRuns(0, "a handler with the wrong number of results never reaches the commit")
	sc.wantApplied(msg, 0, "after the batch whose handler returned the wrong number of results")
	sc.check.wantSame(before, "the batch whose handler returned one result too many", causeOutsideTx)
}
