package rabbitmq_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/consumer"
	"github.com/idemgen/idemgen/idem/idemtest/brokertest"
	"github.com/idemgen/idemgen/idem/rabbitmq"
)

// The outbox side is the adapters' shared one (idem/idemtest/brokertest):
// rows written as a generated wrapper writes them, and a relay over them.

type outRow = brokertest.OutRow

var (
	orderRows   = brokertest.OrderRows
	runRelay    = brokertest.RunRelay
	pendingRows = brokertest.PendingRows
)

// commitOutbox commits rows of this package's consumer with the NOTIFY the
// wrapper sends.
func commitOutbox(t testing.TB, pool *pgxpool.Pool, rows []outRow) {
	t.Helper()
	brokertest.CommitOutbox(t, pool, "test.rabbit", rows)
}

// TestPublisherThroughRelay: a real relay.Relay publishes committed outbox
// rows through the Publisher; each arrives once with the row's stable id as
// message_id and its headers, and the rows are marked published (confirmed).
func TestPublisherThroughRelay(t *testing.T) {
	t.Parallel()
	url := amqpURL(t)
	db := database(t)
	top := rabbitmq.Topology{Queue: uniqueName(t)}
	declare(t, url, top)

	rows := orderRows(t, top.Queue, "r", 0, 60)
	commitOutbox(t, db.Pool, rows)
	pub := rabbitmq.NewPublisher(url)
	t.Cleanup(func() { pub.Close() })
	runRelay(t, db.Pool, pub)
	waitFor(t, 10*time.Second, "the rows published", func() bool { return pendingRows(t, db.Pool) == 0 })

	got := drain(t, url, top.Queue)
	byID := map[string]int{}
	for _, d := range got {
		byID[d.MessageId]++
		var o order
		if err := json.Unmarshal(d.Body, &o); err != nil {
			t.Errorf("%s: body %q: %v", d.MessageId, d.Body, err)
		}
		if h, _ := d.Headers["order"].(string); h != o.OrderID {
			t.Errorf("%s: header order=%q; want %q", d.MessageId, h, o.OrderID)
		}
		if d.DeliveryMode != 2 || d.ContentType != "application/json" {
			t.Errorf("%s: delivery mode %d, content type %q; want persistent JSON", d.MessageId, d.DeliveryMode, d.ContentType)
		}
	}
	for _, r := range rows {
		if byID[r.ID.String()] != 1 {
			t.Errorf("row %s arrived %d times; want once, with its id as message_id", r.ID, byID[r.ID.String()])
		}
	}
	if len(got) != len(rows) {
		t.Errorf("%d messages in the queue; want %d", len(got), len(rows))
	}
	if n := queryInt(t, db.Pool, `SELECT count(*)::int FROM idem_outbox`); n != 0 {
		t.Errorf("%d rows left in the outbox; want none (each deleted once the broker confirmed it)", n)
	}
	t.Logf("relayed %d rows, %d messages with their stable ids", len(rows), len(byID))
}

// TestPublisherErrorsPerMessage: in one batch, a message to a queue that does
// not exist (unroutable) and one to an exchange that does not exist fail
// alone, in order; the others are confirmed.
func TestPublisherErrorsPerMessage(t *testing.T) {
	t.Parallel()
	url := amqpURL(t)
	top := rabbitmq.Topology{Queue: uniqueName(t)}
	declare(t, url, top)
	pub := rabbitmq.NewPublisher(url)
	t.Cleanup(func() { pub.Close() })

	msg := func(dest string) idem.OutgoingMessage {
		return idem.OutgoingMessage{ID: uuid.NewString(), Destination: dest, Payload: []byte(`{}`), Attempt: 1}
	}
	msgs := []idem.OutgoingMessage{
		msg(top.Queue),
		msg(top.Queue + ".nobody"),
		msg(top.Queue + ".no-such-exchange/key"),
		msg(top.Queue),
		msg(top.DeadLetterExchange() + "/" + top.Queue), // an exchange and a bound key
	}
	errs := pub.Publish(context.Background(), msgs)
	if len(errs) != len(msgs) {
		t.Fatalf("%d errors for %d messages", len(errs), len(msgs))
	}
	for i, want := range []string{"", "unroutable", "NOT_FOUND", "", ""} {
		switch {
		case want == "" && errs[i] != nil:
			t.Errorf("message %d: %v; want confirmed", i, errs[i])
		case want != "" && (errs[i] == nil || !strings.Contains(errs[i].Error(), want)):
			t.Errorf("message %d: %v; want an error mentioning %s", i, errs[i], want)
		}
	}
	var ids []string
	for _, d := range drain(t, url, top.Queue) {
		ids = append(ids, d.MessageId)
	}
	if want := []string{msgs[0].ID, msgs[3].ID}; !slices.Equal(ids, want) {
		t.Errorf("the queue holds %v; want %v, in order", ids, want)
	}
	if n := len(drain(t, url, top.DeadLetterQueue())); n != 1 {
		t.Errorf("%d messages through the exchange; want 1", n)
	}
}

// TestConnectionsClosedByServer: the broker closes the consumer's and the
// publisher's connections mid-stream (rabbitmqctl close_connection); both
// connect again and every order committed to the outbox is relayed and
// charged exactly once.
func TestConnectionsClosedByServer(t *testing.T) {
	t.Parallel()
	url := amqpURL(t)
	db := database(t)
	name := uniqueName(t)
	top := rabbitmq.Topology{Queue: name, RetryDelay: 200 * time.Millisecond}
	declare(t, url, top)
	logs, logger := newLogs(t)

	pub := rabbitmq.NewPublisher(url, rabbitmq.WithConnectionName(name+"-publisher"), consumer.WithLogger(logger))
	t.Cleanup(func() { pub.Close() })
	runRelay(t, db.Pool, pub)
	var rec recorder
	stop := run(t, rabbitmq.NewConsumer(url, top, rec.Wrap(chargeInbox(db.Pool, nil), nil), consumer.WithLogger(logger),
		rabbitmq.WithConnectionName(name+"-consumer"), rabbitmq.WithBackoff(50*time.Millisecond, 500*time.Millisecond)))

	// The orders keep coming before, during and after the close: the writer
	// goes on for 10 chunks after the close returned.
	const chunk = 10
	var (
		writers    sync.WaitGroup
		written    atomic.Int32
		afterClose atomic.Int32 // chunks left to write once closed is set
		closedFlag atomic.Bool
	)
	afterClose.Store(10)
	writers.Add(1)
	go func() {
		defer writers.Done()
		for from := 0; !closedFlag.Load() || afterClose.Add(-1) >= 0; from += chunk {
			commitOutbox(t, db.Pool, orderRows(t, top.Queue, "c", from, chunk))
			written.Add(chunk)
			time.Sleep(50 * time.Millisecond)
		}
	}()
	charged := func() int { return queryInt(t, db.Pool, `SELECT count(*)::int FROM charged`) }
	waitFor(t, 20*time.Second, "100 orders charged", func() bool { return charged() >= 100 })
	before := charged()
	closed := closeConnectionsNamed(t, name)
	closedFlag.Store(true)
	writers.Wait()
	total := int(written.Load())
	waitFor(t, 30*time.Second, "every order charged", func() bool { return charged() == total && pendingRows(t, db.Pool) == 0 })
	waitFor(t, 5*time.Second, "the queue empty", func() bool { return depth(t, url, top.Queue) == 0 })
	stop()

	if closed != 2 {
		t.Errorf("rabbitmqctl closed %d connections named %s-*; want the consumer's and the publisher's", closed, name)
	}
	if n := queryInt(t, db.Pool, `SELECT count(*)::int FROM charged WHERE n <> 1`); n != 0 {
		t.Errorf("%d orders charged more than once", n)
	}
	if n := queryInt(t, db.Pool, `SELECT count(*)::int FROM idem_outbox WHERE dead_at IS NOT NULL`); n != 0 {
		t.Errorf("%d outbox rows dead-lettered", n)
	}
	for _, q := range []string{top.Queue, top.RetryQueue(), top.DeadLetterQueue()} {
		if n := depth(t, url, q); n != 0 {
			t.Errorf("%d messages left in %s", n, q)
		}
	}
	if !strings.Contains(logs.String(), "connecting again") {
		t.Errorf("the consumer logged no reconnect")
	}
	if n := strings.Count(logs.String(), "rabbitmq publisher: connected"); n < 2 {
		t.Errorf("the publisher connected %d times; want again after the close", n)
	}
	t.Logf("closed %d connections at %d charged; in the end %d of %d orders charged once, %d processed, %d duplicates",
		closed, before, charged(), total, rec.Count(idem.Processed), rec.Count(idem.Duplicate))
}

// TestPublisherConnectionClosedWhilePublishing: the broker closes the
// publisher's connection (rabbitmqctl close_connection) while the relay is in
// the middle of publishing 3,000 outbox rows, inside a batch. The
// publisher connects again, the relay publishes again what was not
// confirmed, and in the end every row is published, with its stable id:
// the queue holds every id at least once (a message confirmed by the broker
// whose confirm was lost with the connection comes twice), and a consumer
// keyed on the id charges each order exactly once.
func TestPublisherConnectionClosedWhilePublishing(t *testing.T) {
	t.Parallel()
	url := amqpURL(t)
	db := database(t)
	name := uniqueName(t)
	top := rabbitmq.Topology{Queue: name, RetryDelay: 200 * time.Millisecond}
	declare(t, url, top)
	logs, logger := newLogs(t)

	const total = 3000
	rows := orderRows(t, top.Queue, "w", 0, total)
	commitOutbox(t, db.Pool, rows)
	// The 512th message handed to the channel (the 13th of the relay's 21st
	// batch of 25: twelve published before it and awaiting their confirms)
	// waits while the broker closes the connection; then the publisher goes
	// on with the batch on the closed connection.
	const closeAt = 512
	var handed, retried atomic.Int32
	closeNow, closeDone := make(chan struct{}), make(chan struct{})
	pub := rabbitmq.NewPublisher(url, rabbitmq.WithConnectionName(name+"-publisher"), consumer.WithLogger(logger),
		rabbitmq.WithPublishing(func(m idem.OutgoingMessage, _ *amqp.Publishing) {
			// A published row is deleted: the attempts of the rows
			// handed out again are counted here.
			if m.Attempt > 1 {
				retried.Add(1)
			}
			if handed.Add(1) == closeAt {
				close(closeNow)
				<-closeDone
			}
		}))
	t.Cleanup(func() { pub.Close() })
	runRelay(t, db.Pool, pub)

	select {
	case <-closeNow:
	case <-time.After(20 * time.Second):
		t.Fatalf("the relay handed %d messages to the publisher in 20s; want %d", handed.Load(), closeAt)
	}
	closed := closeConnectionsNamed(t, name+"-publisher")
	pendingAtClose := pendingRows(t, db.Pool)
	close(closeDone)
	if closed != 1 {
		t.Fatalf("rabbitmqctl closed %d connections named %s-publisher; want 1", closed, name)
	}
	waitFor(t, 60*time.Second, "every row published", func() bool { return pendingRows(t, db.Pool) == 0 })
	inQueue := depth(t, url, top.Queue)

	var rec recorder
	stop := run(t, rabbitmq.NewConsumer(url, top, rec.Wrap(chargeInbox(db.Pool, nil), nil), consumer.WithLogger(slog.New(slog.DiscardHandler)),
		consumer.WithWorkers(8)))
	waitFor(t, 60*time.Second, "the queue consumed", func() bool { return len(rec.Snapshot()) >= inQueue && depth(t, url, top.Queue) == 0 })
	stop()

	byID := map[string]int{}
	for _, d := range rec.Snapshot() {
		byID[d.ID]++
	}
	missing := 0
	for _, r := range rows {
		if byID[r.ID.String()] == 0 {
			missing++
		}
		delete(byID, r.ID.String())
	}
	if missing != 0 || len(byID) != 0 {
		t.Errorf("%d rows never arrived, %d messages with ids of no row; want every row's stable id, nothing else", missing, len(byID))
	}
	if p := rec.Count(idem.Processed); p != total {
		t.Errorf("%d processed; want %d, one per row", p, total)
	}
	if n := queryInt(t, db.Pool, `SELECT count(*)::int FROM charged WHERE n = 1`); n != total {
		t.Errorf("%d orders charged exactly once; want %d", n, total)
	}
	if n := queryInt(t, db.Pool, `SELECT count(*)::int FROM idem_outbox WHERE dead_at IS NOT NULL`); n != 0 {
		t.Errorf("%d outbox rows dead-lettered", n)
	}
	again := int(retried.Load())
	if again == 0 || !strings.Contains(logs.String(), "rabbitmq publisher: batch interrupted") {
		t.Errorf("%d rows published again, batch interrupted logged: %v; want the close to interrupt the batch in flight",
			again, strings.Contains(logs.String(), "rabbitmq publisher: batch interrupted"))
	}
	if n := strings.Count(logs.String(), "rabbitmq publisher: connected"); n < 2 {
		t.Errorf("the publisher connected %d times; want again after the close", n)
	}
	t.Logf("closed the publisher's connection with %d of %d rows pending; %d rows published again; the queue held %d messages "+
		"(%d duplicates by stable id); downstream %d processed, %d duplicates, %d orders charged once",
		pendingAtClose, total, again, inQueue, inQueue-total, rec.Count(idem.Processed), rec.Count(idem.Duplicate),
		queryInt(t, db.Pool, `SELECT count(*)::int FROM charged WHERE n = 1`))
}
