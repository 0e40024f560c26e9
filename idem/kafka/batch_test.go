package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemtest/brokertest"
	"github.com/idemgen/idemgen/idem/internal/obs"
	"github.com/idemgen/idemgen/idem/internal/obs/obstest"
	"github.com/idemgen/idemgen/idem/kafka"
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

// TestConsumerBatches: 201 records on one partition (190 orders, copies of
// 10 of them, one reused key) reach a BatchHandler, the charge inbox, in
// DeliverBatch calls of a poll's records in offset order, more than one and
// at most 100 (idem.DefaultBatchCap) per call, many orders charged in one
// transaction. Each record is settled by its own result: the reused key is
// dead-lettered once; the order that fails on its first attempt is retried
// after the delay: the offsets before it are committed and the partition
// sought back to it, so the records after it in its batch, which committed,
// come again and are Duplicates; every order is charged once and the
// committed offset ends after the last record.
func TestConsumerBatches(t *testing.T) {
	t.Parallel()
	topic, group := uniqueName(t), uniqueName(t)
	brokers := cluster(t, 1, topic, topic+".dlq")
	db := database(t)
	withTxid(t, db.Pool)
	logs, logger := newLogs(t)
	meter := obstest.New(t)

	const delay = 300 * time.Millisecond
	const orders, copies = 190, 10
	const flaky, reused = "order-b-50", "order-b-20"
	var rs []*kgo.Record
	for i := range orders {
		rs = append(rs, orderRecord(t, topic, fmt.Sprintf("order-b-%d", i), order{OrderID: fmt.Sprintf("b-%d", i), Amount: i}))
	}
	for i := range copies {
		rs = append(rs, orderRecord(t, topic, fmt.Sprintf("order-b-%d", i), order{OrderID: fmt.Sprintf("b-%d", i), Amount: i}))
	}
	rs = append(rs, orderRecord(t, topic, reused, order{OrderID: "b-20", Amount: 999}))
	produce(t, client(t, brokers), rs...)

	rec := &batchRecorder{h: batchCharges.Inbox(db.Pool, failFirstAttempt(flaky))}
	stop := run(t, kafka.NewConsumer(brokers, group, []string{topic}, rec, kafka.WithLogger(logger), kafka.WithRetryDelay(delay), kafka.WithMeterProvider(meter), fast()))
	waitFor(t, 30*time.Second, "every record done and committed", func() bool { return committed(t, brokers, group, topic, 0) == int64(len(rs)) })
	time.Sleep(2 * delay) // nothing more comes
	stop()

	// The records after the flaky order in its batch: processed, then
	// fetched again after the seek back to the flaky order.
	sizes, _, results := rec.snapshot()
	after, from := -1, 0
	for _, n := range sizes {
		for k, d := range results[from : from+n] {
			if d.ID == flaky && d.Attempt == 1 {
				after = n - 1 - k
			}
		}
		from += n
	}
	t.Logf("the flaky order's batch had %d record(s) after it: they come again after the seek back", after)
	if after < 0 {
		t.Fatalf("no DeliverBatch call had the flaky order's first attempt:%s", describe(results))
	}
	checkBatches(t, rec, db.Pool, batchWant{orders: orders, duplicates: copies + after, maxSize: idem.DefaultBatchCap, flaky: flaky, reused: reused, delay: delay})
	snap := meter.Collect(t)
	deadLetters := snap.Int(t, obs.NameDeadLetters, obs.AttrSystem.String(obs.SystemKafka), obs.AttrDestination.String(topic))
	retries := snap.Int(t, obs.NameRetries, obs.AttrSystem.String(obs.SystemKafka), obs.AttrDestination.String(topic))
	t.Logf("%s = %d, %s = %d", obs.NameDeadLetters, deadLetters, obs.NameRetries, retries)
	if deadLetters != 1 || retries != 1 {
		t.Errorf("%s = %d, %s = %d; want 1 and 1 (the reused key, the flaky order)", obs.NameDeadLetters, deadLetters, obs.NameRetries, retries)
	}
	dead := readAll(t, brokers, topic+".dlq", 2, 2*time.Second)
	if len(dead) != 1 || header(dead[0], kafka.HeaderMessageID) != reused || !strings.Contains(header(dead[0], kafka.HeaderReason), "different payload") {
		t.Errorf("dead letters %d; want one, of %s, for its different payload", len(dead), reused)
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
// BatchHandler: every record comes through Deliver, one at a time.
func TestConsumerBatchOff(t *testing.T) {
	t.Parallel()
	topic, group := uniqueName(t), uniqueName(t)
	brokers := cluster(t, 1, topic)
	db := database(t)
	_, logger := newLogs(t)

	const total = 20
	cl := client(t, brokers)
	for i := range total {
		produce(t, cl, orderRecord(t, topic, fmt.Sprintf("order-n-%d", i), order{OrderID: fmt.Sprintf("n-%d", i), Amount: i}))
	}
	rec := &batchRecorder{h: batchCharges.Inbox(db.Pool, nil)}
	stop := run(t, kafka.NewConsumer(brokers, group, []string{topic}, rec, kafka.WithLogger(logger), kafka.WithBatch(1, 0), fast()))
	waitFor(t, 10*time.Second, "every record committed", func() bool { return committed(t, brokers, group, topic, 0) == total })
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
		opt  kafka.Option
	}{
		{"WithBatch(-1, 0)", kafka.WithBatch(-1, 0)},
		{"WithBatch(10, -1ms)", kafka.WithBatch(10, -time.Millisecond)},
	} {
		err := kafka.NewConsumer([]string{"127.0.0.1:1"}, "g", []string{"t"}, &batchRecorder{}, opt.opt).Run(context.Background())
		t.Logf("%s: %v", opt.name, err)
		if err == nil || !strings.Contains(err.Error(), "WithBatch(") {
			t.Errorf("%s: Run returned %v; want an error naming WithBatch", opt.name, err)
		}
	}
}
