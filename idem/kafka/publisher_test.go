package kafka_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgen/idemgen/idem"
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

// TestPublisherThroughRelay: a real idem.Relay publishes committed outbox
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
	if n := queryInt(t, db.Pool, `SELECT count(*)::int FROM idem_outbox WHERE published_at IS NOT NULL AND attempts = 1`); n != len(rows) {
		t.Errorf("%d rows published on their first attempt; want %d", n, len(rows))
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
