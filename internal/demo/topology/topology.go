// Package topology declares, inspects and removes the RabbitMQ and JetStream
// topologies (rabbitmq.Topology, jetstream.Topology) of a run of the flow
// example (examples/flow) or the soak (soak), which wire a broker alike.
package topology

import (
	"context"
	"errors"
	"fmt"

	natsjs "github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemgen/idemgen/idem/jetstream"
	"github.com/idemgen/idemgen/idem/rabbitmq"
)

// DeclareRabbitMQ declares each of ts (rabbitmq.Declare) on ch.
func DeclareRabbitMQ(ch *amqp.Channel, ts ...rabbitmq.Topology) error {
	for _, t := range ts {
		if err := rabbitmq.Declare(ch, t); err != nil {
			return err
		}
	}
	return nil
}

// DeleteRabbitMQ deletes the work, retry and dead-letter queues and the
// dead-letter exchange of each of ts, on a channel of its own on conn.
func DeleteRabbitMQ(conn *amqp.Connection, ts ...rabbitmq.Topology) error {
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	var errs []error
	for _, t := range ts {
		for _, q := range []string{t.Queue, t.RetryQueue(), t.DeadLetterQueue()} {
			if _, err := ch.QueueDelete(q, false, false, false); err != nil {
				errs = append(errs, fmt.Errorf("delete queue %s: %w", q, err))
			}
		}
		if err := ch.ExchangeDelete(t.DeadLetterExchange(), false, false); err != nil {
			errs = append(errs, fmt.Errorf("delete exchange %s: %w", t.DeadLetterExchange(), err))
		}
	}
	return errors.Join(errs...)
}

// RabbitMQMessages returns the number of messages in each of queues that
// holds any, inspected on a channel of its own on conn.
func RabbitMQMessages(conn *amqp.Connection, queues ...string) (map[string]int, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, err
	}
	defer ch.Close()
	left := map[string]int{}
	for _, name := range queues {
		q, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
		if err != nil {
			return nil, fmt.Errorf("inspect queue %s: %w", name, err)
		}
		if q.Messages > 0 {
			left[name] = q.Messages
		}
	}
	return left, nil
}

// DeclareJetStream declares each of ts (jetstream.Declare).
func DeclareJetStream(ctx context.Context, js natsjs.JetStream, ts ...jetstream.Topology) error {
	for _, t := range ts {
		if err := jetstream.Declare(ctx, js, t); err != nil {
			return err
		}
	}
	return nil
}

// DeleteJetStream deletes the work and dead-letter streams of each of ts.
func DeleteJetStream(ctx context.Context, js natsjs.JetStream, ts ...jetstream.Topology) error {
	var errs []error
	for _, t := range ts {
		for _, s := range []string{t.Stream, t.DeadLetterStreamName()} {
			if err := js.DeleteStream(ctx, s); err != nil {
				errs = append(errs, fmt.Errorf("delete stream %s: %w", s, err))
			}
		}
	}
	return errors.Join(errs...)
}

// JetStreamPending returns how many messages t's consumer has not acked:
// those not yet delivered and those delivered and awaiting their ack.
func JetStreamPending(ctx context.Context, js natsjs.JetStream, t jetstream.Topology) (int, error) {
	c, err := js.Consumer(ctx, t.Stream, t.Consumer)
	if err != nil {
		return 0, err
	}
	info, err := c.Info(ctx)
	if err != nil {
		return 0, err
	}
	return int(info.NumPending) + info.NumAckPending, nil
}
