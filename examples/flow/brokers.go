package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/idemgen/idemgen/examples/billing"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/consumer"
	"github.com/idemgen/idemgen/idem/jetstream"
	"github.com/idemgen/idemgen/idem/kafka"
	"github.com/idemgen/idemgen/idem/rabbitmq"
	"github.com/idemgen/idemgen/internal/demo/topology"
)

// brokerNames are the brokers the flow runs on, as -broker spells them.
var brokerNames = []string{"rabbitmq", "jetstream", "kafka"}

// Endpoint says where a broker of the flow is and what the run's names start
// with. It is all a child process needs to attach to the same topology.
type Endpoint struct {
	Broker string `json:"broker"`
	// URL of RabbitMQ (amqp://) or NATS (nats://); Kafka's seed brokers.
	URL     string   `json:"url,omitempty"`
	Brokers []string `json:"brokers,omitempty"`
	// Prefix makes every queue, stream, subject, topic and group of the run
	// unique, so that runs side by side never share one.
	Prefix string `json:"prefix"`
	// Replicas is how many servers of a JetStream cluster hold each of the
	// run's streams (0 is 1).
	Replicas int `json:"replicas,omitempty"`
}

// A Consumer is a broker adapter's consumer: Run returns when ctx ends.
type Consumer interface {
	Run(ctx context.Context) error
}

// ChargeCompletedMsg is what the notifications consumer receives: billing's
// ChargeCompleted in the envelope that carries the broker's message id.
type ChargeCompletedMsg = idem.Message[billing.ChargeCompleted]

// Broker is the flow's wiring for one broker: the topology of the run, the
// order service's producer, the billing and notifications consumers around
// the generated wrappers, and the relay's publisher.
type Broker interface {
	// Declare declares the run's topology; Delete removes it.
	Declare(ctx context.Context) error
	Delete(ctx context.Context) error
	// PublishOrder publishes one order as the order service does, and
	// returns once the broker accepted it.
	PublishOrder(ctx context.Context, o billing.OrderPlaced) error
	// Billing consumes the orders into h (billing.NewChargeIdem); workers
	// bounds how many at once, and how many the broker hands out ahead.
	Billing(h idem.Handler[billing.OrderPlaced], workers int, log *slog.Logger) Consumer
	// Notifications consumes the relayed ChargeCompleted messages into h
	// (notifications.NewNotifyChargeCompletedIdem).
	Notifications(h idem.Handler[ChargeCompletedMsg], log *slog.Logger) Consumer
	// Publisher is the relay's publisher to this broker.
	Publisher() idem.Publisher
	// Leftover counts the messages of the run that are not done: not acked
	// or not committed in a work queue, or in a dead-letter destination.
	Leftover(ctx context.Context) (map[string]int, error)
	// Close closes the connections (and an in-process cluster).
	Close()
}

// connect attaches to the broker of e; a Kafka endpoint without seed brokers
// gets an in-process kfake cluster with the run's topics, closed by Close.
func connect(e Endpoint, log *slog.Logger) (Broker, Endpoint, error) {
	switch e.Broker {
	case "rabbitmq":
		b, err := newRabbit(e, log)
		return b, e, err
	case "jetstream":
		b, err := newJetStream(e, log)
		return b, e, err
	case "kafka":
		return newKafka(e, log)
	}
	return nil, e, fmt.Errorf("unknown broker %q: want one of %s", e.Broker, strings.Join(brokerNames, ", "))
}

// destination maps an outbox destination onto the run's own name of it.
func destination(prefix, dest string) string { return prefix + "." + dest }

// RabbitMQ: a work queue per consumer, each with its retry queue and
// dead-letter exchange and queue (rabbitmq.Declare); the relay publishes
// ChargeCompleted to the notifications queue on the default exchange.

type rabbit struct {
	e             Endpoint
	orders, notes rabbitmq.Topology
	conn          *amqp.Connection
	ch            *amqp.Channel
	pub           *rabbitmq.Publisher
}

func newRabbit(e Endpoint, log *slog.Logger) (*rabbit, error) {
	conn, err := amqp.Dial(e.URL)
	if err != nil {
		return nil, fmt.Errorf("RabbitMQ is not reachable at %s: %w (install rabbitmq-server and start it, or pass -amqp URL)", redactURL(e.URL), err)
	}
	ch, err := conn.Channel()
	if err == nil {
		err = ch.Confirm(false)
	}
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("rabbitmq: %w", err)
	}
	r := &rabbit{e: e, conn: conn, ch: ch,
		orders: rabbitmq.Topology{Queue: e.Prefix + ".billing.charge", RetryDelay: time.Second},
		notes:  rabbitmq.Topology{Queue: destination(e.Prefix, billing.ChargeCompletedDestination), RetryDelay: time.Second},
	}
	r.pub = rabbitmq.NewPublisher(e.URL, rabbitmq.WithConnectionName(e.Prefix+" relay"), consumer.WithLogger(log),
		rabbitmq.WithRoute(func(dest string) (string, string) { return "", destination(e.Prefix, dest) }))
	return r, nil
}

func (r *rabbit) Declare(context.Context) error {
	return topology.DeclareRabbitMQ(r.ch, r.orders, r.notes)
}

func (r *rabbit) Delete(context.Context) error {
	return topology.DeleteRabbitMQ(r.conn, r.orders, r.notes)
}

func (r *rabbit) PublishOrder(ctx context.Context, o billing.OrderPlaced) error {
	body, err := json.Marshal(o)
	if err != nil {
		return err
	}
	dc, err := r.ch.PublishWithDeferredConfirmWithContext(ctx, "", r.orders.Queue, true, false, amqp.Publishing{
		MessageId: "order-" + o.OrderID, ContentType: "application/json", DeliveryMode: amqp.Persistent, Body: body})
	if err != nil {
		return err
	}
	if ok, err := dc.WaitContext(ctx); !ok || err != nil {
		return fmt.Errorf("order %s not confirmed by RabbitMQ (%v)", o.OrderID, err)
	}
	return nil
}

func (r *rabbit) Billing(h idem.Handler[billing.OrderPlaced], workers int, log *slog.Logger) Consumer {
	return rabbitmq.NewConsumer(r.e.URL, r.orders, h, consumer.WithWorkers(workers), rabbitmq.WithPrefetch(workers),
		consumer.WithLogger(log), rabbitmq.WithConnectionName(r.e.Prefix+" billing"), rabbitmq.WithBackoff(50*time.Millisecond, time.Second))
}

func (r *rabbit) Notifications(h idem.Handler[ChargeCompletedMsg], log *slog.Logger) Consumer {
	return rabbitmq.NewConsumer(r.e.URL, r.notes, h, consumer.WithLogger(log),
		rabbitmq.WithConnectionName(r.e.Prefix+" notifications"), rabbitmq.WithBackoff(50*time.Millisecond, time.Second))
}

func (r *rabbit) Publisher() idem.Publisher { return r.pub }

func (r *rabbit) Leftover(context.Context) (map[string]int, error) {
	var queues []string
	for _, t := range []rabbitmq.Topology{r.orders, r.notes} {
		queues = append(queues, t.Queue, t.RetryQueue(), t.DeadLetterQueue())
	}
	// Ready messages, and those delivered and not acked (a stopped
	// consumer's channel is closed, so these are back to ready).
	return topology.RabbitMQMessages(r.conn, queues...)
}

func (r *rabbit) Close() {
	r.pub.Close()
	r.conn.Close()
}

// JetStream: a work stream with a durable pull consumer per consumer, each
// with a dead-letter stream (jetstream.Declare); the relay publishes
// ChargeCompleted to the notifications stream's subject.

type jetStream struct {
	e             Endpoint
	nc            *nats.Conn
	js            natsjs.JetStream
	orders, notes jetstream.Topology
	pub           *jetstream.Publisher
}

func newJetStream(e Endpoint, log *slog.Logger) (*jetStream, error) {
	nc, err := nats.Connect(e.URL, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond), nats.Name(e.Prefix))
	if err != nil {
		return nil, fmt.Errorf("NATS is not reachable at %s: %w (install nats-server and start it with -js, or pass -nats URL)", redactURL(e.URL), err)
	}
	js, err := natsjs.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	// Stream names allow no "."; subjects take the run's prefix as their
	// first token.
	name := strings.ReplaceAll(e.Prefix, ".", "-")
	j := &jetStream{e: e, nc: nc, js: js,
		// A short ack wait: a message whose consumer died is delivered
		// again after it.
		orders: jetstream.Topology{Stream: name + "-orders", Subjects: []string{e.Prefix + ".orders"}, Consumer: "billing", AckWait: 2 * time.Second,
			Replicas: e.Replicas},
		notes: jetstream.Topology{Stream: name + "-charge-completed", Subjects: []string{destination(e.Prefix, billing.ChargeCompletedDestination)},
			Consumer: "notifications", AckWait: 5 * time.Second, Replicas: e.Replicas},
	}
	j.pub = jetstream.NewPublisher(nc, consumer.WithLogger(log), jetstream.WithMsg(func(m idem.OutgoingMessage, msg *nats.Msg) {
		msg.Subject = destination(e.Prefix, m.Destination)
	}))
	return j, nil
}

func (j *jetStream) Declare(ctx context.Context) error {
	return topology.DeclareJetStream(ctx, j.js, j.orders, j.notes)
}

func (j *jetStream) Delete(ctx context.Context) error {
	return topology.DeleteJetStream(ctx, j.js, j.orders, j.notes)
}

func (j *jetStream) PublishOrder(ctx context.Context, o billing.OrderPlaced) error {
	data, err := json.Marshal(o)
	if err != nil {
		return err
	}
	// No Nats-Msg-Id: the order service's retry publishes a copy the stream
	// stores again, as every broker without deduplication does, and billing
	// keys on OrderID. (With one, the stream's duplicate window would drop
	// the copies before any consumer saw them.)
	_, err = j.js.PublishMsg(ctx, &nats.Msg{Subject: j.orders.Subjects[0], Data: data})
	return err
}

func (j *jetStream) Billing(h idem.Handler[billing.OrderPlaced], workers int, log *slog.Logger) Consumer {
	return jetstream.NewConsumer(j.js, j.orders, h, consumer.WithWorkers(workers), jetstream.WithPrefetch(workers), consumer.WithLogger(log))
}

func (j *jetStream) Notifications(h idem.Handler[ChargeCompletedMsg], log *slog.Logger) Consumer {
	return jetstream.NewConsumer(j.js, j.notes, h, consumer.WithLogger(log))
}

func (j *jetStream) Publisher() idem.Publisher { return j.pub }

func (j *jetStream) Leftover(ctx context.Context) (map[string]int, error) {
	left := map[string]int{}
	for _, t := range []jetstream.Topology{j.orders, j.notes} {
		n, err := topology.JetStreamPending(ctx, j.js, t)
		if err != nil {
			return nil, err
		}
		if n > 0 {
			left[t.Stream+"/"+t.Consumer] = n
		}
		dlq, err := j.js.Stream(ctx, t.DeadLetterStreamName())
		if err != nil {
			return nil, err
		}
		if n := int(dlq.CachedInfo().State.Msgs); n > 0 {
			left[t.DeadLetterStreamName()] = n
		}
	}
	return left, nil
}

func (j *jetStream) Close() { j.nc.Close() }

// Kafka: a topic per consumer, each with its dead-letter topic, and a
// consumer group per consumer; the relay produces ChargeCompleted to the
// notifications topic. Without seed brokers the run starts an in-process
// kfake cluster (no Kafka server runs on these machines).

type kafkaBroker struct {
	e                  Endpoint
	cluster            *kfake.Cluster
	cl                 *kgo.Client
	orders, notes      string
	ordersGrp, notesGr string
	pub                *kafka.Publisher
}

// kafkaPartitions is how many partitions each of the run's topics has.
const kafkaPartitions = 3

func newKafka(e Endpoint, log *slog.Logger) (Broker, Endpoint, error) {
	k := &kafkaBroker{e: e, orders: e.Prefix + ".orders", notes: destination(e.Prefix, billing.ChargeCompletedDestination),
		ordersGrp: e.Prefix + ".billing", notesGr: e.Prefix + ".notifications"}
	if len(e.Brokers) == 0 {
		c, err := kfake.NewCluster(kfake.NumBrokers(1),
			kfake.SeedTopics(kafkaPartitions, k.orders, k.orders+".dlq", k.notes, k.notes+".dlq"),
			// A consumer killed with SIGKILL leaves the group when its
			// session times out: let it be short.
			kfake.GroupMinSessionTimeout(500*time.Millisecond))
		if err != nil {
			return nil, e, fmt.Errorf("start an in-process kfake cluster: %w", err)
		}
		k.cluster, e.Brokers = c, c.ListenAddrs()
		k.e = e
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.Brokers...))
	if err != nil {
		k.Close()
		return nil, e, err
	}
	k.cl = cl
	k.pub = kafka.NewPublisher(e.Brokers, consumer.WithLogger(log), kafka.WithRecord(func(m idem.OutgoingMessage, r *kgo.Record) {
		r.Topic = destination(e.Prefix, m.Destination)
	}))
	return k, e, nil
}

// Declare creates nothing: the in-process cluster was seeded with the
// run's topics.
func (k *kafkaBroker) Declare(context.Context) error { return nil }

// Delete deletes nothing: the in-process cluster goes with Close.
func (k *kafkaBroker) Delete(context.Context) error { return nil }

func (k *kafkaBroker) PublishOrder(ctx context.Context, o billing.OrderPlaced) error {
	value, err := json.Marshal(o)
	if err != nil {
		return err
	}
	return k.cl.ProduceSync(ctx, &kgo.Record{Topic: k.orders, Key: []byte(o.OrderID), Value: value}).FirstErr()
}

// kafkaSession makes a member that stops heartbeating (killed) leave its
// group within a second.
var kafkaSession = kafka.WithClientOptions(kgo.SessionTimeout(time.Second), kgo.HeartbeatInterval(200*time.Millisecond))

func (k *kafkaBroker) Billing(h idem.Handler[billing.OrderPlaced], workers int, log *slog.Logger) Consumer {
	return kafka.NewConsumer(k.e.Brokers, k.ordersGrp, []string{k.orders}, h, consumer.WithWorkers(workers),
		kafka.WithMaxPollRecords(workers), kafka.WithRetryDelay(time.Second), consumer.WithLogger(log), kafkaSession)
}

func (k *kafkaBroker) Notifications(h idem.Handler[ChargeCompletedMsg], log *slog.Logger) Consumer {
	return kafka.NewConsumer(k.e.Brokers, k.notesGr, []string{k.notes}, h, kafka.WithRetryDelay(time.Second), consumer.WithLogger(log), kafkaSession)
}

func (k *kafkaBroker) Publisher() idem.Publisher { return k.pub }

// Leftover counts, per topic, the records after the group's committed
// offsets, and the records in the dead-letter topics.
func (k *kafkaBroker) Leftover(ctx context.Context) (map[string]int, error) {
	left := map[string]int{}
	for _, tg := range []struct{ topic, group string }{{k.orders, k.ordersGrp}, {k.notes, k.notesGr}, {k.orders + ".dlq", ""}, {k.notes + ".dlq", ""}} {
		ends, err := k.endOffsets(ctx, tg.topic)
		if err != nil {
			return nil, err
		}
		committed := map[int32]int64{}
		if tg.group != "" {
			if committed, err = k.committed(ctx, tg.group, tg.topic); err != nil {
				return nil, err
			}
		}
		for p, end := range ends {
			if n := end - max(committed[p], 0); n > 0 {
				left[tg.topic] += int(n)
			}
		}
	}
	return left, nil
}

// endOffsets returns the offset after the last record of each partition.
func (k *kafkaBroker) endOffsets(ctx context.Context, topic string) (map[int32]int64, error) {
	req := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	for p := range int32(kafkaPartitions) {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition, rp.Timestamp = p, -1 // -1: the latest offset
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, k.cl)
	if err != nil {
		return nil, fmt.Errorf("list the offsets of %s: %w", topic, err)
	}
	ends := map[int32]int64{}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			ends[p.Partition] = p.Offset
		}
	}
	return ends, nil
}

// committed returns the group's committed offset of each partition of topic.
func (k *kafkaBroker) committed(ctx context.Context, group, topic string) (map[int32]int64, error) {
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = group
	rt := kmsg.NewOffsetFetchRequestTopic()
	rt.Topic = topic
	for p := range int32(kafkaPartitions) {
		rt.Partitions = append(rt.Partitions, p)
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, k.cl)
	if err != nil {
		return nil, fmt.Errorf("fetch the committed offsets of %s: %w", group, err)
	}
	out := map[int32]int64{}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			out[p.Partition] = p.Offset
		}
	}
	for _, g := range resp.Groups {
		for _, t := range g.Topics {
			for _, p := range t.Partitions {
				out[p.Partition] = p.Offset
			}
		}
	}
	return out, nil
}

func (k *kafkaBroker) Close() {
	if k.pub != nil {
		k.pub.Close()
	}
	if k.cl != nil {
		k.cl.Close()
	}
	if k.cluster != nil {
		k.cluster.Close()
	}
}
