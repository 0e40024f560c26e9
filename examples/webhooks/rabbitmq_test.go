package webhooks_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stripe/stripe-go/v82"

	"github.com/idemgen/idemgen/examples/webhooks"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/consumer"
	"github.com/idemgen/idemgen/idem/idemtest"
	"github.com/idemgen/idemgen/idem/idemtest/brokertest"
	"github.com/idemgen/idemgen/idem/rabbitmq"
)

// TestRabbitMQAndHTTPShareKeys feeds RecordEvent from a RabbitMQ queue (the
// real server brokertest finds) and from the webhook endpoint at once. An
// event that comes both ways, in either order, is booked once, and the
// second copy gets the result the first stored: over HTTP as the replayed
// body, from the queue as a Duplicate.
func TestRabbitMQAndHTTPShareKeys(t *testing.T) {
	url := brokertest.RabbitMQURL(t)
	db := newDB(t)
	svc := newService()
	top := rabbitmq.Topology{Queue: "webhooks-test-" + randomHex(), RetryDelay: 200 * time.Millisecond}
	ch := declare(t, url, top)

	// One consumer, webhooks.stripe-event: the queue and the endpoint may
	// hold one wrapper or two, as two processes would; they share its
	// inbox either way.
	fromQueue := webhooks.NewRecordEventIdem(db.Pool, svc, idemtest.WithTestLogger(t))
	var mu sync.Mutex
	outcomes := map[string][]idem.Outcome{}
	recorded := idem.HandlerFunc[stripe.Event](func(ctx context.Context, ev stripe.Event) (idem.Outcome, error) {
		o, err := fromQueue.Deliver(ctx, ev)
		if err == nil {
			mu.Lock()
			outcomes[ev.ID] = append(outcomes[ev.ID], o)
			mu.Unlock()
		}
		return o, err
	})
	outcomeOf := func(id string) []idem.Outcome {
		mu.Lock()
		defer mu.Unlock()
		return append([]idem.Outcome(nil), outcomes[id]...)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() {
		stopped <- webhooks.ConsumeEvents(ctx, url, top, recorded, consumer.WithLogger(idemtest.Logger(t)), rabbitmq.WithConnectionName(top.Queue))
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-stopped; err != nil && ctx.Err() == nil {
			t.Errorf("the consumer: %v", err)
		}
	})
	srv := serve(t, svc.WebhookHandler(webhooks.NewRecordEventIdem(db.Pool, svc, idemtest.WithTestLogger(t))))

	stored := func(id string) webhooks.EventReceipt {
		var raw []byte
		if err := db.Pool.QueryRow(context.Background(), `SELECT result::text FROM idem_webhooks_stripe_event WHERE key_id = $1`, id).Scan(&raw); err != nil {
			t.Fatalf("the stored result of %s: %v", id, err)
		}
		var r webhooks.EventReceipt
		if err := json.Unmarshal(raw, &r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	receipt := func(r response) webhooks.EventReceipt {
		var rc webhooks.EventReceipt
		if err := json.Unmarshal([]byte(r.body), &rc); err != nil {
			t.Fatalf("the webhook's body %q: %v", r.body, err)
		}
		return rc
	}
	payments := func(id string) int { return queryInt(t, db.Pool, `SELECT count(*) FROM payments WHERE event = $1`, id) }

	// The queue first: the webhook's copy replays what the queue's
	// delivery stored. The queue carries the event compacted, the webhook
	// as Stripe lays it out: one event, decoded.
	publish(t, ch, top.Queue, compact(t, eventJSON("evt_queue_first", "pi_q", 700)))
	brokertest.WaitFor(t, 30*time.Second, "the queue's delivery of evt_queue_first", func() bool { return len(outcomeOf("evt_queue_first")) > 0 })
	r := postEvent(t, srv, eventJSON("evt_queue_first", "pi_q", 700))
	t.Logf("evt_queue_first: queue %v, then webhook → %v", outcomeOf("evt_queue_first"), r)
	if got := outcomeOf("evt_queue_first"); got[0] != idem.Processed || r.status != 200 || !r.replayed() || receipt(r) != stored("evt_queue_first") {
		t.Errorf("queue %v, then webhook %v; want processed, then the stored %+v replayed", got, r, stored("evt_queue_first"))
	}

	// The webhook first: the queue's copy is a Duplicate of it.
	r = postEvent(t, srv, eventJSON("evt_http_first", "pi_h", 800))
	publish(t, ch, top.Queue, compact(t, eventJSON("evt_http_first", "pi_h", 800)))
	brokertest.WaitFor(t, 30*time.Second, "the queue's delivery of evt_http_first", func() bool { return len(outcomeOf("evt_http_first")) > 0 })
	t.Logf("evt_http_first: webhook → %v, then queue %v", r, outcomeOf("evt_http_first"))
	if got := outcomeOf("evt_http_first"); got[0] != idem.Duplicate || r.status != 200 || r.replayed() || receipt(r) != stored("evt_http_first") {
		t.Errorf("webhook %v, then queue %v; want processed (the stored result), then a duplicate", r, got)
	}

	for _, id := range []string{"evt_queue_first", "evt_http_first"} {
		if n := payments(id); n != 1 {
			t.Errorf("%s booked %d payments; want 1", id, n)
		}
	}
}

func randomHex() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func compact(t testing.TB, b []byte) []byte {
	var out bytes.Buffer
	if err := json.Compact(&out, b); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// declare declares top on a channel of its own, returned for publishing,
// and deletes the topology when the test ends.
func declare(t testing.TB, url string, top rabbitmq.Topology) *amqp.Channel {
	t.Helper()
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := rabbitmq.Declare(ch, top); err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, q := range []string{top.Queue, top.RetryQueue(), top.DeadLetterQueue()} {
			if _, err := ch.QueueDelete(q, false, false, false); err != nil {
				t.Errorf("delete queue %s: %v", q, err)
			}
		}
		if err := ch.ExchangeDelete(top.DeadLetterExchange(), false, false); err != nil {
			t.Errorf("delete exchange %s: %v", top.DeadLetterExchange(), err)
		}
	})
	return ch
}

// publish publishes body to queue with a confirm.
func publish(t testing.TB, ch *amqp.Channel, queue string, body []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, true, false, amqp.Publishing{
		ContentType: "application/json", DeliveryMode: amqp.Persistent, Body: body,
	})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := c.WaitContext(ctx); err != nil || !ok {
		t.Fatalf("publish to %s: confirmed %v, %v", queue, ok, err)
	}
}
