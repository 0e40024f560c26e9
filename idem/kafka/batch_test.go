package kafka_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/consumer"
	"github.com/idemgen/idemgen/idem/idemtest/brokertest"
	"github.com/idemgen/idemgen/idem/internal/obs"
	"github.com/idemgen/idemgen/idem/internal/obs/obstest"
	"github.com/idemgen/idemgen/idem/kafka"
)

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
	brokertest.WithTxid(t, db.Pool)
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

	rec := &brokertest.BatchRecorder{H: charges.Batched().Inbox(db.Pool, brokertest.FailFirstAttempt(flaky))}
	stop := run(t, kafka.NewConsumer(brokers, group, []string{topic}, rec, consumer.WithLogger(logger), kafka.WithRetryDelay(delay), consumer.WithMeterProvider(meter), fast()))
	waitFor(t, 30*time.Second, "every record done and committed", func() bool { return committed(t, brokers, group, topic, 0) == int64(len(rs)) })
	time.Sleep(2 * delay) // nothing more comes
	stop()

	// The records after the flaky order in its batch: processed, then
	// fetched again after the seek back to the flaky order.
	sizes, _, results := rec.Snapshot()
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
	brokertest.CheckBatches(t, rec, db.Pool, brokertest.BatchWant{Orders: orders, Duplicates: copies + after, MaxSize: idem.DefaultBatchCap, Flaky: flaky, Reused: reused, Delay: delay})
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
	rec := &brokertest.BatchRecorder{H: charges.Batched().Inbox(db.Pool, nil)}
	stop := run(t, kafka.NewConsumer(brokers, group, []string{topic}, rec, consumer.WithLogger(logger), consumer.WithBatch(1, 0), fast()))
	waitFor(t, 10*time.Second, "every record committed", func() bool { return committed(t, brokers, group, topic, 0) == total })
	stop()

	brokertest.CheckBatchOff(t, rec, db.Pool, total)
}

// TestWithBatchInvalid: a negative max or linger is a configuration error
// that Run returns at once, naming the option.
func TestWithBatchInvalid(t *testing.T) {
	t.Parallel()
	brokertest.CheckWithBatchInvalid(t, func(max int, linger time.Duration) error {
		return kafka.NewConsumer([]string{"127.0.0.1:1"}, "g", []string{"t"}, &brokertest.BatchRecorder{}, consumer.WithBatch(max, linger)).Run(context.Background())
	})
}
