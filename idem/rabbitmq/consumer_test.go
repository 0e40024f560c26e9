package rabbitmq_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/consumer"
	"github.com/idemgen/idemgen/idem/internal/obs"
	"github.com/idemgen/idemgen/idem/internal/obs/obstest"
	"github.com/idemgen/idemgen/idem/rabbitmq"
)

// TestConsumerPublishedThreeTimes: the same order published three times (a
// producer's retry) is charged once; the two copies after the first are
// Duplicates, and all three are acked.
func TestConsumerPublishedThreeTimes(t *testing.T) {
	t.Parallel()
	url := amqpURL(t)
	db := database(t)
	top := rabbitmq.Topology{Queue: uniqueName(t), RetryDelay: time.Second}
	declare(t, url, top)
	logs, logger := newLogs(t)

	ch := channel(t, url)
	body := mustJSON(t, order{OrderID: "o-1", Amount: 42})
	for range 3 {
		publish(t, ch, top.Queue, "order-o-1", body)
	}
	var rec recorder
	stop := run(t, rabbitmq.NewConsumer(url, top, rec.Wrap(chargeInbox(db.Pool, nil), nil), consumer.WithLogger(logger)))
	waitFor(t, 10*time.Second, "three deliveries", func() bool { return len(rec.Snapshot()) == 3 })
	stop()

	ds := rec.Snapshot()
	if p, d := rec.Count(idem.Processed), rec.Count(idem.Duplicate); p != 1 || d != 2 {
		t.Fatalf("processed %d, duplicates %d; want 1 and 2:%s", p, d, describe(ds))
	}
	charged := queryInt(t, db.Pool, `SELECT coalesce(sum(n), 0)::int FROM charged`)
	t.Logf("published 3 times: %d processed, %d duplicates, %d charge(s)", rec.Count(idem.Processed), rec.Count(idem.Duplicate), charged)
	if charged != 1 {
		t.Fatalf("charged %d times; want once", charged)
	}
	// Stopped: whatever was not acked is back in the queue.
	if n := depth(t, url, top.Queue); n != 0 {
		t.Fatalf("%d messages left in %s after the stop; want all three acked", n, top.Queue)
	}
	checkAttemptLogged(t, logs)
}

// TestConsumerRedeliveryAfterCommitBeforeAck: the consumer's connection is
// cut after the handler committed and before the ack, so the broker
// redelivers the message; the redelivery (attempt 2, from a quorum queue's
// x-delivery-count) is a Duplicate and the order is charged once.
func TestConsumerRedeliveryAfterCommitBeforeAck(t *testing.T) {
	t.Parallel()
	url := amqpURL(t)
	db := database(t)
	top := rabbitmq.Topology{Queue: uniqueName(t), RetryDelay: time.Second, Quorum: true}
	declare(t, url, top)
	logs, logger := newLogs(t)

	var dialed conns
	var cutOnce sync.Once
	var rec recorder
	// The hook runs after Deliver returned (the commit happened) and before
	// the consumer acks: it cuts the connection the ack would go on.
	h := rec.Wrap(chargeInbox(db.Pool, nil), func(_ idem.Message[order], o idem.Outcome, err error) {
		if o == idem.Processed {
			cutOnce.Do(dialed.cut)
		}
	})
	stop := run(t, rabbitmq.NewConsumer(url, top, h, consumer.WithLogger(logger),
		rabbitmq.WithConfig(amqp.Config{Dial: dialed.dial}), rabbitmq.WithBackoff(50*time.Millisecond, time.Second)))
	publish(t, channel(t, url), top.Queue, "order-o-2", mustJSON(t, order{OrderID: "o-2", Amount: 7}))
	waitFor(t, 15*time.Second, "the redelivery", func() bool { return len(rec.Snapshot()) >= 2 })
	waitFor(t, 5*time.Second, "the queue empty", func() bool { return depth(t, url, top.Queue) == 0 })
	stop()

	ds := rec.Snapshot()
	if len(ds) != 2 || ds[0].Outcome != idem.Processed || ds[1].Outcome != idem.Duplicate {
		t.Fatalf("deliveries: %s\nwant processed, then duplicate", describe(ds))
	}
	if ds[0].Attempt != 1 || ds[1].Attempt != 2 {
		t.Errorf("attempts %d and %d; want 1 and 2 (x-delivery-count of the redelivery)", ds[0].Attempt, ds[1].Attempt)
	}
	charged := queryInt(t, db.Pool, `SELECT coalesce(sum(n), 0)::int FROM charged`)
	t.Logf("cut after the commit: %v then %v, %d charge(s)", ds[0].Outcome, ds[1].Outcome, charged)
	if charged != 1 {
		t.Fatalf("charged %d times; want once", charged)
	}
	if n := depth(t, url, top.Queue); n != 0 {
		t.Fatalf("%d messages left in the queue after the stop; want the duplicate acked", n)
	}
	checkAttemptLogged(t, logs)
}

// TestConsumerDeadLetters: an undecodable body, a body over the size limit,
// a message without the message_id the key needs and a reused key each end in
// the dead-letter queue once, with the reason, and are not retried.
func TestConsumerDeadLetters(t *testing.T) {
	t.Parallel()
	url := amqpURL(t)
	db := database(t)
	top := rabbitmq.Topology{Queue: uniqueName(t), RetryDelay: 200 * time.Millisecond}
	declare(t, url, top)
	logs, logger := newLogs(t)
	meter := obstest.New(t)

	var rec recorder
	stop := run(t, rabbitmq.NewConsumer(url, top, rec.Wrap(chargeInbox(db.Pool, nil), nil),
		consumer.WithLogger(logger), consumer.WithMaxBodySize(256), consumer.WithMeterProvider(meter)))
	ch := channel(t, url)
	publish(t, ch, top.Queue, "order-o-3", mustJSON(t, order{OrderID: "o-3", Amount: 1}))
	waitFor(t, 10*time.Second, "the first order", func() bool { return rec.Count(idem.Processed) == 1 })
	publish(t, ch, top.Queue, "undecodable", []byte(`{"order_id": "o-4", "amount": `))
	publish(t, ch, top.Queue, "oversized", mustJSON(t, order{OrderID: strings.Repeat("x", 300)}))
	publish(t, ch, top.Queue, "", mustJSON(t, order{OrderID: "o-5", Amount: 1}))
	publish(t, ch, top.Queue, "order-o-3", mustJSON(t, order{OrderID: "o-3", Amount: 2})) // the key reused

	waitFor(t, 10*time.Second, "four dead letters", func() bool { return depth(t, url, top.DeadLetterQueue()) == 4 })
	// Several retry delays later nothing more has happened: not retried.
	time.Sleep(5 * top.RetryDelay)
	stop()

	dead := drain(t, url, top.DeadLetterQueue())
	reasons := map[string]string{}
	for _, d := range dead {
		if _, dup := reasons[d.MessageId]; dup {
			t.Errorf("%q dead-lettered twice", d.MessageId)
		}
		reasons[d.MessageId], _ = d.Headers[rabbitmq.HeaderReason].(string)
		if q, _ := d.Headers[rabbitmq.HeaderQueue].(string); q != top.Queue {
			t.Errorf("%q: %s = %q; want %q", d.MessageId, rabbitmq.HeaderQueue, q, top.Queue)
		}
	}
	for id, want := range map[string]string{
		"undecodable": "payload does not decode",
		"oversized":   "WithMaxBodySize",
		"":            "invalid key",
		"order-o-3":   "different payload",
	} {
		if got, ok := reasons[id]; !ok || !strings.Contains(got, want) {
			t.Errorf("dead letter %q: reason %q (present %v); want one mentioning %q", id, got, ok, want)
		}
	}
	if len(dead) != 4 {
		t.Errorf("%d dead letters; want 4", len(dead))
	}
	// The handler saw the processed order, the id-less one and the reused
	// key once each; undecodable and oversized bodies never reached it.
	if ds := rec.Snapshot(); len(ds) != 3 {
		t.Errorf("the handler was called %d times; want 3:%s", len(ds), describe(ds))
	}
	for _, q := range []string{top.Queue, top.RetryQueue()} {
		if n := depth(t, url, q); n != 0 {
			t.Errorf("%d messages in %s; want none", n, q)
		}
	}
	if n := queryInt(t, db.Pool, `SELECT coalesce(sum(n), 0)::int FROM charged`); n != 1 {
		t.Errorf("%d charges; want 1 (the first order)", n)
	}
	// Each dead letter is counted once, under the system and the queue consumed; nothing was retried.
	snap := meter.Collect(t)
	deadLetters := snap.Int(t, obs.NameDeadLetters, obs.AttrSystem.String(obs.SystemRabbitMQ), obs.AttrDestination.String(top.Queue))
	retries := snap.Int(t, obs.NameRetries, obs.AttrSystem.String(obs.SystemRabbitMQ), obs.AttrDestination.String(top.Queue))
	if deadLetters != int64(len(dead)) || retries != 0 {
		t.Errorf("%s = %d, %s = %d; want %d and 0", obs.NameDeadLetters, deadLetters, obs.NameRetries, retries, len(dead))
	}
	t.Logf("%s = %d, %s = %d", obs.NameDeadLetters, deadLetters, obs.NameRetries, retries)
	t.Logf("dead letters: %d, with reasons %q", len(dead), reasons)
	checkAttemptLogged(t, logs)
}

// TestConsumerRetryWithDelay: a handler that fails twice and then succeeds is
// retried through the retry queue, each time after the retry delay (not in a
// hot requeue loop), and the order is charged once, on attempt 3.
func TestConsumerRetryWithDelay(t *testing.T) {
	t.Parallel()
	url := amqpURL(t)
	db := database(t)
	const delay = 500 * time.Millisecond
	top := rabbitmq.Topology{Queue: uniqueName(t), RetryDelay: delay}
	declare(t, url, top)
	logs, logger := newLogs(t)

	var failures atomic.Int32
	flaky := chargeInbox(db.Pool, func(msg idem.Message[order]) error {
		if failures.Add(1) <= 2 {
			return errors.New("the payment service timed out")
		}
		return nil
	})
	var rec recorder
	stop := run(t, rabbitmq.NewConsumer(url, top, rec.Wrap(flaky, nil), consumer.WithLogger(logger)))
	publish(t, channel(t, url), top.Queue, "order-o-6", mustJSON(t, order{OrderID: "o-6", Amount: 3}))
	waitFor(t, 15*time.Second, "the order processed", func() bool { return rec.Count(idem.Processed) == 1 })
	time.Sleep(2 * delay) // no further delivery comes
	stop()

	ds := rec.Snapshot()
	if len(ds) != 3 {
		t.Fatalf("%d deliveries; want 3 (two failures, then processed):%s", len(ds), describe(ds))
	}
	for i, d := range ds {
		if d.Attempt != i+1 {
			t.Errorf("delivery %d has attempt %d; want %d", i+1, d.Attempt, i+1)
		}
		if i == 0 {
			continue
		}
		gap := d.At.Sub(ds[i-1].At)
		t.Logf("attempt %d came %v after attempt %d (retry delay %v)", d.Attempt, gap.Round(time.Millisecond), ds[i-1].Attempt, delay)
		if gap < delay-50*time.Millisecond {
			t.Errorf("attempt %d came %v after the previous one; want at least the retry delay %v", d.Attempt, gap, delay)
		}
	}
	if ds[2].Outcome != idem.Processed {
		t.Errorf("the third delivery: %v %v; want processed", ds[2].Outcome, ds[2].Err)
	}
	if n := queryInt(t, db.Pool, `SELECT coalesce(sum(n), 0)::int FROM charged`); n != 1 {
		t.Errorf("%d charges; want 1", n)
	}
	for _, q := range []string{top.Queue, top.RetryQueue(), top.DeadLetterQueue()} {
		if n := depth(t, url, q); n != 0 {
			t.Errorf("%d messages in %s; want none", n, q)
		}
	}
	checkAttemptLogged(t, logs)
}

// TestConsumerRetriesExhausted: a delivery that keeps failing with a Retry
// action is dead-lettered after WithMaxAttempts attempts.
func TestConsumerRetriesExhausted(t *testing.T) {
	t.Parallel()
	url := amqpURL(t)
	db := database(t)
	top := rabbitmq.Topology{Queue: uniqueName(t), RetryDelay: 50 * time.Millisecond}
	declare(t, url, top)
	_, logger := newLogs(t)

	var rec recorder
	failing := chargeInbox(db.Pool, func(idem.Message[order]) error { return errors.New("still down") })
	stop := run(t, rabbitmq.NewConsumer(url, top, rec.Wrap(failing, nil), consumer.WithLogger(logger), consumer.WithMaxAttempts(3)))
	publish(t, channel(t, url), top.Queue, "order-o-7", mustJSON(t, order{OrderID: "o-7", Amount: 3}))
	waitFor(t, 10*time.Second, "the dead letter", func() bool { return depth(t, url, top.DeadLetterQueue()) == 1 })
	stop()

	if ds := rec.Snapshot(); len(ds) != 3 {
		t.Errorf("%d deliveries; want 3:%s", len(ds), describe(ds))
	}
	dead := drain(t, url, top.DeadLetterQueue())
	if reason, _ := dead[0].Headers[rabbitmq.HeaderReason].(string); !strings.Contains(reason, "gave up after 3 attempts") || !strings.Contains(reason, "still down") {
		t.Errorf("reason %q; want the attempts and the handler's error", reason)
	}
}

// TestConsumerStopAcksOnlyCommitted: when the consumer's context ends while
// handlers are running, the deliveries that committed are acked and the
// others (interrupted, or prefetched and not started) return to the queue.
func TestConsumerStopAcksOnlyCommitted(t *testing.T) {
	t.Parallel()
	url := amqpURL(t)
	db := database(t)
	top := rabbitmq.Topology{Queue: uniqueName(t), RetryDelay: time.Second}
	declare(t, url, top)
	_, logger := newLogs(t)

	const total = 10
	var committed, blocked atomic.Int32
	// Orders with an even amount commit at once; odd ones wait in their
	// transaction until the consumer's context ends, then fail, which rolls
	// them back. The release waits for the context itself, not for a sleep:
	// a release before the stop would send them to the retry queue.
	var stopping sync.WaitGroup
	stopping.Add(1)
	release := sync.OnceFunc(stopping.Done)
	blocking := chargeInbox(db.Pool, func(msg idem.Message[order]) error {
		if msg.Body.Amount%2 == 0 {
			return nil
		}
		blocked.Add(1)
		stopping.Wait()
		return errors.New("interrupted")
	})
	h := idem.HandlerFunc[idem.Message[order]](func(ctx context.Context, msg idem.Message[order]) (idem.Outcome, error) {
		if msg.Body.Amount%2 != 0 {
			context.AfterFunc(ctx, release)
		}
		o, err := blocking.Deliver(ctx, msg)
		if err == nil {
			committed.Add(1)
		}
		return o, err
	})
	ch := channel(t, url)
	for i := range total {
		publish(t, ch, top.Queue, "order-s-"+string(rune('a'+i)), mustJSON(t, order{OrderID: "s-" + string(rune('a'+i)), Amount: i}))
	}
	stop := run(t, rabbitmq.NewConsumer(url, top, h, consumer.WithLogger(logger), consumer.WithWorkers(2), rabbitmq.WithPrefetch(total)))
	// Both workers end up blocked on odd orders.
	waitFor(t, 10*time.Second, "two workers blocked", func() bool { return blocked.Load() == 2 })
	stop() // its context's end releases them

	acked := int(committed.Load())
	left := depth(t, url, top.Queue)
	charged := queryInt(t, db.Pool, `SELECT count(*)::int FROM charged`)
	t.Logf("stopped: %d committed and acked, %d back in the queue", acked, left)
	if acked+left != total {
		t.Errorf("%d committed + %d back in the queue; want %d in all", acked, left, total)
	}
	if charged != acked {
		t.Errorf("%d charges but %d commits", charged, acked)
	}
	if left == 0 {
		t.Errorf("nothing returned to the queue: the interrupted deliveries were acked")
	}
	if n := depth(t, url, top.RetryQueue()); n != 0 {
		t.Errorf("%d messages in the retry queue: the stop routed interrupted deliveries to retry instead of returning them", n)
	}
}
