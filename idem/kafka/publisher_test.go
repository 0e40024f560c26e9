package kafka_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/kafka"
)

// outRow is an outbox row as a generated wrapper writes it.
type outRow struct {
	ID          uuid.UUID
	Destination string
	Headers     map[string]string
	Payload     []byte
}

// insertOutboxSQL writes rows the way the wrapper does: one multi-row
// statement in the handler's transaction (the arrays as text, so that it
// works in every pgx.QueryExecMode).
const insertOutboxSQL = `INSERT INTO idem_outbox (message_id, consumer, key, destination, ordering_key, headers, payload)
SELECT m, 'test.kafka', m::text, d, '', h::jsonb, convert_to(p, 'UTF8')
FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[]) AS r (m, d, h, p)`

// commitOutbox commits rows with the NOTIFY the wrapper sends.
func commitOutbox(t testing.TB, pool *pgxpool.Pool, rows []outRow) {
	t.Helper()
	ids, dests, headers, payloads := make([]string, len(rows)), make([]string, len(rows)), make([]string, len(rows)), make([]string, len(rows))
	for i, r := range rows {
		h := []byte("{}")
		if r.Headers != nil {
			h = mustJSON(t, r.Headers)
		}
		ids[i], dests[i], headers[i], payloads[i] = r.ID.String(), r.Destination, string(h), string(r.Payload)
	}
	ctx := context.Background()
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, insertOutboxSQL, ids, dests, headers, payloads); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `SELECT pg_notify($1, '')`, idem.OutboxChannel)
		return err
	})
	if err != nil {
		t.Fatalf("write outbox rows: %v", err)
	}
}

func orderRows(t testing.TB, dest, prefix string, from, n int) []outRow {
	rows := make([]outRow, n)
	for i := range rows {
		o := order{OrderID: fmt.Sprintf("%s-%d", prefix, from+i), Amount: from + i}
		rows[i] = outRow{ID: uuid.New(), Destination: dest, Payload: mustJSON(t, o),
			Headers: map[string]string{"order": o.OrderID}}
	}
	return rows
}

// runRelay runs an idem.Relay over pub until the test ends.
func runRelay(t testing.TB, pool *pgxpool.Pool, pub idem.Publisher) {
	t.Helper()
	_, logger := newLogs(t)
	r := idem.NewRelay(pool, pub, idem.WithRelayPollInterval(20*time.Millisecond), idem.WithRelayBackoff(50*time.Millisecond, 200*time.Millisecond),
		idem.WithRelayBatchSize(25), idem.WithRelayLogger(logger))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("relay Run: %v", err)
		}
	})
}

func pendingRows(t testing.TB, pool *pgxpool.Pool) int {
	return queryInt(t, pool, `SELECT count(*)::int FROM idem_outbox WHERE published_at IS NULL`)
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
