package kafka_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/idemgen/idemgen/idem/idemtest/brokertest"
	"github.com/idemgen/idemgen/idem/kafka"
)

// The tests run against kfake, an in-process Kafka cluster speaking the
// Kafka protocol (no Kafka server runs on these machines), and a real
// PostgreSQL through idemtest.

// cluster starts a kfake cluster with topics of partitions partitions each,
// shut down when the test ends, and returns its seed addresses.
func cluster(t testing.TB, partitions int32, topics ...string) []string {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, topics...))
	if err != nil {
		t.Fatalf("start an in-process kfake cluster: %v", err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

// uniqueName returns a name no other test uses, for groups and topics.
func uniqueName(t testing.TB) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := strings.NewReplacer("/", "-", " ", "-").Replace(t.Name())
	return "idemtest-" + name + "-" + hex.EncodeToString(b[:])
}

// client is a plain franz-go client for the test's own producing and
// reading, closed when the test ends.
func client(t testing.TB, brokers []string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// produce produces records and waits for their acks.
func produce(t testing.TB, cl *kgo.Client, rs ...*kgo.Record) {
	t.Helper()
	if err := cl.ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
}

// orderRecord is an order on topic with its id in the idem-message-id header.
func orderRecord(t testing.TB, topic, id string, o order) *kgo.Record {
	return &kgo.Record{Topic: topic, Key: []byte(o.OrderID), Value: mustJSON(t, o),
		Headers: []kgo.RecordHeader{{Key: kafka.HeaderMessageID, Value: []byte(id)}}}
}

// readAll reads topic from the start until want records arrived or timeout
// passed, and returns what it read.
func readAll(t testing.TB, brokers []string, topic string, want int, timeout time.Duration) []*kgo.Record {
	t.Helper()
	cl := client(t, brokers, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	defer cl.Close()
	var out []*kgo.Record
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for len(out) < want {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			break
		}
		out = append(out, fs.Records()...)
	}
	return out
}

// committed returns the group's committed offset of topic's partition p
// (-1 for none).
func committed(t testing.TB, brokers []string, group, topic string, p int32) int64 {
	t.Helper()
	cl := client(t, brokers)
	defer cl.Close()
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = group
	rt := kmsg.NewOffsetFetchRequestTopic()
	rt.Topic, rt.Partitions = topic, []int32{p}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(context.Background(), cl)
	if err != nil {
		t.Fatalf("fetch the committed offsets of %s: %v", group, err)
	}
	for _, tp := range resp.Topics {
		for _, pp := range tp.Partitions {
			if tp.Topic == topic && pp.Partition == p {
				return pp.Offset
			}
		}
	}
	for _, g := range resp.Groups {
		for _, tp := range g.Topics {
			for _, pp := range tp.Partitions {
				if tp.Topic == topic && pp.Partition == p {
					return pp.Offset
				}
			}
		}
	}
	return -1
}

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The consumer's database side, its recorded handler, its logs and the
// helpers that run it are the adapters' shared ones (idem/idemtest/brokertest):
// an inbox keyed on the message id (key=ID of an idem.Message[order]) and a
// charge per order, counted in charged.

type (
	order    = brokertest.Order
	recorder = brokertest.Recorder
)

var (
	charges            = brokertest.NewCharges("test.kafka.charge", "idem_kafka_charge")
	chargeInbox        = charges.Inbox
	database           = charges.Database
	queryInt           = brokertest.QueryInt
	newLogs            = brokertest.NewLogs
	checkAttemptLogged = brokertest.CheckAttemptLogged
	run                = brokertest.Run
	waitFor            = brokertest.WaitFor
	waitProgress       = brokertest.WaitProgress
	describe           = brokertest.Describe
)

func slogDiscard() *slog.Logger { return slog.New(slog.DiscardHandler) }
