package kafka_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/consumer"
	"github.com/idemgen/idemgen/idem/idemimpl"
	"github.com/idemgen/idemgen/idem/idemtest/brokertest"
	"github.com/idemgen/idemgen/idem/internal/obs"
	"github.com/idemgen/idemgen/idem/internal/obs/obstest"
	"github.com/idemgen/idemgen/idem/kafka"
)

// fast are the client options of the tests' consumers: short fetch waits and
// heartbeats, so that a resumed partition or a rebalance does not wait
// seconds.
func fast() kafka.Option {
	return kafka.WithClientOptions(kgo.FetchMaxWait(100*time.Millisecond), kgo.HeartbeatInterval(200*time.Millisecond))
}

// TestConsumerPublishedThreeTimes: the same order produced three times (a
// producer's retry) is charged once; the two copies after the first are
// Duplicates, and the offset after all three is committed.
func TestConsumerPublishedThreeTimes(t *testing.T) {
	t.Parallel()
	topic, group := uniqueName(t), uniqueName(t)
	brokers := cluster(t, 1, topic)
	db := database(t)
	logs, logger := newLogs(t)

	cl := client(t, brokers)
	for range 3 {
		produce(t, cl, orderRecord(t, topic, "order-o-1", order{OrderID: "o-1", Amount: 42}))
	}
	var rec recorder
	stop := run(t, kafka.NewConsumer(brokers, group, []string{topic}, rec.Wrap(chargeInbox(db.Pool, nil), nil), consumer.WithLogger(logger), fast()))
	waitFor(t, 10*time.Second, "three deliveries and their commit", func() bool {
		return len(rec.Snapshot()) == 3 && committed(t, brokers, group, topic, 0) == 3
	})
	stop()

	ds := rec.Snapshot()
	if p, d := rec.Count(idem.Processed), rec.Count(idem.Duplicate); p != 1 || d != 2 {
		t.Fatalf("processed %d, duplicates %d; want 1 and 2:%s", p, d, describe(ds))
	}
	charged := queryInt(t, db.Pool, `SELECT coalesce(sum(n), 0)::int FROM charged`)
	t.Logf("produced 3 times: %d processed, %d duplicates, %d charge(s), committed offset %d",
		rec.Count(idem.Processed), rec.Count(idem.Duplicate), charged, committed(t, brokers, group, topic, 0))
	if charged != 1 {
		t.Fatalf("charged %d times; want once", charged)
	}
	checkAttemptLogged(t, logs)
}

const envKilledConsumer = "IDEM_TEST_KAFKA_KILLED_CONSUMER"

// TestConsumerKilledAfterCommitBeforeOffsetCommit: a consumer process is
// killed with SIGKILL after its handlers' transactions committed and before
// its offset commit took effect: kfake, in this process, holds the child's
// OffsetCommit request until the child is dead and then drops it. A new
// member of the group gets the same records again; they are Duplicates, and
// each order is charged once.
func TestConsumerKilledAfterCommitBeforeOffsetCommit(t *testing.T) {
	if env := os.Getenv(envKilledConsumer); env != "" {
		runKilledConsumer(env) // never returns
	}
	t.Parallel()
	const total, partitions = 40, 2
	topic, group := uniqueName(t), uniqueName(t)
	// A short minimum session timeout: the killed member leaves the group
	// within a second instead of kfake's default 45s.
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, topic), kfake.GroupMinSessionTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatalf("start an in-process kfake cluster: %v", err)
	}
	t.Cleanup(c.Close)
	brokers := c.ListenAddrs()
	db := database(t)
	_, logger := newLogs(t)

	cl := client(t, brokers)
	for i := range total {
		produce(t, cl, orderRecord(t, topic, fmt.Sprintf("order-k-%d", i), order{OrderID: fmt.Sprintf("k-%d", i), Amount: i}))
	}

	// The first OffsetCommit of the group is the child's, after its
	// transactions committed: it waits here until the child is dead, then
	// its connection is closed, and the commit never happens.
	commitArrived, childDead := make(chan int, 1), make(chan struct{})
	c.ControlKey(int16(kmsg.OffsetCommit), func(req kmsg.Request) (kmsg.Response, error, bool) {
		r := req.(*kmsg.OffsetCommitRequest)
		if r.Group != group {
			return nil, nil, false
		}
		n := 0
		for _, tp := range r.Topics {
			n += len(tp.Partitions)
		}
		commitArrived <- n
		c.SleepControl(func() { <-childDead })
		return nil, errors.New("the consumer was killed before its offset commit"), true
	})

	cmd := exec.Command(os.Args[0], "-test.run=^TestConsumerKilledAfterCommitBeforeOffsetCommit$", "-test.count=1")
	cmd.Env = append(os.Environ(), envKilledConsumer+"="+strings.Join([]string{brokers[0], group, topic, db.URL}, "\n"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var commitPartitions int
	select {
	case commitPartitions = <-commitArrived:
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("the child consumer sent no offset commit within 20s; its output:\n%s", out.String())
	}
	// The child is inside its offset commit: every record of its poll
	// committed in the database.
	committedByChild := queryInt(t, db.Pool, `SELECT count(*)::int FROM charged`)
	_ = cmd.Process.Signal(syscall.SIGKILL)
	err = cmd.Wait()
	close(childDead)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the child consumer ended with %v; want killed by SIGKILL; its output:\n%s", err, out.String())
	}
	if committedByChild == 0 {
		t.Fatalf("the child consumer committed nothing in the database before its offset commit; its output:\n%s", out.String())
	}
	for p := range int32(partitions) {
		if off := committed(t, brokers, group, topic, p); off >= 0 {
			t.Fatalf("partition %d: committed offset %d after the kill; want none", p, off)
		}
	}

	var rec recorder
	stop := run(t, kafka.NewConsumer(brokers, group, []string{topic}, rec.Wrap(chargeInbox(db.Pool, nil), nil), consumer.WithLogger(logger), fast()))
	waitFor(t, 20*time.Second, "every record done and committed", func() bool {
		n := int64(0)
		for p := range int32(partitions) {
			n += max(committed(t, brokers, group, topic, p), 0)
		}
		return n == total
	})
	stop()

	ds := rec.Snapshot()
	if p, d := rec.Count(idem.Processed), rec.Count(idem.Duplicate); p != total-committedByChild || d != committedByChild {
		t.Fatalf("the new member: processed %d, duplicates %d; want %d and %d (the records committed before the kill, redelivered):%s",
			p, d, total-committedByChild, committedByChild, describe(ds))
	}
	charges := queryInt(t, db.Pool, `SELECT coalesce(sum(n), 0)::int FROM charged`)
	t.Logf("child SIGKILLed in its offset commit (%d partitions) after %d of %d records committed in the database; "+
		"the new member: %d duplicates, %d processed; %d charges for %d orders",
		commitPartitions, committedByChild, total, rec.Count(idem.Duplicate), rec.Count(idem.Processed), charges, total)
	if charges != total {
		t.Fatalf("%d charges; want %d, one per order", charges, total)
	}
}

// runKilledConsumer is the child process of
// TestConsumerKilledAfterCommitBeforeOffsetCommit: an ordinary consumer of the
// charge inbox, killed by the parent during its offset commit.
func runKilledConsumer(env string) {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "killed consumer:", err)
		os.Exit(3)
	}
	args := strings.Split(env, "\n")
	if len(args) != 4 {
		fail(fmt.Errorf("%s: want brokers, group, topic and database URL", envKilledConsumer))
	}
	brokers, group, topic, url := args[0], args[1], args[2], args[3]
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		fail(err)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c := kafka.NewConsumer([]string{brokers}, group, []string{topic}, chargeInbox(pool, nil), consumer.WithLogger(logger),
		kafka.WithClientOptions(kgo.FetchMaxWait(100*time.Millisecond), kgo.HeartbeatInterval(100*time.Millisecond), kgo.SessionTimeout(time.Second)))
	fail(fmt.Errorf("Run returned: %v", c.Run(ctx)))
}

// TestConsumerDeadLetters: an undecodable value, a record without the id its
// key needs, a reused key (the same id, another order) and a value over the
// size limit go to the dead-letter topic once each, with the reason in a header, without a
// retry; their offsets are committed and the good records around them are
// charged.
func TestConsumerDeadLetters(t *testing.T) {
	t.Parallel()
	topic, group := uniqueName(t), uniqueName(t)
	brokers := cluster(t, 1, topic, topic+".dlq")
	db := database(t)
	logs, logger := newLogs(t)
	meter := obstest.New(t)

	cl := client(t, brokers)
	produce(t, cl,
		orderRecord(t, topic, "order-d-1", order{OrderID: "d-1", Amount: 1}),
		&kgo.Record{Topic: topic, Value: []byte("{not json"), Headers: []kgo.RecordHeader{{Key: kafka.HeaderMessageID, Value: []byte("order-bad")}}},
		&kgo.Record{Topic: topic, Value: mustJSON(t, order{OrderID: "no-id", Amount: 2})},
		orderRecord(t, topic, "order-d-1", order{OrderID: "d-1-other", Amount: 3}),
		orderRecord(t, topic, "order-d-2", order{OrderID: "d-2", Amount: 4}),
		orderRecord(t, topic, "order-big", order{OrderID: strings.Repeat("b", 300), Amount: 5}),
	)
	var rec recorder
	stop := run(t, kafka.NewConsumer(brokers, group, []string{topic}, rec.Wrap(chargeInbox(db.Pool, nil), nil),
		consumer.WithLogger(logger), kafka.WithRetryDelay(100*time.Millisecond), consumer.WithMaxBodySize(256), consumer.WithMeterProvider(meter), fast()))
	waitFor(t, 10*time.Second, "all six committed", func() bool { return committed(t, brokers, group, topic, 0) == 6 })
	time.Sleep(300 * time.Millisecond) // would a dead letter come back?
	stop()

	dead := readAll(t, brokers, topic+".dlq", 5, 2*time.Second)
	reasons := map[string]string{}
	for _, r := range dead {
		reasons[header(r, kafka.HeaderOffset)] = header(r, kafka.HeaderReason)
		if header(r, kafka.HeaderTopic) != topic || header(r, kafka.HeaderAttempt) != "1" {
			t.Errorf("dead letter at offset %s: topic %q attempt %q; want %q and 1", header(r, kafka.HeaderOffset), header(r, kafka.HeaderTopic), header(r, kafka.HeaderAttempt), topic)
		}
	}
	// Each dead letter is counted once, under the system and the topic consumed; nothing was retried.
	snap := meter.Collect(t)
	deadLetters := snap.Int(t, obs.NameDeadLetters, obs.AttrSystem.String(obs.SystemKafka), obs.AttrDestination.String(topic))
	retries := snap.Int(t, obs.NameRetries, obs.AttrSystem.String(obs.SystemKafka), obs.AttrDestination.String(topic))
	if deadLetters != int64(len(dead)) || retries != 0 {
		t.Errorf("%s = %d, %s = %d; want %d and 0", obs.NameDeadLetters, deadLetters, obs.NameRetries, retries, len(dead))
	}
	t.Logf("%s = %d, %s = %d", obs.NameDeadLetters, deadLetters, obs.NameRetries, retries)
	t.Logf("dead letters: %q", reasons)
	if len(dead) != 4 {
		t.Fatalf("%d dead letters; want 4 (undecodable, no id, reused key, oversized)", len(dead))
	}
	for offset, want := range map[string]string{"1": "does not decode", "2": "invalid key", "3": "key already used", "5": "more than the 256 of WithMaxBodySize"} {
		if !strings.Contains(reasons[offset], want) {
			t.Errorf("the dead letter of offset %s says %q; want it to mention %q", offset, reasons[offset], want)
		}
	}
	// The undecodable and the oversized record never reached the handler; the one without id
	// and the reused key reached it once.
	if n := len(rec.Snapshot()); n != 4 {
		t.Errorf("the handler ran %d times; want 4 (the undecodable and the oversized record never, the others once):%s", n, describe(rec.Snapshot()))
	}
	if n := queryInt(t, db.Pool, `SELECT coalesce(sum(n), 0)::int FROM charged`); n != 2 {
		t.Errorf("%d charges; want 2 (d-1 and d-2)", n)
	}
	if !strings.Contains(logs.String(), "dead-lettered") {
		t.Errorf("no log line says what was dead-lettered")
	}
	checkAttemptLogged(t, logs)
}

// TestConsumerRetryWithDelay: the handler fails twice, then succeeds; the
// record is retried after the delay each time (the partition sought back,
// the offset not committed in between) and charged once, at attempt 3; the
// record after it waits its turn.
func TestConsumerRetryWithDelay(t *testing.T) {
	t.Parallel()
	topic, group := uniqueName(t), uniqueName(t)
	brokers := cluster(t, 1, topic)
	db := database(t)
	logs, logger := newLogs(t)
	meter := obstest.New(t)

	var failures atomic.Int32
	h := chargeInbox(db.Pool, func(msg idem.Message[order]) error {
		if msg.Body.OrderID == "r-1" && failures.Add(1) <= 2 {
			return errors.New("the payment service is down")
		}
		return nil
	})
	cl := client(t, brokers)
	produce(t, cl, orderRecord(t, topic, "order-r-1", order{OrderID: "r-1", Amount: 5}), orderRecord(t, topic, "order-r-2", order{OrderID: "r-2", Amount: 6}))
	const delay = 300 * time.Millisecond
	var rec recorder
	var sawUncommitted atomic.Bool
	stop := run(t, kafka.NewConsumer(brokers, group, []string{topic}, rec.Wrap(h, func(msg idem.Message[order], _ idem.Outcome, err error) {
		if err != nil && committed(t, brokers, group, topic, 0) < 0 {
			sawUncommitted.Store(true)
		}
	}), consumer.WithLogger(logger), kafka.WithRetryDelay(delay), consumer.WithMeterProvider(meter), fast()))
	waitFor(t, 15*time.Second, "both committed", func() bool { return committed(t, brokers, group, topic, 0) == 2 })
	stop()

	if n := meter.Collect(t).Int(t, obs.NameRetries, obs.AttrSystem.String(obs.SystemKafka), obs.AttrDestination.String(topic)); n != 2 {
		t.Errorf("%s = %d; want 2 (r-1 failed twice)", obs.NameRetries, n)
	}
	ds := rec.Snapshot()
	if len(ds) != 4 {
		t.Fatalf("%d deliveries; want 4 (r-1 three times, r-2 once):%s", len(ds), describe(ds))
	}
	for i, want := range []struct {
		id      string
		attempt int
		outcome idem.Outcome
	}{{"order-r-1", 1, 0}, {"order-r-1", 2, 0}, {"order-r-1", 3, idem.Processed}, {"order-r-2", 1, idem.Processed}} {
		if ds[i].ID != want.id || ds[i].Attempt != want.attempt || ds[i].Outcome != want.outcome {
			t.Errorf("delivery %d: %s attempt %d %v; want %s attempt %d %v", i, ds[i].ID, ds[i].Attempt, ds[i].Outcome, want.id, want.attempt, want.outcome)
		}
	}
	for i := 1; i < 3; i++ {
		if gap := ds[i].At.Sub(ds[i-1].At); gap < delay {
			t.Errorf("attempt %d came %v after attempt %d; want at least the retry delay %v", i+1, gap, i, delay)
		}
	}
	if !sawUncommitted.Load() {
		t.Errorf("an offset was committed while r-1 was failing")
	}
	if n := queryInt(t, db.Pool, `SELECT coalesce(sum(n), 0)::int FROM charged WHERE order_id = 'r-1'`); n != 1 {
		t.Errorf("r-1 charged %d times; want once", n)
	}
	t.Logf("r-1: attempts %d, %d, %d, %v apart at least", ds[0].Attempt, ds[1].Attempt, ds[2].Attempt, delay)
	checkAttemptLogged(t, logs)
}

// TestConsumerStopCommitsOnlyCommitted: the context ends while a handler
// waits in its transaction; the records that committed have their offsets
// committed, the interrupted one (rolled back) does not, and a new consumer
// takes it up from there.
func TestConsumerStopCommitsOnlyCommitted(t *testing.T) {
	t.Parallel()
	topic, group := uniqueName(t), uniqueName(t)
	brokers := cluster(t, 1, topic)
	db := database(t)
	_, logger := newLogs(t)

	// The first delivery of s-3 waits in its transaction until the
	// consumer's context ends, then fails, which rolls it back. The release
	// waits for the context itself, not for a sleep: a release before the
	// stop would retry s-3, which could commit before the stop.
	var stopping sync.WaitGroup
	stopping.Add(1)
	release := sync.OnceFunc(stopping.Done)
	var blocked atomic.Bool
	blocking := releasedOnStop{chargeInbox(db.Pool, func(msg idem.Message[order]) error {
		if msg.Body.OrderID == "s-3" && !blocked.Swap(true) {
			stopping.Wait()
			return errors.New("interrupted")
		}
		return nil
	}), release}
	cl := client(t, brokers)
	for i := range 6 {
		produce(t, cl, orderRecord(t, topic, fmt.Sprintf("order-s-%d", i), order{OrderID: fmt.Sprintf("s-%d", i), Amount: i}))
	}
	stop := run(t, kafka.NewConsumer(brokers, group, []string{topic}, blocking, consumer.WithLogger(logger), fast()))
	waitFor(t, 10*time.Second, "the handler of s-3 blocked", blocked.Load)
	stop() // its context's end releases s-3

	off := committed(t, brokers, group, topic, 0)
	charged := queryInt(t, db.Pool, `SELECT count(*)::int FROM charged`)
	t.Logf("stopped: %d charges, committed offset %d", charged, off)
	if off != 3 || charged != 3 {
		t.Fatalf("committed offset %d with %d charges; want 3 and 3 (s-0..s-2 committed, s-3 interrupted)", off, charged)
	}
	stop = run(t, kafka.NewConsumer(brokers, group, []string{topic}, blocking, consumer.WithLogger(logger), fast()))
	waitFor(t, 10*time.Second, "the rest done", func() bool { return committed(t, brokers, group, topic, 0) == 6 })
	stop()
	if n := queryInt(t, db.Pool, `SELECT coalesce(sum(n), 0)::int FROM charged`); n != 6 {
		t.Fatalf("%d charges after the restart; want 6", n)
	}
}

// releasedOnStop is the charge inbox of TestConsumerStopCommitsOnlyCommitted:
// release runs once the context of a delivery ends (the consumer's stop).
// The context is the one the consumer decides with, so that the released
// handler's failure is taken for a stop, never for a retry.
type releasedOnStop struct {
	*idemimpl.Inbox[idem.Message[order], brokertest.ChargeResult]
	release func()
}

func (h releasedOnStop) Deliver(ctx context.Context, msg idem.Message[order]) (idem.Outcome, error) {
	context.AfterFunc(ctx, h.release)
	return h.Inbox.Deliver(ctx, msg)
}

func (h releasedOnStop) DeliverBatch(ctx context.Context, msgs []idem.Message[order]) []idem.Result[idem.None] {
	context.AfterFunc(ctx, h.release)
	return h.Inbox.DeliverBatch(ctx, msgs)
}

// TestConsumerRebalanceTenThousand: 10,000 records over 4 partitions; a
// second member joins the group mid-stream, taking partitions over in a
// rebalance. Nothing is lost, nothing is charged twice, no record reaches
// a handler twice, and the committed offsets add up to the 10,000.
func TestConsumerRebalanceTenThousand(t *testing.T) {
	t.Parallel()
	const total, partitions = 10000, 4
	topic, group := uniqueName(t), uniqueName(t)
	brokers := cluster(t, partitions, topic)
	db := database(t)
	logger := slogDiscard()

	// The records are produced while the members consume, in batches over
	// about two seconds, so that both are working at the tail of every
	// partition they own when the second joins.
	cl := client(t, brokers, kgo.ProducerLinger(5*time.Millisecond))
	rs := make([]*kgo.Record, total)
	for i := range rs {
		rs[i] = orderRecord(t, topic, fmt.Sprintf("order-b-%d", i), order{OrderID: fmt.Sprintf("b-%d", i), Amount: i})
	}
	produced := make(chan error, 1)
	go func() {
		for i := 0; i < total; i += 100 {
			if err := cl.ProduceSync(context.Background(), rs[i:i+100]...).FirstErr(); err != nil {
				produced <- err
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		produced <- nil
	}()

	var a, b recorder
	opts := []kafka.Option{consumer.WithLogger(logger), consumer.WithWorkers(partitions), kafka.WithMaxPollRecords(100), fast()}
	// While B joins, A's records take a few milliseconds each after their
	// commit, so that the rebalance comes while A has a poll in flight.
	var joining atomic.Bool
	var slowed atomic.Int32
	slow := func(idem.Message[order], idem.Outcome, error) {
		if joining.Load() && slowed.Add(1) <= 1000 {
			time.Sleep(3 * time.Millisecond)
		}
	}
	stopA := run(t, kafka.NewConsumer(brokers, group, []string{topic}, a.Wrap(chargeInbox(db.Pool, nil), slow), opts...))
	waitProgress(t, 20*time.Second, "a quarter handled", total/4, func() int64 { return int64(len(a.Snapshot())) })
	joining.Store(true)
	stopB := run(t, kafka.NewConsumer(brokers, group, []string{topic}, b.Wrap(chargeInbox(db.Pool, nil), nil), opts...))
	sumCommitted := func() int64 {
		var n int64
		for p := range int32(partitions) {
			n += max(committed(t, brokers, group, topic, p), 0)
		}
		return n
	}
	if err := <-produced; err != nil {
		t.Fatalf("produce: %v", err)
	}
	waitProgress(t, 20*time.Second, "the committed offsets", total, sumCommitted)
	stopA()
	stopB()

	rows := queryInt(t, db.Pool, `SELECT count(*)::int FROM charged`)
	charges := queryInt(t, db.Pool, `SELECT coalesce(sum(n), 0)::int FROM charged`)
	dups := a.Count(idem.Duplicate) + b.Count(idem.Duplicate)
	t.Logf("%d records: member A handled %d, member B %d (after joining), %d duplicates; %d orders charged, %d charges",
		total, len(a.Snapshot()), len(b.Snapshot()), dups, rows, charges)
	if rows != total || charges != total {
		t.Fatalf("%d orders charged, %d charges; want %d and %d", rows, charges, total, total)
	}
	// The partitions moved only between polls, after their offsets were
	// committed (BlockRebalanceOnPoll): the new owner starts after the last
	// record done, so not even the inbox sees a record twice.
	if dups != 0 {
		t.Errorf("%d duplicates: a partition moved with records in flight or not yet committed", dups)
	}
	partitionOf := map[string]int32{}
	for _, r := range rs {
		partitionOf[string(r.Key)] = r.Partition
	}
	partitionsOf := func(r *recorder) map[int32]int {
		m := map[int32]int{}
		for _, d := range r.Snapshot() {
			m[partitionOf[strings.TrimPrefix(d.ID, "order-")]]++
		}
		return m
	}
	pa, pb := partitionsOf(&a), partitionsOf(&b)
	moved := 0
	for p := range pb {
		if pa[p] > 0 {
			moved++
		}
	}
	t.Logf("records per partition: member A %v, member B %v; %d partition(s) moved mid-stream", pa, pb, moved)
	if moved == 0 {
		t.Fatalf("no partition moved from A to B mid-stream: the test did not rebalance in the middle of the stream")
	}
}
