package jetstream_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/consumer"
	"github.com/idemgen/idemgen/idem/idemtest/brokertest"
	"github.com/idemgen/idemgen/idem/internal/obs"
	"github.com/idemgen/idemgen/idem/internal/obs/obstest"
	idemjs "github.com/idemgen/idemgen/idem/jetstream"
)

// TestConsumerBatches: 201 messages (190 orders, copies of 10 of them, one
// reused key; the copies published after the stream's deduplication window)
// reach a BatchHandler, the charge inbox, in DeliverBatch calls of more than
// one message, never more than the prefetch, many orders charged in one
// transaction. Each message is settled by its own result: the order that
// fails on its first attempt is nakked with the delay and charged once, the
// reused key is terminated and dead-lettered once, the copies are acked
// Duplicates, every order is charged once.
func TestConsumerBatches(t *testing.T) {
	t.Parallel()
	url := natsURL(t)
	db := database(t)
	brokertest.WithTxid(t, db.Pool)
	top := topology(t)
	top.DuplicateWindow = 100 * time.Millisecond // so that the copies and the reused key are stored
	declare(t, url, top)
	logs, logger := newLogs(t)
	meter := obstest.New(t)
	_, js := connect(t, url)

	const delay = 300 * time.Millisecond
	const orders, copies, prefetch = 190, 10, 40
	const flaky, reused = "order-b-50", "order-b-20"
	subject := top.Subjects[0]
	for i := range orders {
		publish(t, js, subject, fmt.Sprintf("order-b-%d", i), mustJSON(t, order{OrderID: fmt.Sprintf("b-%d", i), Amount: i}))
	}
	time.Sleep(3 * top.DuplicateWindow)
	for i := range copies {
		publish(t, js, subject, fmt.Sprintf("order-b-%d", i), mustJSON(t, order{OrderID: fmt.Sprintf("b-%d", i), Amount: i}))
	}
	publish(t, js, subject, reused, mustJSON(t, order{OrderID: "b-20", Amount: 999}))

	rec := &brokertest.BatchRecorder{H: charges.Batched().Inbox(db.Pool, brokertest.FailFirstAttempt(flaky))}
	stop := run(t, idemjs.NewConsumer(js, top, rec, consumer.WithLogger(logger), idemjs.WithPrefetch(prefetch),
		idemjs.WithRetryDelay(delay, delay), consumer.WithMeterProvider(meter)))
	// Every message once, and the flaky order's second attempt.
	const want = orders + copies + 1 + 1
	waitFor(t, 30*time.Second, "every message's result", func() bool { _, _, rs := rec.Snapshot(); return len(rs) >= want })
	waitFor(t, 10*time.Second, "every message settled", func() bool { return settled(t, js, top) })
	time.Sleep(2 * delay) // nothing more comes
	stop()

	brokertest.CheckBatches(t, rec, db.Pool, brokertest.BatchWant{Orders: orders, Duplicates: copies, MaxSize: prefetch, Flaky: flaky, Reused: reused, Delay: delay})
	snap := meter.Collect(t)
	deadLetters := snap.Int(t, obs.NameDeadLetters, obs.AttrSystem.String(obs.SystemNATS), obs.AttrDestination.String(top.Stream))
	retries := snap.Int(t, obs.NameRetries, obs.AttrSystem.String(obs.SystemNATS), obs.AttrDestination.String(top.Stream))
	t.Logf("%s = %d, %s = %d", obs.NameDeadLetters, deadLetters, obs.NameRetries, retries)
	if deadLetters != 1 || retries != 1 {
		t.Errorf("%s = %d, %s = %d; want 1 and 1 (the reused key, the flaky order)", obs.NameDeadLetters, deadLetters, obs.NameRetries, retries)
	}
	dead := streamMsgs(t, js, top.DeadLetterStreamName())
	if len(dead) != 1 || dead[0].Header.Get(idemjs.HeaderMsgID) != reused || !strings.Contains(dead[0].Header.Get(idemjs.HeaderReason), "different payload") {
		t.Errorf("dead letters %d; want one, of %s, for its different payload", len(dead), reused)
	}
	if ci := consumerInfo(t, js, top); ci.NumPending != 0 || ci.NumAckPending != 0 || ci.NumRedelivered != 0 {
		t.Errorf("consumer: %d pending, %d unacked, %d redelivered; want none", ci.NumPending, ci.NumAckPending, ci.NumRedelivered)
	}
	checkAttemptLogged(t, logs)
}

// TestConsumerInProgressForLongBatches: a DeliverBatch that takes 2.5 times
// the ack wait keeps every message of its batch (the consumer sends
// InProgress for each): each delivered once, none redelivered.
func TestConsumerInProgressForLongBatches(t *testing.T) {
	t.Parallel()
	url := natsURL(t)
	db := database(t)
	top := topology(t)
	top.AckWait = time.Second
	declare(t, url, top)
	logs, logger := newLogs(t)
	_, js := connect(t, url)

	const total = 10
	for i := range total {
		publish(t, js, top.Subjects[0], fmt.Sprintf("order-l-%d", i), mustJSON(t, order{OrderID: fmt.Sprintf("l-%d", i), Amount: i}))
	}
	var slowed atomic.Bool
	// The first message's handler waits, in the batch's transaction: every
	// message of that batch waits with it.
	rec := &brokertest.BatchRecorder{H: charges.Batched().Inbox(db.Pool, func(idem.Message[order]) error {
		if !slowed.Swap(true) {
			time.Sleep(5 * top.AckWait / 2)
		}
		return nil
	})}
	stop := run(t, idemjs.NewConsumer(js, top, rec, consumer.WithLogger(logger), consumer.WithWorkers(1), idemjs.WithPrefetch(total)))
	waitFor(t, 15*time.Second, "every order acked", func() bool { _, _, rs := rec.Snapshot(); return len(rs) == total && settled(t, js, top) })
	time.Sleep(2 * top.AckWait) // a redelivery would have come by now
	stop()

	sizes, _, results := rec.Snapshot()
	ci := consumerInfo(t, js, top)
	t.Logf("a batch of %d messages (batches %v) taking %v with an ack wait of %v: %d results, %d redelivered", sizes[0], sizes, 5*top.AckWait/2, top.AckWait, len(results), ci.NumRedelivered)
	if sizes[0] < 2 {
		t.Errorf("the slow batch had %d message(s); want more than one to cover", sizes[0])
	}
	if len(results) != total || ci.NumRedelivered != 0 {
		t.Fatalf("%d results, %d redelivered; want %d, none redelivered:%s", len(results), ci.NumRedelivered, total, describe(results))
	}
	for _, d := range results {
		if d.Attempt != 1 || d.Outcome != idem.Processed {
			t.Errorf("%s: attempt %d, %v %v; want processed on attempt 1", d.ID, d.Attempt, d.Outcome, d.Err)
		}
	}
	checkAttemptLogged(t, logs)
}

// batchWant is what checkBatches expects of a run of TestConsumerBatches.
// TestConsumerBatchOff: WithBatch(1, 0) turns batching off for a
// BatchHandler: every message comes through Deliver, one at a time.
func TestConsumerBatchOff(t *testing.T) {
	t.Parallel()
	url := natsURL(t)
	db := database(t)
	top := topology(t)
	declare(t, url, top)
	_, logger := newLogs(t)
	_, js := connect(t, url)

	const total = 20
	for i := range total {
		publish(t, js, top.Subjects[0], fmt.Sprintf("order-n-%d", i), mustJSON(t, order{OrderID: fmt.Sprintf("n-%d", i), Amount: i}))
	}
	rec := &brokertest.BatchRecorder{H: charges.Batched().Inbox(db.Pool, nil)}
	stop := run(t, idemjs.NewConsumer(js, top, rec, consumer.WithLogger(logger), idemjs.WithPrefetch(total), consumer.WithBatch(1, 0)))
	waitFor(t, 10*time.Second, "every message acked", func() bool { _, n, _ := rec.Snapshot(); return n == total && settled(t, js, top) })
	stop()

	brokertest.CheckBatchOff(t, rec, db.Pool, total)
}

// TestWithBatchInvalid: a negative max or linger is a configuration error
// that Run returns at once, naming the option.
func TestWithBatchInvalid(t *testing.T) {
	t.Parallel()
	_, js := connect(t, natsURL(t))
	brokertest.CheckWithBatchInvalid(t, func(max int, linger time.Duration) error {
		return idemjs.NewConsumer(js, idemjs.Topology{Stream: "s", Consumer: "c"}, &brokertest.BatchRecorder{}, consumer.WithBatch(max, linger)).Run(context.Background())
	})
}
