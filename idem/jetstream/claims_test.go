package jetstream_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/consumer"
	"github.com/idemgen/idemgen/idem/idemtest/brokertest"
	idemjs "github.com/idemgen/idemgen/idem/jetstream"
)

// claimAdapter declares a topology whose ack wait is shorter than the
// claim scenarios' lease, so that the killed worker's messages come again
// while its claims are still live.
func claimAdapter(t *testing.T) brokertest.ClaimAdapter {
	url := natsURL(t)
	top := topology(t)
	top.AckWait = 2 * time.Second
	declare(t, url, top)
	_, js := connect(t, url)
	return brokertest.ClaimAdapter{
		Env:         map[string]string{"url": url, "stream": top.Stream, "subject": top.Subjects[0]},
		Publish:     func(t testing.TB, id string, _ int, body []byte) { publish(t, js, top.Subjects[0], id, body) },
		DeadLetters: func(t testing.TB) int { return len(streamMsgs(t, js, top.DeadLetterStreamName())) },
		Pending: func(t testing.TB) int {
			info := consumerInfo(t, js, top)
			return int(info.NumPending) + info.NumAckPending + info.NumRedelivered
		},
	}
}

func claimConsumer(t testing.TB, env map[string]string, h idem.Handler[idem.Message[brokertest.Order]], retry time.Duration, opts ...consumer.Option) brokertest.Runner {
	_, js := connect(t, env["url"])
	top := idemjs.Topology{Stream: env["stream"], Subjects: []string{env["subject"]}, Consumer: "billing"}
	return idemjs.NewConsumer(js, top, h, append(opts, idemjs.WithRetryDelay(retry, retry))...)
}

// TestConsumerClaims: a key in progress is a wait, not a failure, and a
// missing table stops the consumer at once (see brokertest.Claims).
func TestConsumerClaims(t *testing.T) {
	brokertest.Claims(t, claimAdapter, claimConsumer)
}

// TestConsumerHoldsWhatItPulled: 40 messages of 350ms each with an ack wait
// of 1s. The consumer pulls only what it holds room for and keeps every
// message it holds in progress, also those waiting for a worker or a batch:
// none is delivered twice.
func TestConsumerHoldsWhatItPulled(t *testing.T) {
	const (
		n       = 40
		handle  = 350 * time.Millisecond
		ackWait = time.Second
	)
	url := natsURL(t)
	top := topology(t)
	top.AckWait = ackWait
	declare(t, url, top)
	_, js := connect(t, url)
	charges := brokertest.NewCharges("test.js.hold", "idem_test_js_hold")
	db := charges.Database(t)
	for i := range n {
		publish(t, js, top.Subjects[0], fmt.Sprintf("hold-%d", i), mustJSON(t, order{OrderID: fmt.Sprintf("o-%d", i), Amount: 1}))
	}
	rec := &brokertest.Recorder{}
	slow := func(idem.Message[brokertest.Order]) error { time.Sleep(handle); return nil }
	_, log := brokertest.NewLogs(t)
	began := time.Now()
	stop := run(t, idemjs.NewConsumer(js, top, rec.Wrap(charges.Inbox(db.Pool, slow), nil), consumer.WithLogger(log)))
	brokertest.WaitFor(t, 60*time.Second, "every message processed", func() bool { return rec.Count(idem.Processed) >= n })
	took := time.Since(began)
	time.Sleep(2 * ackWait) // what would be delivered again comes within the ack wait
	stop()
	info := consumerInfo(t, js, top)
	twice := len(rec.Snapshot()) - n
	t.Logf("%d messages of %v, ack wait %v: processed in %v; %d deliveries in all, %d delivered twice (%d duplicates), redelivered per the server %d, charged %d",
		n, handle, ackWait, took.Round(time.Millisecond), len(rec.Snapshot()), twice, rec.Count(idem.Duplicate), info.NumRedelivered,
		brokertest.QueryInt(t, db.Pool, `SELECT coalesce(sum(n), 0)::int FROM charged`))
	if twice != 0 || rec.Count(idem.Duplicate) != 0 || info.NumRedelivered != 0 {
		t.Errorf("%d messages delivered twice (%d duplicates, %d redelivered); want 0", twice, rec.Count(idem.Duplicate), info.NumRedelivered)
	}
}
