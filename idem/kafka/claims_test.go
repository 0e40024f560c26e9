package kafka_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/consumer"
	"github.com/idemgen/idemgen/idem/idemtest/brokertest"
	"github.com/idemgen/idemgen/idem/kafka"
)

// claimSession is the group session of the claim scenarios' consumers: a
// killed worker's partitions go to the restarted one within it, well inside
// the claims' lease.
const claimSession = time.Second

// claimAdapter starts a kfake cluster (it listens on loopback: the child
// process reaches it too) with a topic of one partition per message of the
// scenarios, so that they are handled at once.
func claimAdapter(t *testing.T) brokertest.ClaimAdapter {
	topic := uniqueName(t)
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(brokertest.KillMessages, topic, topic+".dlq"),
		kfake.GroupMinSessionTimeout(claimSession/2))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	brokers := c.ListenAddrs()
	cl := client(t, brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	group := uniqueName(t)
	published := map[int32]int64{}
	return brokertest.ClaimAdapter{
		Env: map[string]string{"brokers": brokers[0], "topic": topic, "group": group},
		Publish: func(t testing.TB, id string, copy int, body []byte) {
			published[int32(copy%brokertest.KillMessages)]++
			produce(t, cl, &kgo.Record{Topic: topic, Partition: int32(copy % brokertest.KillMessages), Key: []byte(strconv.Itoa(copy)), Value: body,
				Headers: []kgo.RecordHeader{{Key: kafka.HeaderMessageID, Value: []byte(id)}}})
		},
		DeadLetters: func(t testing.TB) int { return len(readAll(t, brokers, topic+".dlq", 1, time.Second)) },
		Pending: func(t testing.TB) int {
			n := int64(0)
			for p, count := range published {
				n += count - max(committed(t, brokers, group, topic, p), 0)
			}
			return int(n)
		},
	}
}

func claimConsumer(t testing.TB, env map[string]string, h idem.Handler[idem.Message[brokertest.Order]], retry time.Duration, opts ...consumer.Option) brokertest.Runner {
	return kafka.NewConsumer([]string{env["brokers"]}, env["group"], []string{env["topic"]}, h, append(opts, kafka.WithRetryDelay(retry),
		kafka.WithClientOptions(kgo.SessionTimeout(claimSession), kgo.HeartbeatInterval(claimSession/4), kgo.FetchMaxWait(100*time.Millisecond)))...)
}

// TestConsumerClaims: a key in progress is a wait, not a failure, and a
// missing table stops the consumer at once (see brokertest.Claims).
func TestConsumerClaims(t *testing.T) {
	brokertest.Claims(t, claimAdapter, claimConsumer)
}
