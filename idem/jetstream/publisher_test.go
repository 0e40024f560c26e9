package jetstream_test

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
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/consumer"
	"github.com/idemgen/idemgen/idem/idemtest/brokertest"
	idemjs "github.com/idemgen/idemgen/idem/jetstream"
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
	brokertest.CommitOutbox(t, pool, "test.jetstream", rows)
}

// TestPublisherThroughRelay: a real relay.Relay publishes committed outbox
// rows through the Publisher; each is stored once with the row's stable id
// as Nats-Msg-Id and its headers, and the rows are marked published (PubAck).
func TestPublisherThroughRelay(t *testing.T) {
	t.Parallel()
	url := natsURL(t)
	db := database(t)
	top := topology(t)
	declare(t, url, top)
	nc, js := connect(t, url)

	rows := orderRows(t, top.Subjects[0], "r", 0, 60)
	commitOutbox(t, db.Pool, rows)
	runRelay(t, db.Pool, idemjs.NewPublisher(nc))
	waitFor(t, 10*time.Second, "the rows published", func() bool { return pendingRows(t, db.Pool) == 0 })

	got := streamMsgs(t, js, top.Stream)
	byID := map[string]int{}
	for _, m := range got {
		id := m.Header.Get("Nats-Msg-Id")
		byID[id]++
		var o order
		if err := json.Unmarshal(m.Data, &o); err != nil {
			t.Errorf("%s: data %q: %v", id, m.Data, err)
		}
		if h := m.Header.Get("order"); h != o.OrderID {
			t.Errorf("%s: header order=%q; want %q", id, h, o.OrderID)
		}
	}
	for _, r := range rows {
		if byID[r.ID.String()] != 1 {
			t.Errorf("row %s stored %d times; want once, with its id as Nats-Msg-Id", r.ID, byID[r.ID.String()])
		}
	}
	if len(got) != len(rows) {
		t.Errorf("%d messages in the stream; want %d", len(got), len(rows))
	}
	if n := queryInt(t, db.Pool, `SELECT count(*)::int FROM idem_outbox`); n != 0 {
		t.Errorf("%d rows left in the outbox; want none (each deleted once the broker confirmed it)", n)
	}
	t.Logf("relayed %d rows, %d messages with their stable ids", len(rows), len(byID))
}

// TestPublisherErrorsPerMessage: in one batch of 500 in flight, a message
// to a subject no stream captures fails alone, in order; a message the
// stream already holds (the same Nats-Msg-Id again) succeeds and is not
// stored twice.
func TestPublisherErrorsPerMessage(t *testing.T) {
	t.Parallel()
	url := natsURL(t)
	top := topology(t)
	declare(t, url, top)
	nc, js := connect(t, url)
	pub := idemjs.NewPublisher(nc)

	msg := func(subject string) idem.OutgoingMessage {
		return idem.OutgoingMessage{ID: uuid.NewString(), Destination: subject, Payload: []byte(`{}`), Attempt: 1}
	}
	msgs := make([]idem.OutgoingMessage, 500)
	for i := range msgs {
		msgs[i] = msg(top.Subjects[0])
	}
	msgs[100] = msg(top.Stream + ".nobody")
	msgs[300] = msgs[299] // a relay's second try of the same row
	errs := pub.Publish(context.Background(), msgs)
	if len(errs) != len(msgs) {
		t.Fatalf("%d errors for %d messages", len(errs), len(msgs))
	}
	for i, err := range errs {
		switch {
		case i == 100 && (err == nil || !strings.Contains(err.Error(), "no PubAck")):
			t.Errorf("message %d to a subject without a stream: %v; want an error", i, err)
		case i != 100 && err != nil:
			t.Errorf("message %d: %v; want a PubAck", i, err)
		}
	}
	var ids []string
	for _, m := range streamMsgs(t, js, top.Stream) {
		ids = append(ids, m.Header.Get("Nats-Msg-Id"))
	}
	var want []string
	for i, m := range msgs {
		if i != 100 && i != 300 {
			want = append(want, m.ID)
		}
	}
	if !slices.Equal(ids, want) {
		t.Errorf("the stream holds %d messages; want the %d published, in order, once each", len(ids), len(want))
	}
}

// TestReconnectMidStream: the consumer's and the publisher's connections
// reconnect (nats.Conn.ForceReconnect) while orders flow through the outbox,
// the relay and the consumer: both resume, and every order is charged
// exactly once.
func TestReconnectMidStream(t *testing.T) {
	t.Parallel()
	url := natsURL(t)
	db := database(t)
	top := topology(t)
	top.AckWait = 2 * time.Second
	declare(t, url, top)
	_, logger := newLogs(t)

	pubConn, _ := connect(t, url)
	runRelay(t, db.Pool, idemjs.NewPublisher(pubConn, consumer.WithLogger(logger)))
	consConn, consJS := connect(t, url)
	var rec recorder
	stop := run(t, idemjs.NewConsumer(consJS, top, rec.Wrap(chargeInbox(db.Pool, nil), nil), consumer.WithLogger(logger),
		idemjs.WithRetryDelay(50*time.Millisecond, 500*time.Millisecond)))

	const chunk = 10
	var (
		writers    sync.WaitGroup
		written    atomic.Int32
		afterCut   atomic.Int32
		reconnects atomic.Bool
	)
	afterCut.Store(10)
	writers.Add(1)
	go func() {
		defer writers.Done()
		for from := 0; !reconnects.Load() || afterCut.Add(-1) >= 0; from += chunk {
			commitOutbox(t, db.Pool, orderRows(t, top.Subjects[0], "c", from, chunk))
			written.Add(chunk)
			time.Sleep(30 * time.Millisecond)
		}
	}()
	charged := func() int { return queryInt(t, db.Pool, `SELECT count(*)::int FROM charged`) }
	waitFor(t, 20*time.Second, "50 orders charged", func() bool { return charged() >= 50 })
	before := charged()
	if err := consConn.ForceReconnect(); err != nil {
		t.Fatal(err)
	}
	if err := pubConn.ForceReconnect(); err != nil {
		t.Fatal(err)
	}
	reconnects.Store(true)
	writers.Wait()
	total := int(written.Load())
	waitFor(t, 20*time.Second, "every order charged", func() bool { return charged() == total && pendingRows(t, db.Pool) == 0 })
	waitFor(t, 10*time.Second, "the consumer settled", func() bool { return settled(t, consJS, top) })
	stop()

	if n := queryInt(t, db.Pool, `SELECT count(*)::int FROM charged WHERE n <> 1`); n != 0 {
		t.Errorf("%d orders charged more than once", n)
	}
	if n := queryInt(t, db.Pool, `SELECT count(*)::int FROM idem_outbox WHERE dead_at IS NOT NULL`); n != 0 {
		t.Errorf("%d outbox rows dead-lettered", n)
	}
	if s := consConn.Stats(); s.Reconnects < 1 || pubConn.Stats().Reconnects < 1 {
		t.Errorf("reconnects: consumer %d, publisher %d; want both to have reconnected", s.Reconnects, pubConn.Stats().Reconnects)
	}
	if n := len(streamMsgs(t, consJS, top.DeadLetterStreamName())); n != 0 {
		t.Errorf("%d dead letters; want none", n)
	}
	t.Logf("reconnected at %d charged; in the end %d of %d orders charged once, %d processed, %d duplicates",
		before, charged(), total, rec.Count(idem.Processed), rec.Count(idem.Duplicate))
}

// TestPublisherReconnectWhilePublishing: the publisher's NATS connection
// reconnects (ForceReconnect) while the relay is in the middle of publishing
// 3,000 outbox rows, inside a batch. The relay publishes again what got no
// PubAck, and in the end every row is published: the stream holds each
// stable id exactly once (its deduplication window on Nats-Msg-Id drops the
// second copies), and a consumer keyed on the id charges each order once.
func TestPublisherReconnectWhilePublishing(t *testing.T) {
	t.Parallel()
	url := natsURL(t)
	db := database(t)
	top := topology(t)
	declare(t, url, top)
	_, logger := newLogs(t)

	const total = 3000
	rows := orderRows(t, top.Subjects[0], "w", 0, total)
	commitOutbox(t, db.Pool, rows)
	// The 512th message (the 13th of the relay's 21st batch of 25: twelve
	// published before it and awaiting their PubAcks) waits while the
	// connection reconnects; then the publisher goes on with the batch.
	const reconnectAt = 512
	var handed atomic.Int32
	reconnectNow, reconnectDone := make(chan struct{}), make(chan struct{})
	pubConn, _ := connect(t, url)
	runRelay(t, db.Pool, idemjs.NewPublisher(pubConn, consumer.WithLogger(logger), idemjs.WithMsg(func(idem.OutgoingMessage, *nats.Msg) {
		if handed.Add(1) == reconnectAt {
			close(reconnectNow)
			<-reconnectDone
		}
	})))
	select {
	case <-reconnectNow:
	case <-time.After(20 * time.Second):
		t.Fatalf("the relay handed %d messages to the publisher in 20s; want %d", handed.Load(), reconnectAt)
	}
	if err := pubConn.ForceReconnect(); err != nil {
		t.Fatal(err)
	}
	pendingAtReconnect := pendingRows(t, db.Pool)
	close(reconnectDone)
	waitFor(t, 60*time.Second, "every row published", func() bool { return pendingRows(t, db.Pool) == 0 })

	_, js := connect(t, url)
	msgs := streamMsgs(t, js, top.Stream)
	byID := map[string]int{}
	for _, m := range msgs {
		byID[m.Header.Get(jetstream.MsgIDHeader)]++
	}
	for _, r := range rows {
		if n := byID[r.ID.String()]; n != 1 {
			t.Errorf("row %s is in the stream %d times; want once", r.ID, n)
		}
	}
	if len(msgs) != total {
		t.Errorf("the stream holds %d messages; want %d, one per row", len(msgs), total)
	}

	var rec recorder
	stop := run(t, idemjs.NewConsumer(js, top, rec.Wrap(chargeInbox(db.Pool, nil), nil), consumer.WithLogger(slog.New(slog.DiscardHandler))))
	waitFor(t, 60*time.Second, "the stream consumed", func() bool { return len(rec.Snapshot()) >= total && settled(t, js, top) })
	stop()
	if p := rec.Count(idem.Processed); p != total {
		t.Errorf("%d processed; want %d, one per row", p, total)
	}
	if n := queryInt(t, db.Pool, `SELECT count(*)::int FROM charged WHERE n = 1`); n != total {
		t.Errorf("%d orders charged exactly once; want %d", n, total)
	}
	if n := queryInt(t, db.Pool, `SELECT count(*)::int FROM idem_outbox WHERE dead_at IS NOT NULL`); n != 0 {
		t.Errorf("%d outbox rows dead-lettered", n)
	}
	again := queryInt(t, db.Pool, `SELECT count(*)::int FROM idem_outbox WHERE attempts > 1`)
	if pubConn.Stats().Reconnects < 1 {
		t.Errorf("the publisher's connection did not reconnect")
	}
	t.Logf("reconnected the publisher's connection with %d of %d rows pending; %d rows published again; the stream holds %d messages, %d distinct ids; "+
		"downstream %d processed, %d duplicates, %d orders charged once",
		pendingAtReconnect, total, again, len(msgs), len(byID), rec.Count(idem.Processed), rec.Count(idem.Duplicate),
		queryInt(t, db.Pool, `SELECT count(*)::int FROM charged WHERE n = 1`))
}
