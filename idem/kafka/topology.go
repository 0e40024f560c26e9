package kafka

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Topology names the topics a [Consumer] reads and dead-letters to and the
// topics a [Publisher] produces to, and says how [Declare] creates them.
type Topology struct {
	// Topics are the topics the consumer group consumes.
	Topics []string
	// DeadLetterTopic maps a consumed topic to its dead-letter topic, as
	// [WithDeadLetterTopic] does for the consumer: give both the same
	// function (default, nil: topic + ".dlq").
	DeadLetterTopic func(topic string) string
	// Destinations are the topics the relay produces to: the destinations of
	// the outbox rows.
	Destinations []string
	// Partitions is the partition count of every topic Declare creates (0:
	// the cluster's default, num.partitions).
	Partitions int32
	// ReplicationFactor is the replication factor of every topic Declare
	// creates (0: the cluster's default, default.replication.factor).
	ReplicationFactor int16
	// Configs are topic configs (retention.ms, min.insync.replicas...) of
	// every topic Declare creates.
	Configs map[string]string
}

// DeadLetterTopicName returns the dead-letter topic of the consumed topic:
// DeadLetterTopic(topic), or topic + ".dlq".
func (t Topology) DeadLetterTopicName(topic string) string {
	if t.DeadLetterTopic != nil {
		return t.DeadLetterTopic(topic)
	}
	return topic + ".dlq"
}

// TopicNames returns every topic of the topology, sorted, each once: the
// consumed topics, their dead-letter topics and the destinations.
func (t Topology) TopicNames() []string {
	var names []string
	for _, topic := range t.Topics {
		names = append(names, topic, t.DeadLetterTopicName(topic))
	}
	names = append(names, t.Destinations...)
	slices.Sort(names)
	return slices.Compact(names)
}

func (t Topology) validate() error {
	switch {
	case len(t.Topics) == 0 && len(t.Destinations) == 0:
		return errors.New("kafka: the Topology has no Topics and no Destinations")
	case t.Partitions < 0:
		return fmt.Errorf("kafka: Topology.Partitions is %d", t.Partitions)
	case t.ReplicationFactor < 0:
		return fmt.Errorf("kafka: Topology.ReplicationFactor is %d", t.ReplicationFactor)
	}
	for _, topic := range t.Topics {
		if topic == "" {
			return errors.New("kafka: Topology.Topics holds an empty topic")
		}
		if dlq := t.DeadLetterTopicName(topic); dlq == "" || dlq == topic {
			return fmt.Errorf("kafka: the dead-letter topic of %q is %q", topic, dlq)
		}
	}
	if slices.Contains(t.Destinations, "") {
		return errors.New("kafka: Topology.Destinations holds an empty topic")
	}
	return nil
}

// Declare creates, through the cluster cl talks to (with franz-go's admin
// client, kadm), every topic of t that does not exist: the consumed topics,
// their dead-letter topics and the destinations, with t's partitions,
// replication factor and configs. A topic that exists already is left as it
// is (its partitions and configs are not changed), so Declare can run at
// every start. Declaring is opt-in: call it at startup, or create the same
// topics with your own tooling. It needs Kafka 2.4 or later for the
// cluster's defaults (Partitions or ReplicationFactor 0), and the permission
// to create topics. The errors of all topics that could not be created are
// returned together, each naming its topic.
func Declare(ctx context.Context, cl *kgo.Client, t Topology) error {
	if cl == nil {
		return errors.New("kafka: Declare: no client")
	}
	if err := t.validate(); err != nil {
		return err
	}
	partitions, replication := t.Partitions, t.ReplicationFactor
	if partitions == 0 {
		partitions = -1 // the cluster's default
	}
	if replication == 0 {
		replication = -1
	}
	var configs map[string]*string
	for k, v := range t.Configs {
		if configs == nil {
			configs = map[string]*string{}
		}
		configs[k] = kadm.StringPtr(v)
	}
	names := t.TopicNames()
	resps, err := kadm.NewClient(cl).CreateTopics(ctx, partitions, replication, configs, names...)
	if err != nil {
		return fmt.Errorf("kafka: declare the topics %v: %w", names, err)
	}
	var errs []error
	for _, r := range resps.Sorted() {
		if r.Err != nil && !errors.Is(r.Err, kerr.TopicAlreadyExists) {
			detail := ""
			if r.ErrMessage != "" {
				detail = " (" + r.ErrMessage + ")"
			}
			errs = append(errs, fmt.Errorf("kafka: declare the topic %s: %w%s", r.Topic, r.Err, detail))
		}
	}
	for _, name := range names {
		if _, ok := resps[name]; !ok {
			errs = append(errs, fmt.Errorf("kafka: declare the topic %s: the cluster's answer does not mention it", name))
		}
	}
	return errors.Join(errs...)
}
