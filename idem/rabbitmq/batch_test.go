package rabbitmq_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idemgen/idemgen/idem/consumer"
	"github.com/idemgen/idemgen/idem/idemtest/brokertest"
	"github.com/idemgen/idemgen/idem/internal/obs"
	"github.com/idemgen/idemgen/idem/internal/obs/obstest"
	"github.com/idemgen/idemgen/idem/rabbitmq"
)

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
	brokertest.WithTxid(t, db.Pool)
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

	rec := &brokertest.BatchRecorder{H: charges.Batched().Inbox(db.Pool, brokertest.FailFirstAttempt(flaky))}
	stop := run(t, rabbitmq.NewConsumer(url, top, rec, consumer.WithLogger(logger), rabbitmq.WithPrefetch(prefetch), consumer.WithMeterProvider(meter)))
	// Every message once, and the flaky order's second attempt.
	const want = orders + copies + 1 + 1
	waitFor(t, 30*time.Second, "every message's result", func() bool { _, _, rs := rec.Snapshot(); return len(rs) >= want })
	time.Sleep(2 * delay) // nothing more comes
	stop()

	brokertest.CheckBatches(t, rec, db.Pool, brokertest.BatchWant{Orders: orders, Duplicates: copies, MaxSize: prefetch, Flaky: flaky, Reused: reused, Delay: delay})
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
	rec := &brokertest.BatchRecorder{H: charges.Batched().Inbox(db.Pool, nil)}
	stop := run(t, rabbitmq.NewConsumer(url, top, rec, consumer.WithLogger(logger), rabbitmq.WithPrefetch(total), consumer.WithBatch(1, 0)))
	waitFor(t, 10*time.Second, "every message", func() bool { _, n, _ := rec.Snapshot(); return n == total })
	stop()

	brokertest.CheckBatchOff(t, rec, db.Pool, total)
}

// TestWithBatchInvalid: a negative max or linger is a configuration error
// that Run returns at once, naming the option.
func TestWithBatchInvalid(t *testing.T) {
	t.Parallel()
	brokertest.CheckWithBatchInvalid(t, func(max int, linger time.Duration) error {
		return rabbitmq.NewConsumer("amqp://guest:guest@127.0.0.1:5672/", rabbitmq.Topology{Queue: "q"}, &brokertest.BatchRecorder{}, consumer.WithBatch(max, linger)).Run(context.Background())
	})
}
