package jetstream_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/consumer"
	"github.com/idemgen/idemgen/idem/internal/obs"
	"github.com/idemgen/idemgen/idem/internal/obs/obstest"
	idemjs "github.com/idemgen/idemgen/idem/jetstream"
)

// TestConsumerPublishedThreeTimesWithinDedupWindow: a producer retrying the
// same order three times with the same Nats-Msg-Id inside the stream's
// deduplication window: JetStream stores it once, the order is charged once.
func TestConsumerPublishedThreeTimesWithinDedupWindow(t *testing.T) {
	t.Parallel()
	url := natsURL(t)
	db := database(t)
	top := topology(t)
	declare(t, url, top)
	logs, logger := newLogs(t)
	_, js := connect(t, url)

	body := mustJSON(t, order{OrderID: "o-1", Amount: 42})
	dups := 0
	for range 3 {
		if publish(t, js, top.Subjects[0], "order-o-1", body).Duplicate {
			dups++
		}
	}
	var rec recorder
	stop := run(t, idemjs.NewConsumer(js, top, rec.Wrap(chargeInbox(db.Pool, nil), nil), consumer.WithLogger(logger)))
	waitFor(t, 10*time.Second, "the order processed and acked", func() bool { return rec.Count(idem.Processed) == 1 && settled(t, js, top) })
	stop()

	charged := queryInt(t, db.Pool, `SELECT coalesce(sum(n), 0)::int FROM charged`)
	t.Logf("published 3 times inside the window: %d PubAcks marked duplicate, %d deliveries, %d charge(s)", dups, len(rec.Snapshot()), charged)
	if dups != 2 || len(rec.Snapshot()) != 1 || charged != 1 {
		t.Fatalf("duplicate PubAcks %d, deliveries %d, charges %d; want 2, 1, 1:%s", dups, len(rec.Snapshot()), charged, describe(rec.Snapshot()))
	}
	checkAttemptLogged(t, logs)
}

// TestConsumerPublishedThreeTimesPastDedupWindow: the same order published
// three times, each after the stream's deduplication window passed, so that
// the stream holds three copies: the inbox makes the second and third
// Duplicates, all three are acked, the order is charged once.
func TestConsumerPublishedThreeTimesPastDedupWindow(t *testing.T) {
	t.Parallel()
	url := natsURL(t)
	db := database(t)
	top := topology(t)
	top.DuplicateWindow = 100 * time.Millisecond
	declare(t, url, top)
	logs, logger := newLogs(t)
	_, js := connect(t, url)

	body := mustJSON(t, order{OrderID: "o-1", Amount: 42})
	for i := range 3 {
		if i > 0 {
			time.Sleep(3 * top.DuplicateWindow)
		}
		if publish(t, js, top.Subjects[0], "order-o-1", body).Duplicate {
			t.Fatalf("publish %d: deduplicated; the window should have passed", i+1)
		}
	}
	var rec recorder
	stop := run(t, idemjs.NewConsumer(js, top, rec.Wrap(chargeInbox(db.Pool, nil), nil), consumer.WithLogger(logger)))
	waitFor(t, 10*time.Second, "three deliveries acked", func() bool { return len(rec.Snapshot()) == 3 && settled(t, js, top) })
	stop()

	if p, d := rec.Count(idem.Processed), rec.Count(idem.Duplicate); p != 1 || d != 2 {
		t.Fatalf("processed %d, duplicates %d; want 1 and 2:%s", p, d, describe(rec.Snapshot()))
	}
	charged := queryInt(t, db.Pool, `SELECT coalesce(sum(n), 0)::int FROM charged`)
	t.Logf("published 3 times past the window: %d processed, %d duplicates, %d charge(s)", rec.Count(idem.Processed), rec.Count(idem.Duplicate), charged)
	if charged != 1 {
		t.Fatalf("charged %d times; want once", charged)
	}
	checkAttemptLogged(t, logs)
}

// TestConsumerRedeliveryAfterCommitBeforeAck: the first consumer commits and
// then loses its connection before the ack (a process killed after the
// commit); the server delivers the message again after the ack wait, to a
// second consumer on the same durable: attempt 2, a Duplicate, one charge.
func TestConsumerRedeliveryAfterCommitBeforeAck(t *testing.T) {
	t.Parallel()
	url := natsURL(t)
	db := database(t)
	top := topology(t)
	top.AckWait = time.Second
	declare(t, url, top)
	logs, logger := newLogs(t)

	nc1, js1 := connect(t, url)
	committed := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	var rec recorder
	h1 := rec.Wrap(chargeInbox(db.Pool, nil), func(_ idem.Message[order], o idem.Outcome, _ error) {
		if o == idem.Processed {
			once.Do(func() { close(committed); <-release })
		}
	})
	ctx1Done := make(chan error, 1)
	c1 := idemjs.NewConsumer(js1, top, h1, consumer.WithLogger(logger.With("instance", 1)))
	go func() { ctx1Done <- c1.Run(t.Context()) }()

	_, js := connect(t, url)
	publish(t, js, top.Subjects[0], "order-o-2", mustJSON(t, order{OrderID: "o-2", Amount: 7}))
	select {
	case <-committed:
	case <-time.After(10 * time.Second):
		t.Fatal("the first consumer did not commit within 10s")
	}
	nc1.Close() // killed after the commit: no ack, no InProgress any more
	_, js2 := connect(t, url)
	stop := run(t, idemjs.NewConsumer(js2, top, rec.Wrap(chargeInbox(db.Pool, nil), nil), consumer.WithLogger(logger.With("instance", 2))))
	waitFor(t, 15*time.Second, "the redelivery acked", func() bool { return len(rec.Snapshot()) >= 2 && settled(t, js, top) })
	close(release)
	select {
	case err := <-ctx1Done:
		if err == nil || !strings.Contains(err.Error(), "closed") {
			t.Errorf("the first consumer's Run: %v; want an error saying the connection is closed", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("the first consumer's Run did not return after its connection closed")
	}
	stop()

	ds := rec.Snapshot()
	if len(ds) != 2 || ds[0].Outcome != idem.Processed || ds[1].Outcome != idem.Duplicate {
		t.Fatalf("deliveries: %s\nwant processed, then duplicate", describe(ds))
	}
	if ds[0].Attempt != 1 || ds[1].Attempt != 2 {
		t.Errorf("attempts %d and %d; want 1 and 2 (NumDelivered)", ds[0].Attempt, ds[1].Attempt)
	}
	charged := queryInt(t, db.Pool, `SELECT coalesce(sum(n), 0)::int FROM charged`)
	t.Logf("killed after the commit: %v then %v, %d charge(s)", ds[0].Outcome, ds[1].Outcome, charged)
	if charged != 1 {
		t.Fatalf("charged %d times; want once", charged)
	}
	if !strings.Contains(logs.String(), "committed but the ack failed") {
		t.Errorf("the first consumer did not log the failed ack")
	}
	checkAttemptLogged(t, logs)
}

// TestConsumerInProgressForLongHandlers: a handler that takes 2.5 times the
// ack wait keeps its message (the consumer sends InProgress): delivered
// once, no redelivery.
func TestConsumerInProgressForLongHandlers(t *testing.T) {
	t.Parallel()
	url := natsURL(t)
	db := database(t)
	top := topology(t)
	top.AckWait = time.Second
	declare(t, url, top)
	logs, logger := newLogs(t)
	_, js := connect(t, url)

	slow := chargeInbox(db.Pool, func(idem.Message[order]) error {
		time.Sleep(5 * top.AckWait / 2)
		return nil
	})
	var rec recorder
	stop := run(t, idemjs.NewConsumer(js, top, rec.Wrap(slow, nil), consumer.WithLogger(logger), consumer.WithWorkers(2)))
	publish(t, js, top.Subjects[0], "order-o-6", mustJSON(t, order{OrderID: "o-6", Amount: 1}))
	waitFor(t, 15*time.Second, "the slow order acked", func() bool { return rec.Count(idem.Processed) == 1 && settled(t, js, top) })
	time.Sleep(2 * top.AckWait) // a redelivery would have come by now
	stop()

	ds := rec.Snapshot()
	ci := consumerInfo(t, js, top)
	t.Logf("a handler of %v with an ack wait of %v: %d delivery(ies), %d redelivered", 5*top.AckWait/2, top.AckWait, len(ds), ci.NumRedelivered)
	if len(ds) != 1 || ci.NumRedelivered != 0 {
		t.Fatalf("%d deliveries, %d redelivered; want one delivery, none redelivered:%s", len(ds), ci.NumRedelivered, describe(ds))
	}
	checkAttemptLogged(t, logs)
}

// TestConsumerDeadLetters: an undecodable body, a body over the size limit,
// a message without the Nats-Msg-Id the key needs and a reused key are each
// terminated and copied to the dead-letter subject once, with the reason,
// and not retried.
func TestConsumerDeadLetters(t *testing.T) {
	t.Parallel()
	url := natsURL(t)
	db := database(t)
	top := topology(t)
	top.DuplicateWindow = 100 * time.Millisecond // so that the reused key is stored
	declare(t, url, top)
	logs, logger := newLogs(t)
	meter := obstest.New(t)
	_, js := connect(t, url)

	var rec recorder
	stop := run(t, idemjs.NewConsumer(js, top, rec.Wrap(chargeInbox(db.Pool, nil), nil),
		consumer.WithLogger(logger), consumer.WithMaxBodySize(256), idemjs.WithRetryDelay(100*time.Millisecond, time.Second), consumer.WithMeterProvider(meter)))
	subject := top.Subjects[0]
	publish(t, js, subject, "order-o-3", mustJSON(t, order{OrderID: "o-3", Amount: 1}))
	waitFor(t, 10*time.Second, "the first order", func() bool { return rec.Count(idem.Processed) == 1 })
	time.Sleep(3 * top.DuplicateWindow)
	publish(t, js, subject, "undecodable", []byte(`{"order_id": "o-4", "amount": `))
	publish(t, js, subject, "oversized", mustJSON(t, order{OrderID: strings.Repeat("x", 300)}))
	publish(t, js, subject, "", mustJSON(t, order{OrderID: "o-5", Amount: 1}))
	publish(t, js, subject, "order-o-3", mustJSON(t, order{OrderID: "o-3", Amount: 2})) // the key reused

	waitFor(t, 10*time.Second, "four dead letters", func() bool { return len(streamMsgs(t, js, top.DeadLetterStreamName())) == 4 })
	time.Sleep(time.Second) // several retry delays: nothing more happens
	stop()

	dead := streamMsgs(t, js, top.DeadLetterStreamName())
	reasons := map[string]string{}
	for _, d := range dead {
		id := d.Header.Get(idemjs.HeaderMsgID)
		if _, dup := reasons[id]; dup {
			t.Errorf("%q dead-lettered twice", id)
		}
		reasons[id] = d.Header.Get(idemjs.HeaderReason)
		if s := d.Header.Get(idemjs.HeaderStream); s != top.Stream {
			t.Errorf("%q: %s = %q; want %q", id, idemjs.HeaderStream, s, top.Stream)
		}
		if d.Header.Get(idemjs.HeaderAttempt) != "1" {
			t.Errorf("%q: dead-lettered on attempt %q; want 1", id, d.Header.Get(idemjs.HeaderAttempt))
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
	// Each dead letter is counted once, under the system and the stream consumed; nothing was retried.
	snap := meter.Collect(t)
	deadLetters := snap.Int(t, obs.NameDeadLetters, obs.AttrSystem.String(obs.SystemNATS), obs.AttrDestination.String(top.Stream))
	retries := snap.Int(t, obs.NameRetries, obs.AttrSystem.String(obs.SystemNATS), obs.AttrDestination.String(top.Stream))
	if deadLetters != int64(len(dead)) || retries != 0 {
		t.Errorf("%s = %d, %s = %d; want %d and 0", obs.NameDeadLetters, deadLetters, obs.NameRetries, retries, len(dead))
	}
	t.Logf("%s = %d, %s = %d", obs.NameDeadLetters, deadLetters, obs.NameRetries, retries)
	if len(dead) != 4 {
		t.Errorf("%d dead letters; want 4", len(dead))
	}
	if ds := rec.Snapshot(); len(ds) != 3 {
		t.Errorf("the handler was called %d times; want 3 (the order, the id-less one, the reused key):%s", len(ds), describe(ds))
	}
	if ci := consumerInfo(t, js, top); ci.NumAckPending != 0 || ci.NumPending != 0 || ci.NumRedelivered != 0 {
		t.Errorf("consumer: %d pending, %d unacked, %d redelivered; want all terminated on their first delivery", ci.NumPending, ci.NumAckPending, ci.NumRedelivered)
	}
	if n := queryInt(t, db.Pool, `SELECT coalesce(sum(n), 0)::int FROM charged`); n != 1 {
		t.Errorf("%d charges; want 1 (the first order)", n)
	}
	t.Logf("dead letters: %d, with reasons %q", len(dead), reasons)
	checkAttemptLogged(t, logs)
}

// TestConsumerRetryWithDelay: a handler that fails twice and then succeeds is
// retried with NakWithDelay, each time after the growing delay (not at once),
// and the order is charged once, on attempt 3.
func TestConsumerRetryWithDelay(t *testing.T) {
	t.Parallel()
	url := natsURL(t)
	db := database(t)
	top := topology(t)
	declare(t, url, top)
	logs, logger := newLogs(t)
	_, js := connect(t, url)

	const delay = 300 * time.Millisecond
	var failures atomic.Int32
	flaky := chargeInbox(db.Pool, func(idem.Message[order]) error {
		if failures.Add(1) <= 2 {
			return errors.New("the payment service timed out")
		}
		return nil
	})
	var rec recorder
	stop := run(t, idemjs.NewConsumer(js, top, rec.Wrap(flaky, nil), consumer.WithLogger(logger), idemjs.WithRetryDelay(delay, 10*time.Second)))
	publish(t, js, top.Subjects[0], "order-o-7", mustJSON(t, order{OrderID: "o-7", Amount: 3}))
	waitFor(t, 10*time.Second, "the order processed and acked", func() bool { return rec.Count(idem.Processed) == 1 && settled(t, js, top) })
	stop()

	ds := rec.Snapshot()
	if len(ds) != 3 || ds[2].Outcome != idem.Processed {
		t.Fatalf("deliveries: %s\nwant two failures, then processed", describe(ds))
	}
	for i, d := range ds {
		if d.Attempt != i+1 {
			t.Errorf("delivery %d: attempt %d; want %d", i+1, d.Attempt, i+1)
		}
	}
	gap1, gap2 := ds[1].At.Sub(ds[0].At), ds[2].At.Sub(ds[1].At)
	t.Logf("retried after %v and %v (delays %v and %v)", gap1.Round(time.Millisecond), gap2.Round(time.Millisecond), delay, 2*delay)
	if gap1 < delay || gap2 < 2*delay {
		t.Errorf("retried after %v and %v; want at least %v and %v (NakWithDelay with backoff)", gap1, gap2, delay, 2*delay)
	}
	if n := queryInt(t, db.Pool, `SELECT coalesce(sum(n), 0)::int FROM charged`); n != 1 {
		t.Errorf("%d charges; want 1", n)
	}
	if n := len(streamMsgs(t, js, top.DeadLetterStreamName())); n != 0 {
		t.Errorf("%d dead letters; want none", n)
	}
	if !strings.Contains(logs.String(), "retry after the delay") {
		t.Errorf("no log line about the retry")
	}
	checkAttemptLogged(t, logs)
}

// TestConsumerStopAcksOnlyCommitted: the consumer is stopped while slow
// handlers are in flight and messages are buffered; what committed is acked,
// nothing else is: a second consumer then processes exactly the rest, with
// no duplicate (nothing committed was left unacked) and no order lost
// (nothing uncommitted was acked). What the first gave back comes again at
// once, as attempt 2. None went to a pull of the first that nobody read.
func TestConsumerStopAcksOnlyCommitted(t *testing.T) {
	t.Parallel()
	url := natsURL(t)
	db := database(t)
	top := topology(t)
	declare(t, url, top)
	logs, logger := newLogs(t)
	_, js := connect(t, url)

	slow := chargeInbox(db.Pool, func(idem.Message[order]) error {
		time.Sleep(150 * time.Millisecond)
		return nil
	})
	const n = 20
	for i := range n {
		publish(t, js, top.Subjects[0], fmt.Sprintf("order-s-%d", i), mustJSON(t, order{OrderID: fmt.Sprintf("s-%d", i), Amount: i}))
	}
	var first recorder
	stop := run(t, idemjs.NewConsumer(js, top, first.Wrap(slow, nil), consumer.WithLogger(logger), consumer.WithWorkers(2), idemjs.WithPrefetch(8)))
	waitFor(t, 10*time.Second, "a few orders", func() bool { return first.Count(idem.Processed) >= 3 })
	stop()
	afterStop := queryInt(t, db.Pool, `SELECT count(*)::int FROM charged`)

	var second recorder
	_, js2 := connect(t, url)
	stop2 := run(t, idemjs.NewConsumer(js2, top, second.Wrap(chargeInbox(db.Pool, nil), nil), consumer.WithLogger(logger), consumer.WithWorkers(4)))
	waitFor(t, 15*time.Second, "every order charged and acked", func() bool {
		return queryInt(t, db.Pool, `SELECT count(*)::int FROM charged`) == n && settled(t, js, top)
	})
	stop2()

	t.Logf("stopped at %d charged; the second consumer: %d processed, %d duplicates", afterStop, second.Count(idem.Processed), second.Count(idem.Duplicate))
	if afterStop == 0 || afterStop == n {
		t.Fatalf("%d of %d charged at the stop; want the stop mid-stream", afterStop, n)
	}
	if d := second.Count(idem.Duplicate); d != 0 {
		t.Errorf("%d duplicates after the stop; want none: everything committed was acked:%s", d, describe(second.Snapshot()))
	}
	for _, d := range second.Snapshot() {
		if d.Attempt > 2 {
			t.Errorf("%s came as attempt %d; want at most 2: a delivery went to a pull the stopped consumer no longer read", d.ID, d.Attempt)
		}
	}
	if p := second.Count(idem.Processed); p != n-afterStop {
		t.Errorf("the second consumer processed %d; want the %d not committed before the stop", p, n-afterStop)
	}
	if k := queryInt(t, db.Pool, `SELECT count(*)::int FROM charged WHERE n <> 1`); k != 0 {
		t.Errorf("%d orders charged more than once", k)
	}
	checkAttemptLogged(t, logs)
}
