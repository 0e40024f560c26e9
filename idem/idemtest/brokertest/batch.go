package brokertest

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/idem"
)

// What the adapters' batch tests share: a BatchHandler that records its
// calls, the charge consumer with batch statements, and the checks of a
// batched run.

// BatchRecorder is an idem.BatchHandler over the charge inbox that records
// the size of each DeliverBatch call, how many Deliver calls came, and the
// result of each message.
type BatchRecorder struct {
	H idem.BatchHandler[idem.Message[Order]]

	mu      sync.Mutex
	sizes   []int
	singles int
	results []Delivery
}

// Deliver delivers msg and records it.
func (b *BatchRecorder) Deliver(ctx context.Context, msg idem.Message[Order]) (idem.Outcome, error) {
	at := time.Now()
	o, err := b.H.Deliver(ctx, msg)
	b.mu.Lock()
	b.singles++
	b.results = append(b.results, Delivery{ID: msg.ID, Attempt: msg.Attempt, Outcome: o, Err: err, At: at})
	b.mu.Unlock()
	return o, err
}

// DeliverBatch delivers msgs and records the call and each result.
func (b *BatchRecorder) DeliverBatch(ctx context.Context, msgs []idem.Message[Order]) []idem.Result[idem.None] {
	at := time.Now()
	rs := b.H.DeliverBatch(ctx, msgs)
	b.mu.Lock()
	b.sizes = append(b.sizes, len(msgs))
	for i, msg := range msgs {
		b.results = append(b.results, Delivery{ID: msg.ID, Attempt: msg.Attempt, Outcome: rs[i].Outcome, Err: rs[i].Err, At: at})
	}
	b.mu.Unlock()
	return rs
}

// Snapshot returns the sizes of the DeliverBatch calls, the number of
// Deliver calls and every result so far.
func (b *BatchRecorder) Snapshot() (sizes []int, singles int, results []Delivery) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]int(nil), b.sizes...), b.singles, append([]Delivery(nil), b.results...)
}

// Batched is the charge consumer whose inbox runs a DeliverBatch in one
// transaction (idem.WithBatchCap's default); the consumer NewCharges
// declares runs it as one transaction per message (a cap of 1), so that each
// message of a batch commits or fails on its own.
func (c Charges) Batched() Charges {
	c.batched = true
	return c
}

// WithTxid adds to the charge table the id of the transaction that inserted
// each row.
func WithTxid(t testing.TB, pool *pgxpool.Pool) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), `ALTER TABLE charged ADD COLUMN txid bigint NOT NULL DEFAULT txid_current()`); err != nil {
		t.Fatal(err)
	}
}

// FailFirstAttempt fails the delivery of id while its attempt is 1.
func FailFirstAttempt(id string) func(idem.Message[Order]) error {
	return func(msg idem.Message[Order]) error {
		if msg.ID == id && msg.Attempt == 1 {
			return errors.New("the payment service timed out")
		}
		return nil
	}
}

// BatchWant is what CheckBatches expects of a run.
type BatchWant struct {
	Orders, Duplicates, MaxSize int
	Flaky, Reused               string
	Delay                       time.Duration
}

// CheckBatches checks the recorded calls and results and the charges: every
// message went through DeliverBatch, in batches of more than one message at
// least once and never more than maxSize; every order processed once, the
// copies Duplicates, the flaky order failed on attempt 1 and processed on
// attempt 2 after the delay, the reused key ErrKeyReused; every order
// charged once, many in one transaction.
func CheckBatches(t testing.TB, rec *BatchRecorder, pool *pgxpool.Pool, w BatchWant) {
	t.Helper()
	sizes, singles, results := rec.Snapshot()
	biggest, sum := 0, 0
	for _, n := range sizes {
		biggest, sum = max(biggest, n), sum+n
	}
	t.Logf("%d DeliverBatch calls for %d messages (largest %d, mean %.1f), %d Deliver calls", len(sizes), sum, biggest, float64(sum)/float64(max(len(sizes), 1)), singles)
	if singles != 0 {
		t.Errorf("%d Deliver calls; want every message through DeliverBatch", singles)
	}
	if biggest < 2 {
		t.Errorf("no DeliverBatch call had more than one message: sizes %v", sizes)
	}
	if biggest > w.MaxSize {
		t.Errorf("a DeliverBatch call had %d messages; want at most %d", biggest, w.MaxSize)
	}

	processed, duplicates := 0, 0
	var flaky []Delivery
	reused := 0
	for _, d := range results {
		switch {
		case d.ID == w.Flaky:
			flaky = append(flaky, d)
			if d.Outcome == idem.Processed {
				processed++
			}
		case d.Err == nil && d.Outcome == idem.Processed:
			processed++
		case d.Err == nil && d.Outcome == idem.Duplicate:
			duplicates++
		case d.ID == w.Reused && errors.Is(d.Err, idem.ErrKeyReused):
			reused++
		default:
			t.Errorf("%s attempt %d: %v %v; want processed or a duplicate", d.ID, d.Attempt, d.Outcome, d.Err)
		}
	}
	t.Logf("results: %d processed, %d duplicates, %d reused key, %d of the flaky order", processed, duplicates, reused, len(flaky))
	if processed != w.Orders || duplicates != w.Duplicates || reused != 1 {
		t.Errorf("%d processed, %d duplicates, %d reused; want %d, %d and 1", processed, duplicates, reused, w.Orders, w.Duplicates)
	}
	switch {
	case len(flaky) != 2 || flaky[0].Attempt != 1 || idem.ActionFor(flaky[0].Err) != idem.Retry || flaky[1].Attempt != 2 || flaky[1].Outcome != idem.Processed:
		t.Errorf("the flaky order: %s\nwant a retryable failure on attempt 1, then processed on attempt 2", Describe(flaky))
	case flaky[1].At.Sub(flaky[0].At) < w.Delay-50*time.Millisecond:
		t.Errorf("the flaky order came back after %v; want at least the retry delay %v", flaky[1].At.Sub(flaky[0].At), w.Delay)
	default:
		t.Logf("the flaky order: retried after %v (delay %v), processed on attempt 2", flaky[1].At.Sub(flaky[0].At).Round(time.Millisecond), w.Delay)
	}

	rows := QueryInt(t, pool, `SELECT count(*)::int FROM charged`)
	charges := QueryInt(t, pool, `SELECT coalesce(sum(n), 0)::int FROM charged`)
	txids := QueryInt(t, pool, `SELECT count(DISTINCT txid)::int FROM charged`)
	largest := QueryInt(t, pool, `SELECT coalesce(max(n), 0)::int FROM (SELECT count(*)::int AS n FROM charged GROUP BY txid) AS per_tx`)
	t.Logf("charges: %d orders, %d charges, in %d transactions (largest: %d orders)", rows, charges, txids, largest)
	if rows != w.Orders || charges != w.Orders {
		t.Errorf("%d orders charged, %d charges; want %d and %d", rows, charges, w.Orders, w.Orders)
	}
	if largest < 2 {
		t.Errorf("no two orders were charged in one transaction")
	}
}

// CheckBatchOff checks a run with WithBatch(1, 0) of total messages: every
// message came through Deliver, none through DeliverBatch, and each was
// charged.
func CheckBatchOff(t testing.TB, rec *BatchRecorder, pool *pgxpool.Pool, total int) {
	t.Helper()
	sizes, singles, _ := rec.Snapshot()
	charged := QueryInt(t, pool, `SELECT count(*)::int FROM charged`)
	t.Logf("WithBatch(1, 0): %d Deliver calls, %d DeliverBatch calls, %d charges", singles, len(sizes), charged)
	if len(sizes) != 0 || singles != total || charged != total {
		t.Errorf("%d DeliverBatch calls %v, %d Deliver calls, %d charges; want 0, %d and %d", len(sizes), sizes, singles, charged, total, total)
	}
}

// CheckWithBatchInvalid checks that a negative max or linger is a
// configuration error naming WithBatch: run returns what a consumer's Run
// returns with WithBatch(max, linger).
func CheckWithBatchInvalid(t testing.TB, run func(max int, linger time.Duration) error) {
	t.Helper()
	for _, c := range []struct {
		name   string
		max    int
		linger time.Duration
	}{
		{"WithBatch(-1, 0)", -1, 0},
		{"WithBatch(10, -1ms)", 10, -time.Millisecond},
	} {
		err := run(c.max, c.linger)
		t.Logf("%s: %v", c.name, err)
		if err == nil || !strings.Contains(err.Error(), "WithBatch(") {
			t.Errorf("%s: Run returned %v; want an error naming WithBatch", c.name, err)
		}
	}
}
