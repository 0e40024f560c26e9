package kafka_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/consumer"
	"github.com/idemgen/idemgen/idem/idemtest/brokertest"
	"github.com/idemgen/idemgen/idem/kafka"
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
	brokertest.CommitOutbox(t, pool, "test.kafka", rows)
}

// TestPublisherThroughRelay: a real relay.Relay publishes committed outbox
// rows through the Publisher; each record arrives once with the row's stable
// id in the idem-message-id header and as the key, with the row's headers,
// and the rows are marked published (acknowledged).
func TestPublisherThroughRelay(t *testing.T) {
	t.Parallel()
	topic := uniqueName(t)
	brokers := cluster(t, 3, topic)
	db := database(t)

	rows := orderRows(t, topic, "r", 0, 60)
	commitOutbox(t, db.Pool, rows)
	pub := kafka.NewPublisher(brokers)
	t.Cleanup(pub.Close)
	runRelay(t, db.Pool, pub)
	waitFor(t, 10*time.Second, "the rows published", func() bool { return pendingRows(t, db.Pool) == 0 })

	got := readAll(t, brokers, topic, len(rows)+1, 2*time.Second)
	byID := map[string]int{}
	for _, r := range got {
		id := header(r, kafka.HeaderMessageID)
		byID[id]++
		if string(r.Key) != id {
			t.Errorf("%s: key %q; want the stable id (no ordering key)", id, r.Key)
		}
		var o order
		if err := json.Unmarshal(r.Value, &o); err != nil {
			t.Errorf("%s: value %q: %v", id, r.Value, err)
		}
		if h := header(r, "order"); h != o.OrderID {
			t.Errorf("%s: header order=%q; want %q", id, h, o.OrderID)
		}
	}
	for _, r := range rows {
		if byID[r.ID.String()] != 1 {
			t.Errorf("row %s arrived %d times; want once, with its id in %s", r.ID, byID[r.ID.String()], kafka.HeaderMessageID)
		}
	}
	if len(got) != len(rows) {
		t.Errorf("%d records in %s; want %d", len(got), topic, len(rows))
	}
	if n := queryInt(t, db.Pool, `SELECT count(*)::int FROM idem_outbox`); n != 0 {
		t.Errorf("%d rows left in the outbox; want none (each deleted once the broker confirmed it)", n)
	}
	t.Logf("relayed %d rows, %d records with their stable ids", len(rows), len(byID))
}

// TestPublisherOrderingKeyAndErrors: an ordering key becomes the record key
// (the records of one key land on one partition, in order); in one batch a
// message without a topic and one to a topic that does not exist fail alone,
// in order, and the others are acknowledged.
func TestPublisherOrderingKeyAndErrors(t *testing.T) {
	t.Parallel()
	topic := uniqueName(t)
	brokers := cluster(t, 3, topic)
	pub := kafka.NewPublisher(brokers, kafka.WithClientOptions(kgo.RecordDeliveryTimeout(2*time.Second)))
	t.Cleanup(pub.Close)

	var msgs []idem.OutgoingMessage
	for i := range 10 {
		msgs = append(msgs, idem.OutgoingMessage{ID: uuid.NewString(), Destination: topic, OrderingKey: "customer-7", Payload: []byte(fmt.Sprintf(`{"n":%d}`, i)), Attempt: 1})
	}
	msgs[3].Destination = ""
	msgs[6].Destination = "no-such-topic-" + topic
	errs := pub.Publish(context.Background(), msgs)
	for i, err := range errs {
		if (err != nil) != (i == 3 || i == 6) {
			t.Errorf("message %d (to %q): %v", i, msgs[i].Destination, err)
		}
	}
	t.Logf("errors: 3: %v; 6: %v", errs[3], errs[6])
	got := readAll(t, brokers, topic, 9, 2*time.Second)
	var order []string
	partitions := map[int32]bool{}
	for _, r := range got {
		if string(r.Key) != "customer-7" {
			t.Errorf("record %s: key %q; want the ordering key", header(r, kafka.HeaderMessageID), r.Key)
		}
		partitions[r.Partition] = true
		order = append(order, string(r.Value))
	}
	var want []string
	for i, m := range msgs {
		if i != 3 && i != 6 {
			want = append(want, string(m.Payload))
		}
	}
	if !slices.Equal(order, want) || len(partitions) != 1 {
		t.Errorf("records %q on %d partition(s); want %q on one", order, len(partitions), want)
	}
}

// TestPublisherConnectionDroppedWhilePublishing: kfake closes the publisher's
// connection on three produce requests spread over the relay's 3,000
// rows (the requests unanswered, the batches not stored). franz-go connects
// again and produces them again; in the end every row is published and the
// topic holds each stable id exactly once.
func TestPublisherConnectionDroppedWhilePublishing(t *testing.T) {
	t.Parallel()
	const total, drops = 3000, 3
	topic := uniqueName(t)
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, topic))
	if err != nil {
		t.Fatalf("start an in-process kfake cluster: %v", err)
	}
	t.Cleanup(c.Close)
	brokers := c.ListenAddrs()
	db := database(t)

	rows := orderRows(t, topic, "w", 0, total)
	commitOutbox(t, db.Pool, rows)
	// The 20th, 40th and 60th produce requests (from a sixth of the rows on;
	// the relay's batches are 25 rows) close their connection, each one on a
	// connection that served others before.
	var (
		produces       atomic.Int32
		dropped        atomic.Int32
		pendingAtFirst atomic.Int32
	)
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if n := produces.Add(1); n%20 != 0 || dropped.Load() >= drops {
			return nil, nil, false
		}
		if dropped.Add(1) == 1 {
			var n int32
			_ = db.Pool.QueryRow(context.Background(), `SELECT count(*)::int FROM idem_outbox`).Scan(&n)
			pendingAtFirst.Store(n)
		}
		return nil, errors.New("connection dropped by the test"), true
	})
	pub := kafka.NewPublisher(brokers, consumer.WithLogger(slog.New(slog.DiscardHandler)))
	t.Cleanup(pub.Close)
	start := time.Now()
	runRelay(t, db.Pool, pub)
	waitFor(t, 30*time.Second, "every row published", func() bool { return pendingRows(t, db.Pool) == 0 })
	took := time.Since(start)

	if dropped.Load() != drops {
		t.Fatalf("%d produce requests dropped; want %d", dropped.Load(), drops)
	}
	if p := pendingAtFirst.Load(); p == 0 || p == total {
		t.Fatalf("%d of %d rows pending at the first drop: not mid-stream", p, total)
	}
	got := readAll(t, brokers, topic, total+1, 2*time.Second)
	byID := map[string]int{}
	for _, r := range got {
		byID[header(r, kafka.HeaderMessageID)]++
	}
	for _, r := range rows {
		if n := byID[r.ID.String()]; n != 1 {
			t.Errorf("row %s is in the topic %d times; want once", r.ID, n)
		}
	}
	if len(got) != total {
		t.Errorf("%d records in %s; want %d, one per row", len(got), topic, total)
	}
	if n := queryInt(t, db.Pool, `SELECT count(*)::int FROM idem_outbox WHERE dead_at IS NOT NULL`); n != 0 {
		t.Errorf("%d outbox rows dead-lettered", n)
	}
	t.Logf("dropped %d produce connections from %d of %d rows pending; all published in %v, %d rows published again by the relay; the topic holds %d records, %d distinct ids",
		dropped.Load(), pendingAtFirst.Load(), total, took.Round(time.Millisecond), queryInt(t, db.Pool, `SELECT count(*)::int FROM idem_outbox WHERE attempts > 1`), len(got), len(byID))
}
