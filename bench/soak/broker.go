package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemgen/idemgen/examples/billing"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/consumer"
	"github.com/idemgen/idemgen/idem/jetstream"
	"github.com/idemgen/idemgen/idem/rabbitmq"
	"github.com/idemgen/idemgen/internal/demo/topology"
)

// keyHeader carries the soak's own name of a message (an order id, or
// hostile-<kind>-<n>), so that the check can say which messages ended where.
const keyHeader = "soak-key"

// maxBody is the consumers' WithMaxBodySize: an order is about 80 bytes;
// the soak's oversized bodies are larger.
const maxBody = 16 << 10

// maxAttempts is the consumers' WithMaxAttempts: a PostgreSQL restart makes
// every delivery fail for a few seconds, and SIGKILLs and closed
// connections redeliver; none of that may dead-letter an order.
const maxAttempts = 1000

// endpoint is all a child process needs to attach to the run's topology.
type endpoint struct {
	kind   string // rabbitmq or jetstream
	url    string
	prefix string
}

// payload is one message the soak publishes to the orders queue or stream.
type payload struct {
	key  string
	body []byte
}

// runner is an adapter's consumer.
type runner interface {
	Run(ctx context.Context) error
}

// broker is the soak's wiring for one broker.
type broker interface {
	declare(ctx context.Context) error
	remove(ctx context.Context) error
	// publish publishes ps to the orders queue or stream and returns once the
	// broker confirmed every one.
	publish(ctx context.Context, ps []payload) error
	billing(h idem.Handler[billing.OrderPlaced], name string, log *slog.Logger) runner
	notifications(h idem.Handler[idem.Message[billing.ChargeCompleted]], name string, log *slog.Logger) runner
	publisher(name string, log *slog.Logger) (idem.Publisher, func())
	// leftover counts what is not done in the work (and retry) queues.
	leftover(ctx context.Context) (map[string]int, error)
	// deadLetters returns the soak keys of the dead-lettered messages of the
	// orders (notes false) or the notifications (notes true).
	deadLetters(ctx context.Context, notes bool) ([]string, error)
	close()
}

func dial(e endpoint, name string) (broker, error) {
	switch e.kind {
	case "rabbitmq":
		return newRabbit(e, name)
	case "jetstream":
		return newJetStream(e, name)
	}
	return nil, fmt.Errorf("unknown broker %q: want rabbitmq or jetstream", e.kind)
}

// RabbitMQ: rabbitmq.Declare's work queue, retry queue and dead-letter
// exchange and queue for each consumer; the relay publishes ChargeCompleted
// to the notifications queue on the default exchange.

type rabbit struct {
	e             endpoint
	orders, notes rabbitmq.Topology
	conn          *amqp.Connection
	ch            *amqp.Channel
}

func newRabbit(e endpoint, name string) (*rabbit, error) {
	cfg := amqp.Config{Properties: amqp.Table{"connection_name": name}, Dial: amqp.DefaultDial(5 * time.Second)}
	conn, err := amqp.DialConfig(e.url, cfg)
	if err != nil {
		return nil, fmt.Errorf("RabbitMQ: %w", err)
	}
	ch, err := conn.Channel()
	if err == nil {
		err = ch.Confirm(false)
	}
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("rabbitmq: %w", err)
	}
	return &rabbit{e: e, conn: conn, ch: ch,
		orders: rabbitmq.Topology{Queue: e.prefix + ".orders", RetryDelay: 300 * time.Millisecond},
		notes:  rabbitmq.Topology{Queue: e.prefix + "." + billing.ChargeCompletedDestination, RetryDelay: 300 * time.Millisecond},
	}, nil
}

func (r *rabbit) declare(context.Context) error {
	return topology.DeclareRabbitMQ(r.ch, r.orders, r.notes)
}

func (r *rabbit) remove(context.Context) error {
	return topology.DeleteRabbitMQ(r.conn, r.orders, r.notes)
}

func (r *rabbit) publish(ctx context.Context, ps []payload) error {
	confirms := make([]*amqp.DeferredConfirmation, 0, len(ps))
	for _, p := range ps {
		dc, err := r.ch.PublishWithDeferredConfirmWithContext(ctx, "", r.orders.Queue, false, false, amqp.Publishing{
			MessageId: p.key, ContentType: "application/json", DeliveryMode: amqp.Persistent, Body: p.body,
			Headers: amqp.Table{keyHeader: p.key}})
		if err != nil {
			return err
		}
		confirms = append(confirms, dc)
	}
	for i, dc := range confirms {
		if ok, err := dc.WaitContext(ctx); !ok || err != nil {
			return fmt.Errorf("%s not confirmed by RabbitMQ (%v)", ps[i].key, err)
		}
	}
	return nil
}

func (r *rabbit) billing(h idem.Handler[billing.OrderPlaced], name string, log *slog.Logger) runner {
	return rabbitmq.NewConsumer(r.e.url, r.orders, h, consumer.WithWorkers(8), rabbitmq.WithPrefetch(32),
		consumer.WithMaxAttempts(maxAttempts), consumer.WithMaxBodySize(maxBody), consumer.WithLogger(log),
		rabbitmq.WithConnectionName(name), rabbitmq.WithBackoff(50*time.Millisecond, 2*time.Second))
}

func (r *rabbit) notifications(h idem.Handler[idem.Message[billing.ChargeCompleted]], name string, log *slog.Logger) runner {
	return rabbitmq.NewConsumer(r.e.url, r.notes, h, consumer.WithWorkers(8), rabbitmq.WithPrefetch(32),
		consumer.WithMaxAttempts(maxAttempts), consumer.WithMaxBodySize(maxBody), consumer.WithLogger(log),
		rabbitmq.WithConnectionName(name), rabbitmq.WithBackoff(50*time.Millisecond, 2*time.Second))
}

func (r *rabbit) publisher(name string, log *slog.Logger) (idem.Publisher, func()) {
	p := rabbitmq.NewPublisher(r.e.url, rabbitmq.WithConnectionName(name), consumer.WithLogger(log),
		rabbitmq.WithRoute(func(dest string) (string, string) { return "", r.e.prefix + "." + dest }))
	return p, func() { p.Close() }
}

func (r *rabbit) leftover(context.Context) (map[string]int, error) {
	return topology.RabbitMQMessages(r.conn, r.orders.Queue, r.orders.RetryQueue(), r.notes.Queue, r.notes.RetryQueue())
}

func (r *rabbit) deadLetters(_ context.Context, notes bool) ([]string, error) {
	t := r.orders
	if notes {
		t = r.notes
	}
	// Read without taking: nothing is acked, and closing the channel puts
	// every message back.
	ch, err := r.conn.Channel()
	if err != nil {
		return nil, err
	}
	defer ch.Close()
	var keys []string
	for {
		d, ok, err := ch.Get(t.DeadLetterQueue(), false)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", t.DeadLetterQueue(), err)
		}
		if !ok {
			return keys, nil
		}
		keys = append(keys, keyOf(fmt.Sprint(d.Headers[keyHeader]), d.MessageId))
	}
}

func keyOf(header, fallback string) string {
	if header != "" && header != "<nil>" {
		return header
	}
	return fallback
}

func (r *rabbit) close() { r.conn.Close() }

// JetStream: jetstream.Declare's work stream with a durable pull consumer
// and a dead-letter stream for each consumer.

type jetStream struct {
	e             endpoint
	nc            *nats.Conn
	js            natsjs.JetStream
	orders, notes jetstream.Topology
}

func newJetStream(e endpoint, name string) (*jetStream, error) {
	nc, err := nats.Connect(e.url, nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond),
		nats.ReconnectJitter(100*time.Millisecond, 0), nats.ReconnectBufSize(64<<20))
	if err != nil {
		return nil, fmt.Errorf("NATS: %w", err)
	}
	js, err := natsjs.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	s := strings.ReplaceAll(e.prefix, ".", "-")
	return &jetStream{e: e, nc: nc, js: js,
		orders: jetstream.Topology{Stream: s + "-orders", Subjects: []string{e.prefix + ".orders"}, Consumer: "billing", AckWait: 10 * time.Second},
		notes: jetstream.Topology{Stream: s + "-charge-completed", Subjects: []string{e.prefix + "." + billing.ChargeCompletedDestination},
			Consumer: "notifications", AckWait: 10 * time.Second},
	}, nil
}

func (j *jetStream) declare(ctx context.Context) error {
	return topology.DeclareJetStream(ctx, j.js, j.orders, j.notes)
}

func (j *jetStream) remove(ctx context.Context) error {
	return topology.DeleteJetStream(ctx, j.js, j.orders, j.notes)
}

func (j *jetStream) publish(ctx context.Context, ps []payload) error {
	futures := make([]natsjs.PubAckFuture, 0, len(ps))
	for _, p := range ps {
		// No Nats-Msg-Id: the producer's retries are stored again, as on a
		// broker without deduplication, and billing keys on OrderID.
		m := &nats.Msg{Subject: j.orders.Subjects[0], Data: p.body, Header: nats.Header{keyHeader: []string{p.key}}}
		f, err := j.js.PublishMsgAsync(m)
		if err != nil {
			return err
		}
		futures = append(futures, f)
	}
	for i, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return fmt.Errorf("%s not stored by JetStream: %w", ps[i].key, err)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (j *jetStream) billing(h idem.Handler[billing.OrderPlaced], _ string, log *slog.Logger) runner {
	return jetstream.NewConsumer(j.js, j.orders, h, consumer.WithWorkers(8), jetstream.WithPrefetch(32),
		consumer.WithMaxAttempts(maxAttempts), consumer.WithMaxBodySize(maxBody), consumer.WithLogger(log),
		jetstream.WithRetryDelay(200*time.Millisecond, 2*time.Second), jetstream.WithBackoff(50*time.Millisecond, 2*time.Second))
}

func (j *jetStream) notifications(h idem.Handler[idem.Message[billing.ChargeCompleted]], _ string, log *slog.Logger) runner {
	return jetstream.NewConsumer(j.js, j.notes, h, consumer.WithWorkers(8), jetstream.WithPrefetch(32),
		consumer.WithMaxAttempts(maxAttempts), consumer.WithMaxBodySize(maxBody), consumer.WithLogger(log),
		jetstream.WithRetryDelay(200*time.Millisecond, 2*time.Second), jetstream.WithBackoff(50*time.Millisecond, 2*time.Second))
}

func (j *jetStream) publisher(_ string, log *slog.Logger) (idem.Publisher, func()) {
	p := jetstream.NewPublisher(j.nc, consumer.WithLogger(log), jetstream.WithMsg(func(m idem.OutgoingMessage, msg *nats.Msg) {
		msg.Subject = j.e.prefix + "." + m.Destination
	}))
	return p, func() {}
}

func (j *jetStream) leftover(ctx context.Context) (map[string]int, error) {
	left := map[string]int{}
	for _, t := range []jetstream.Topology{j.orders, j.notes} {
		n, err := topology.JetStreamPending(ctx, j.js, t)
		if err != nil {
			return nil, err
		}
		if n > 0 {
			left[t.Stream+"/"+t.Consumer] = n
		}
	}
	return left, nil
}

func (j *jetStream) deadLetters(ctx context.Context, notes bool) ([]string, error) {
	t := j.orders
	if notes {
		t = j.notes
	}
	s, err := j.js.Stream(ctx, t.DeadLetterStreamName())
	if err != nil {
		return nil, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil, err
	}
	var keys []string
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, natsjs.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		keys = append(keys, keyOf(m.Header.Get(keyHeader), fmt.Sprintf("%s#%d", t.DeadLetterStreamName(), seq)))
	}
	return keys, nil
}

func (j *jetStream) close() { j.nc.Close() }
