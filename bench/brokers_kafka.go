package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/idemgen/idemgen/bench/ledger"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/consumer"
	"github.com/idemgen/idemgen/idem/kafka"
)

// kafkaKind is kfake, franz-go's in-process Kafka cluster (no Kafka server
// runs on these machines): a fresh one-broker cluster per cell, in this
// process, so its work shares the bench's CPU and its network is loopback.
type kafkaKind struct{}

func (kafkaKind) name() string { return "kafka" }
func (kafkaKind) close()       {}

type kafkaCluster struct {
	c       *kfake.Cluster
	brokers []string
	topic   string
}

func newKafkaCluster(topic string, partitions int) (*kafkaCluster, error) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(int32(partitions), topic))
	if err != nil {
		return nil, fmt.Errorf("start an in-process kfake cluster: %w", err)
	}
	return &kafkaCluster{c: c, brokers: c.ListenAddrs(), topic: topic}, nil
}

func (c *kafkaCluster) client(opts ...kgo.Opt) (*kgo.Client, error) {
	return kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.brokers...)}, opts...)...)
}

func (c *kafkaCluster) close() { c.c.Close() }

type kafkaSource struct {
	*kafkaCluster
	group      string
	n          int
	partitions int
}

func (kafkaKind) source(ctx context.Context, tag string, msgs []wireMsg, partitions int) (source, error) {
	c, err := newKafkaCluster(tag, partitions)
	if err != nil {
		return nil, err
	}
	src := &kafkaSource{kafkaCluster: c, group: tag + "-group", n: len(msgs), partitions: partitions}
	cl, err := c.client(kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	if err != nil {
		c.close()
		return nil, err
	}
	defer cl.Close()
	for start := 0; start < len(msgs); start += 1000 {
		var rs []*kgo.Record
		for _, m := range msgs[start:min(start+1000, len(msgs))] {
			rs = append(rs, &kgo.Record{Topic: tag, Key: []byte(m.id), Value: m.body})
		}
		if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
			c.close()
			return nil, fmt.Errorf("produce the backlog: %w", err)
		}
	}
	return src, nil
}

func (s *kafkaSource) consumeIdem(ctx context.Context, h idem.Handler[ledger.Deposit], workers int) error {
	return kafka.NewConsumer(s.brokers, s.group, []string{s.topic}, h, consumer.WithWorkers(workers), consumer.WithLogger(quietLog)).Run(ctx)
}

// consumeRaw is franz-go alone, as the adapter consumes: a group member with
// auto-commit off and rebalances blocked while a poll is processed; each
// poll's partitions at once (at most workers), each partition's records in
// order, decoded; then the offsets committed, synchronously.
func (s *kafkaSource) consumeRaw(ctx context.Context, workers int, done func()) error {
	cl, err := s.client(kgo.ConsumerGroup(s.group), kgo.ConsumeTopics(s.topic), kgo.DisableAutoCommit(), kgo.BlockRebalanceOnPoll())
	if err != nil {
		return err
	}
	defer cl.Close()
	for {
		fetches := cl.PollRecords(ctx, kafka.DefaultMaxPoll)
		if fetches.IsClientClosed() || ctx.Err() != nil {
			cl.AllowRebalance()
			return nil
		}
		var parts []kgo.FetchTopicPartition
		fetches.EachPartition(func(p kgo.FetchTopicPartition) {
			if len(p.Records) > 0 {
				parts = append(parts, p)
			}
		})
		last := make([]*kgo.Record, len(parts))
		errs := make([]error, len(parts))
		sem := make(chan struct{}, workers)
		var wg sync.WaitGroup
		for i, p := range parts {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				for _, r := range p.Records {
					var d ledger.Deposit
					if err := json.Unmarshal(r.Value, &d); err != nil || d.MessageID == "" {
						errs[i] = fmt.Errorf("undecodable record %q: %v", r.Value, err)
						return
					}
					last[i] = r
					done() // where the adapter's handler returns
				}
			})
		}
		wg.Wait()
		var commit []*kgo.Record
		for i, r := range last {
			if errs[i] != nil {
				cl.AllowRebalance()
				return errs[i]
			}
			if r != nil {
				commit = append(commit, r)
			}
		}
		if len(commit) > 0 {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			err := cl.CommitRecords(cctx, commit...)
			cancel()
			if err != nil {
				cl.AllowRebalance()
				return fmt.Errorf("commit the offsets: %w", err)
			}
		}
		cl.AllowRebalance()
	}
}

// settled checks that the group committed every partition's end offset.
func (s *kafkaSource) settled(ctx context.Context) error {
	cl, err := s.client()
	if err != nil {
		return err
	}
	defer cl.Close()
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = s.group
	rt := kmsg.NewOffsetFetchRequestTopic()
	rt.Topic = s.topic
	for p := range s.partitions {
		rt.Partitions = append(rt.Partitions, int32(p))
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return err
	}
	var committed int64
	for _, tp := range resp.Topics {
		for _, pp := range tp.Partitions {
			if pp.Offset > 0 {
				committed += pp.Offset
			}
		}
	}
	if committed != int64(s.n) {
		return fmt.Errorf("group %s committed offsets adding up to %d; want %d", s.group, committed, s.n)
	}
	return nil
}

func (s *kafkaSource) close() { s.kafkaCluster.close() }

// kafkaSink is a fresh cluster whose topic is the outbox's destination
// (ledger.CreditedDestination), with as many partitions as the sources.
type kafkaSink struct {
	*kafkaCluster
	partitions int
}

func (kafkaKind) sink(ctx context.Context, tag string, partitions int) (sink, error) {
	c, err := newKafkaCluster(ledger.CreditedDestination, partitions)
	if err != nil {
		return nil, err
	}
	return &kafkaSink{kafkaCluster: c, partitions: partitions}, nil
}

func (s *kafkaSink) publisher() (idem.Publisher, func()) {
	p := kafka.NewPublisher(s.brokers, consumer.WithLogger(quietLog))
	return p, p.Close
}

// rawPublish is franz-go's producer with its defaults (idempotent, acks
// from all in-sync replicas), each record as the adapter makes it (keyed by
// the id, with the id in a header), ProduceSync batch at a time.
func (s *kafkaSink) rawPublish(ctx context.Context, msgs []idem.OutgoingMessage, batch int) error {
	cl, err := s.client()
	if err != nil {
		return err
	}
	defer cl.Close()
	rs := make([]*kgo.Record, 0, batch)
	for start := 0; start < len(msgs); start += batch {
		rs = rs[:0]
		for _, m := range msgs[start:min(start+batch, len(msgs))] {
			rs = append(rs, &kgo.Record{Topic: s.topic, Key: []byte(m.ID), Value: m.Payload,
				Headers: []kgo.RecordHeader{{Key: kafka.HeaderMessageID, Value: []byte(m.ID)}}})
		}
		if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
			return err
		}
	}
	return nil
}

// count adds up the topic's end offsets.
func (s *kafkaSink) count(ctx context.Context) (int, error) {
	cl, err := s.client()
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	req := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = s.topic
	for p := range s.partitions {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition = int32(p)
		rp.Timestamp = -1 // the end
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, tp := range resp.Topics {
		for _, pp := range tp.Partitions {
			if err := kerrOf(pp.ErrorCode); err != nil {
				return 0, err
			}
			n += pp.Offset
		}
	}
	return int(n), nil
}

func kerrOf(code int16) error {
	if code != 0 {
		return fmt.Errorf("kafka error code %d", code)
	}
	return nil
}

func (s *kafkaSink) close() { s.kafkaCluster.close() }
