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
