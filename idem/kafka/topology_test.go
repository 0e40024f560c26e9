package kafka_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/consumer"
	"github.com/idemgen/idemgen/idem/kafka"
)

// emptyCluster starts a kfake cluster without topics (and without creating
// any on first use), shut down when the test ends.
func emptyCluster(t testing.TB, opts ...kfake.Opt) []string {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1)}, opts...)...)
	if err != nil {
		t.Fatalf("start an in-process kfake cluster: %v", err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

// partitionCounts returns the partition count of each topic that exists.
func partitionCounts(t testing.TB, adm *kadm.Client, topics ...string) map[string]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	details, err := adm.ListTopics(ctx, topics...)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for name, d := range details {
		if d.Err == nil {
			out[name] = len(d.Partitions)
		}
	}
	return out
}

// TestDeclare: on a cluster without topics, Declare creates the consumed
// topic, its dead-letter topic and the relay's destination with the
// partitions and configs asked for; declaring again is fine; and then the
// consumer (dead-lettering too) and the publisher work on those topics,
// while a topic not declared does not exist.
func TestDeclare(t *testing.T) {
	t.Parallel()
	brokers := emptyCluster(t)
	topic, dest := uniqueName(t), uniqueName(t)+"-out"
	top := kafka.Topology{Topics: []string{topic}, Destinations: []string{dest}, Partitions: 3, ReplicationFactor: 1,
		Configs: map[string]string{"retention.ms": "3600000"}}
	cl := client(t, brokers)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := kafka.Declare(ctx, cl, top); err != nil {
		t.Fatal(err)
	}
	if err := kafka.Declare(ctx, cl, top); err != nil {
		t.Fatalf("Declare again (the topics exist): %v; want nil", err)
	}
	adm := kadm.NewClient(cl)
	want := []string{dest, topic, topic + ".dlq"}
	slices.Sort(want)
	if got := top.TopicNames(); !slices.Equal(got, want) {
		t.Fatalf("TopicNames %v; want %v", got, want)
	}
	counts := partitionCounts(t, adm, want...)
	for _, name := range want {
		if counts[name] != 3 {
			t.Errorf("topic %s: %d partitions; want it created with 3", name, counts[name])
		}
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, want...)
	if err != nil {
		t.Fatal(err)
	}
	for _, rc := range rcs {
		v := ""
		for _, c := range rc.Configs {
			if c.Key == "retention.ms" {
				v = c.MaybeValue()
			}
		}
		if v != "3600000" {
			t.Errorf("topic %s: retention.ms %q; want 3600000", rc.Name, v)
		}
	}

	// The consumer needs its topic and its dead-letter topic: both exist.
	db := database(t)
	_, logger := newLogs(t)
	produce(t, cl, orderRecord(t, topic, "order-d-1", order{OrderID: "d-1", Amount: 1}))
	produce(t, cl, &kgo.Record{Topic: topic, Key: []byte("bad"), Value: []byte("{"),
		Headers: []kgo.RecordHeader{{Key: kafka.HeaderMessageID, Value: []byte("order-bad")}}})
	var rec recorder
	group := uniqueName(t)
	stop := run(t, kafka.NewConsumer(brokers, group, top.Topics, rec.Wrap(chargeInbox(db.Pool, nil), nil), consumer.WithLogger(logger), fast(),
		kafka.WithDeadLetterTopic(top.DeadLetterTopicName)))
	dead := readAll(t, brokers, top.DeadLetterTopicName(topic), 1, 15*time.Second)
	waitFor(t, 10*time.Second, "the good record handled", func() bool { return rec.Count(idem.Processed) == 1 })
	stop()
	if len(dead) != 1 || header(dead[0], kafka.HeaderMessageID) != "order-bad" {
		t.Fatalf("%d records in %s; want the undecodable one", len(dead), top.DeadLetterTopicName(topic))
	}

	// The publisher produces to the destination; a topic not declared does
	// not exist.
	pub := kafka.NewPublisher(brokers, kafka.WithClientOptions(kgo.RecordDeliveryTimeout(3*time.Second)))
	t.Cleanup(pub.Close)
	errs := pub.Publish(ctx, []idem.OutgoingMessage{
		{ID: uuid.NewString(), Destination: dest, Payload: []byte(`{}`), Attempt: 1},
		{ID: uuid.NewString(), Destination: dest + "-undeclared", Payload: []byte(`{}`), Attempt: 1},
	})
	if errs[0] != nil {
		t.Errorf("publish to the declared %s: %v", dest, errs[0])
	}
	if errs[1] == nil {
		t.Errorf("publish to a topic nobody declared succeeded: the cluster creates topics itself, and the test proves nothing")
	}
	t.Logf("declared %v with 3 partitions each (twice: the second a no-op); consumed 1, dead-lettered 1 into %s, published to %s; undeclared topic: %v",
		want, top.DeadLetterTopicName(topic), dest, errs[1])
}

// TestDeclareDefaultsAndErrors: without partitions and replication factor
// Declare takes the cluster's defaults; DeadLetterTopic names the dead-letter
// topic; a topic the cluster refuses fails with an error naming it (the
// others are created); a Topology without topics is refused.
func TestDeclareDefaultsAndErrors(t *testing.T) {
	t.Parallel()
	brokers := emptyCluster(t, kfake.DefaultNumPartitions(2))
	cl := client(t, brokers)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	topic := uniqueName(t)
	top := kafka.Topology{Topics: []string{topic}, DeadLetterTopic: func(t string) string { return "dead." + t }}
	if err := kafka.Declare(ctx, cl, top); err != nil {
		t.Fatal(err)
	}
	counts := partitionCounts(t, kadm.NewClient(cl), topic, "dead."+topic)
	if counts[topic] != 2 || counts["dead."+topic] != 2 {
		t.Errorf("partitions %v; want both topics with the cluster's default, 2", counts)
	}

	// One broker: a replication factor of 3 is refused, per topic.
	bad := kafka.Topology{Topics: []string{uniqueName(t)}, ReplicationFactor: 3}
	err := kafka.Declare(ctx, cl, bad)
	if !errors.Is(err, kerr.InvalidReplicationFactor) {
		t.Fatalf("Declare with replication factor 3 on one broker: %v; want INVALID_REPLICATION_FACTOR", err)
	}
	for _, name := range bad.TopicNames() {
		if !strings.Contains(err.Error(), "topic "+name+":") {
			t.Errorf("the error does not name the topic %s: %v", name, err)
		}
	}

	for _, top := range []kafka.Topology{
		{},
		{Topics: []string{""}},
		{Destinations: []string{""}},
		{Topics: []string{"a"}, DeadLetterTopic: func(t string) string { return t }},
		{Topics: []string{"a"}, Partitions: -1},
	} {
		if err := kafka.Declare(ctx, cl, top); err == nil {
			t.Errorf("Declare(%+v): nil; want it refused", top)
		}
	}
	t.Logf("defaults: %v; refused: %v", counts, err)
}
