package rabbitmq_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemtest/brokertest"
	"github.com/idemgen/idemgen/idem/internal/obs"
	"github.com/idemgen/idemgen/idem/internal/obs/obstest"
	"github.com/idemgen/idemgen/idem/rabbitmq"
)

// batchRecorder is an idem.BatchHandler over the charge inbox that records
// the size of each DeliverBatch call, how many Deliver calls came, and the
// result of each message.
type batchRecorder struct {
	h idem.BatchHandler[idem.Message[order]]

	mu      sync.Mutex
	sizes   []int
	singles int
	results []delivery
}

func (b *batchRecorder) Deliver(ctx context.Context, msg idem.Message[order]) (idem.Outcome, error) {
	at := time.Now()
	o, err := b.h.Deliver(ctx, msg)
	b.mu.Lock()
	b.singles++
	b.results = append(b.results, delivery{ID: msg.ID, Attempt: msg.Attempt, Outcome: o, Err: err, At: at})
	b.mu.Unlock()
	return o, err
}

func (b *batchRecorder) DeliverBatch(ctx context.Context, msgs []idem.Message[order]) []idem.Result[idem.None] {
	at := time.Now()
	rs := b.h.DeliverBatch(ctx, msgs)
	b.mu.Lock()
	b.sizes = append(b.sizes, len(msgs))
	for i, msg := range msgs {
		b.results = append(b.results, delivery{ID: msg.ID, Attempt: msg.Attempt, Outcome: rs[i].Outcome, Err: rs[i].Err, At: at})
	}
	b.mu.Unlock()
	return rs
}

func (b *batchRecorder) snapshot() (sizes []int, singles int, results []delivery) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]int(nil), b.sizes...), b.singles, append([]delivery(nil), b.results...)
}

// batchCharges is the charge consumer with the batch statements idemgen
// renders for its text key and json result, so that the inbox runs a
// DeliverBatch in one transaction (brokertest's table has none, and runs a
// batch as one transaction per message).
var batchCharges = func() brokertest.Charges {
	c := charges
	name := c.Table.Name
	c.Table.BatchClaim = "WITH wait AS MATERIALIZED (SELECT set_config('lock_timeout', $3::text, true) FROM (SELECT set_config('idem.lock_timeout', current_setting('lock_timeout'), true) OFFSET 0) AS saved), " +
		"m AS MATERIALIZED (SELECT * FROM unnest($1::text[], $2::bytea[]) WITH ORDINALITY AS m (k1, fp, n)), " +
		"claim AS (INSERT INTO " + name + " (key_id, fingerprint) SELECT m.k1, m.fp FROM wait, m ORDER BY m.k1 ON CONFLICT DO NOTHING " +
		"RETURNING key_id, set_config('lock_timeout', current_setting('idem.lock_timeout'), true) AS restored) " +
		"SELECT m.n FROM m JOIN claim ON claim.key_id = m.k1 WHERE claim.restored IS NOT NULL"
	c.Table.BatchLookup = "SELECT m.n, t.fingerprint, t.status, t.result FROM unnest($1::text[]) WITH ORDINALITY AS m (k1, n) JOIN " + name + " AS t ON t.key_id = m.k1"
	c.Table.BatchComplete = "UPDATE " + name + " AS t SET result = m.r::json FROM unnest($1::text[], $2::text[]) AS m (k1, r) WHERE t.key_id = m.k1"
	return c
}()

// withTxid adds to the charge table the id of the transaction that inserted
// each row.
func withTxid(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), `ALTER TABLE charged ADD COLUMN txid bigint NOT NULL DEFAULT txid_current()`); err != nil {
		t.Fatal(err)
	}
}

// failFirstAttempt fails the delivery of id while its attempt is 1.
func failFirstAttempt(id string) func(idem.Message[order]) error {
	return func(msg idem.Message[order]) error {
		if msg.ID == id && msg.Attempt == 1 {
			return errors.New("the payment service timed out")
		}
		return nil
	}
}

// TestConsumerBatches: 201 messages (190 orders, copies of 10 of them, one
// reused key) reach a BatchHandler, the charge inbox, in DeliverBatch calls
// of more than one message, never more than the prefetch, many orders
// charged in one transaction. Each message is settled by its own result:
// the order that fails on its first attempt is retried through the retry
// queue after the delay and charged once, the reused key is dead-lettered
// once, the copies are acked Duplicates, every order is charged once.
func TestConsumerBatches(t *testing.T) {
	t.Parallel()
	url := amqpURL(t)
	db := database(t)
	withTxid(t, db.Pool)
	const delay = 300 * time.Millisecond
	top := rabbitmq.Topology{Queue: uniqueName(t), RetryDelay: delay}
	declare(t, url, top)
	logs, logger := newLogs(t)
	meter := obstest.New(t)

	const orders, copies, prefetch = 190, 10, 40
	const flaky, reused = "order-b-50", "order-b-20"
	ch := channel(t, url)
	for i := range orders {
		publish(t, ch, top.Queue, fmt.Sprintf("order-b-%d", i), mustJSON(t, order{OrderID: fmt.Sprintf("b-%d", i), Amount: i}))
	}
	for i := range copies {
		publish(t, ch, top.Queue, fmt.Sprintf("order-b-%d", i), mustJSON(t, order{OrderID: fmt.Sprintf("b-%d", i), Amount: i}))
	}
	publish(t, ch, top.Queue, reused, mustJSON(t, order{OrderID: "b-20", Amount: 999}))

	rec := &batchRecorder{h: batchCharges.Inbox(db.Pool, failFirstAttempt(flaky))}
	stop := run(t, rabbitmq.NewConsumer(url, top, rec, rabbitmq.WithLogger(logger), rabbitmq.WithPrefetch(prefetch), rabbitmq.WithMeterProvider(meter)))
	// Every message once, and the flaky order's second attempt.
	const want = orders + copies + 1 + 1
	waitFor(t, 30*time.Second, "every message's result", func() bool { _, _, rs := rec.snapshot(); return len(rs) >= want })
	time.Sleep(2 * delay) // nothing more comes
	stop()

	checkBatches(t, rec, db.Pool, batchWant{orders: orders, duplicates: copies, maxSize: prefetch, flaky: flaky, reused: reused, delay: delay})
	snap := meter.Collect(t)
	deadLetters := snap.Int(t, obs.NameDeadLetters, obs.AttrSystem.String(obs.SystemRabbitMQ), obs.AttrDestination.String(top.Queue))
	retries := snap.Int(t, obs.NameRetries, obs.AttrSystem.String(obs.SystemRabbitMQ), obs.AttrDestination.String(top.Queue))
	t.Logf("%s = %d, %s = %d", obs.NameDeadLetters, deadLetters, obs.NameRetries, retries)
	if deadLetters != 1 || retries != 1 {
		t.Errorf("%s = %d, %s = %d; want 1 and 1 (the reused key, the flaky order)", obs.NameDeadLetters, deadLetters, obs.NameRetries, retries)
	}
	dead := drain(t, url, top.DeadLetterQueue())
	if len(dead) != 1 || dead[0].MessageId != reused || !strings.Contains(fmt.Sprint(dead[0].Headers[rabbitmq.HeaderReason]), "different payload") {
		t.Errorf("dead letters %d; want one, of %s, for its different payload", len(dead), reused)
	}
	for _, q := range []string{top.Queue, top.RetryQueue()} {
		if n := depth(t, url, q); n != 0 {
			t.Errorf("%d messages in %s; want none", n, q)
		}
	}
	checkAttemptLogged(t, logs)
}

// batchWant is what checkBatches expects of a run of TestConsumerBatches.
type batchWant struct {
	orders, duplicates, maxSize int
	flaky, reused               string
	delay                       time.Duration
}

// checkBatches checks the recorded calls and results and the charges: every
// message went through DeliverBatch, in batches of more than one message at
// least once and never more than maxSize; every order processed once, the
// copies Duplicates, the flaky order failed on attempt 1 and processed on
// attempt 2 after the delay, the reused key ErrKeyReused; every order
// charged once, many in one transaction.
func checkBatches(t *testing.T, rec *batchRecorder, pool *pgxpool.Pool, w batchWant) {
	t.Helper()
	sizes, singles, results := rec.snapshot()
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
	if biggest > w.maxSize {
		t.Errorf("a DeliverBatch call had %d messages; want at most %d", biggest, w.maxSize)
	}

	processed, duplicates := 0, 0
	var flaky []delivery
	reused := 0
	for _, d := range results {
		switch {
		case d.ID == w.flaky:
			flaky = append(flaky, d)
			if d.Outcome == idem.Processed {
				processed++
			}
		case d.Err == nil && d.Outcome == idem.Processed:
			processed++
		case d.Err == nil && d.Outcome == idem.Duplicate:
			duplicates++
		case d.ID == w.reused && errors.Is(d.Err, idem.ErrKeyReused):
			reused++
		default:
			t.Errorf("%s attempt %d: %v %v; want processed or a duplicate", d.ID, d.Attempt, d.Outcome, d.Err)
		}
	}
	t.Logf("results: %d processed, %d duplicates, %d reused key, %d of the flaky order", processed, duplicates, reused, len(flaky))
	if processed != w.orders || duplicates != w.duplicates || reused != 1 {
		t.Errorf("%d processed, %d duplicates, %d reused; want %d, %d and 1", processed, duplicates, reused, w.orders, w.duplicates)
	}
	switch {
	case len(flaky) != 2 || flaky[0].Attempt != 1 || idem.ActionFor(flaky[0].Err) != idem.Retry || flaky[1].Attempt != 2 || flaky[1].Outcome != idem.Processed:
		t.Errorf("the flaky order: %s\nwant a retryable failure on attempt 1, then processed on attempt 2", describe(flaky))
	case flaky[1].At.Sub(flaky[0].At) < w.delay-50*time.Millisecond:
		t.Errorf("the flaky order came back after %v; want at least the retry delay %v", flaky[1].At.Sub(flaky[0].At), w.delay)
	default:
		t.Logf("the flaky order: retried after %v (delay %v), processed on attempt 2", flaky[1].At.Sub(flaky[0].At).Round(time.Millisecond), w.delay)
	}

	rows := queryInt(t, pool, `SELECT count(*)::int FROM charged`)
	charges := queryInt(t, pool, `SELECT coalesce(sum(n), 0)::int FROM charged`)
	txids := queryInt(t, pool, `SELECT count(DISTINCT txid)::int FROM charged`)
	largest := queryInt(t, pool, `SELECT coalesce(max(n), 0)::int FROM (SELECT count(*)::int AS n FROM charged GROUP BY txid) AS per_tx`)
	t.Logf("charges: %d orders, %d charges, in %d transactions (largest: %d orders)", rows, charges, txids, largest)
	if rows != w.orders || charges != w.orders {
		t.Errorf("%d orders charged, %d charges; want %d and %d", rows, charges, w.orders, w.orders)
	}
	if largest < 2 {
		t.Errorf("no two orders were charged in one transaction")
	}
}

// TestConsumerBatchOff: WithBatch(1, 0) turns batching off for a
// BatchHandler: every message comes through Deliver, one at a time.
func TestConsumerBatchOff(t *testing.T) {
	t.Parallel()
	url := amqpURL(t)
	db := database(t)
	top := rabbitmq.Topology{Queue: uniqueName(t), RetryDelay: time.Second}
	declare(t, url, top)
	_, logger := newLogs(t)

	const total = 20
	ch := channel(t, url)
	for i := range total {
		publish(t, ch, top.Queue, fmt.Sprintf("order-n-%d", i), mustJSON(t, order{OrderID: fmt.Sprintf("n-%d", i), Amount: i}))
	}
	rec := &batchRecorder{h: batchCharges.Inbox(db.Pool, nil)}
	stop := run(t, rabbitmq.NewConsumer(url, top, rec, rabbitmq.WithLogger(logger), rabbitmq.WithPrefetch(total), rabbitmq.WithBatch(1, 0)))
	waitFor(t, 10*time.Second, "every message", func() bool { _, n, _ := rec.snapshot(); return n == total })
	stop()

	sizes, singles, _ := rec.snapshot()
	charged := queryInt(t, db.Pool, `SELECT count(*)::int FROM charged`)
	t.Logf("WithBatch(1, 0): %d Deliver calls, %d DeliverBatch calls, %d charges", singles, len(sizes), charged)
	if len(sizes) != 0 || singles != total || charged != total {
		t.Errorf("%d DeliverBatch calls %v, %d Deliver calls, %d charges; want 0, %d and %d", len(sizes), sizes, singles, charged, total, total)
	}
}

// TestWithBatchInvalid: a negative max or linger is a configuration error
// that Run returns at once, naming the option.
func TestWithBatchInvalid(t *testing.T) {
	t.Parallel()
	for _, opt := range []struct {
		name string
		opt  rabbitmq.Option
	}{
		{"WithBatch(-1, 0)", rabbitmq.WithBatch(-1, 0)},
		{"WithBatch(10, -1ms)", rabbitmq.WithBatch(10, -time.Millisecond)},
	} {
		err := rabbitmq.NewConsumer("amqp://guest:guest@127.0.0.1:5672/", rabbitmq.Topology{Queue: "q"}, &batchRecorder{}, opt.opt).Run(context.Background())
		t.Logf("%s: %v", opt.name, err)
		if err == nil || !strings.Contains(err.Error(), "WithBatch(") {
			t.Errorf("%s: Run returned %v; want an error naming WithBatch", opt.name, err)
		}
	}
}
