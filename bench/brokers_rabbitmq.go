package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemgen/idemgen/bench/ledger"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/consumer"
	"github.com/idemgen/idemgen/idem/rabbitmq"
)

// rabbitKind is the RabbitMQ node at url: durable classic queues, one per
// cell, deleted afterwards.
type rabbitKind struct {
	url  string
	conn *amqp.Connection // for declaring, filling and inspecting
}

func newRabbit(url string) (*rabbitKind, error) {
	conn, err := amqp.DialConfig(url, amqp.Config{Properties: amqp.Table{"connection_name": "idem bench admin"}})
	if err != nil {
		return nil, fmt.Errorf("RabbitMQ is not reachable at %s (-amqp): %w", url, err)
	}
	return &rabbitKind{url: url, conn: conn}, nil
}

func (k *rabbitKind) name() string { return "rabbitmq" }
func (k *rabbitKind) close()       { _ = k.conn.Close() }

// channel is a fresh channel of the admin connection; close it when done.
func (k *rabbitKind) channel() (*amqp.Channel, error) {
	if k.conn.IsClosed() {
		conn, err := amqp.Dial(k.url)
		if err != nil {
			return nil, err
		}
		k.conn = conn
	}
	return k.conn.Channel()
}

type rabbitSource struct {
	k   *rabbitKind
	top rabbitmq.Topology
	n   int
}

func (k *rabbitKind) source(ctx context.Context, tag string, msgs []wireMsg, _ int) (source, error) {
	ch, err := k.channel()
	if err != nil {
		return nil, err
	}
	defer ch.Close()
	top := rabbitmq.Topology{Queue: tag, RetryDelay: time.Second}
	if err := rabbitmq.Declare(ch, top); err != nil {
		return nil, err
	}
	src := &rabbitSource{k: k, top: top, n: len(msgs)}
	out := make([]idem.OutgoingMessage, len(msgs))
	for i, m := range msgs {
		out[i] = idem.OutgoingMessage{ID: m.id, Payload: m.body}
	}
	if err := confirmPublish(ctx, ch, tag, out, 1000); err != nil {
		src.close()
		return nil, fmt.Errorf("publish the backlog: %w", err)
	}
	return src, nil
}

func (s *rabbitSource) consumeIdem(ctx context.Context, h idem.Handler[ledger.Deposit], workers int) error {
	return rabbitmq.NewConsumer(s.k.url, s.top, h, consumer.WithWorkers(workers), consumer.WithLogger(quietLog),
		rabbitmq.WithConnectionName("idem bench consumer")).Run(ctx)
}

// consumeRaw is amqp091 alone: a prefetch of twice the workers (the
// adapter's default), workers goroutines that decode each delivery and ack
// it.
func (s *rabbitSource) consumeRaw(ctx context.Context, workers int, done func()) error {
	conn, err := amqp.DialConfig(s.k.url, amqp.Config{Properties: amqp.Table{"connection_name": "idem bench raw consumer"}})
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	if err := ch.Qos(2*workers, 0, false); err != nil {
		return err
	}
	deliveries, err := ch.Consume(s.top.Queue, "", false, false, false, false, nil)
	if err != nil {
		return err
	}
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	failed := make(chan struct{})
	fail := func(err error) { once.Do(func() { first = err; close(failed) }) }
	for range workers {
		wg.Go(func() {
			for d := range deliveries {
				var msg ledger.Deposit
				if err := json.Unmarshal(d.Body, &msg); err != nil || msg.MessageID == "" {
					fail(fmt.Errorf("undecodable delivery %q: %v", d.Body, err))
					return
				}
				if err := d.Ack(false); err != nil {
					fail(err)
					return
				}
				done()
			}
		})
	}
	select {
	case <-ctx.Done():
	case <-failed:
	}
	_ = conn.Close() // returns what was not acked; ends the deliveries
	wg.Wait()
	return first
}

func (s *rabbitSource) settled(ctx context.Context) error {
	n, err := s.k.depth(s.top.Queue)
	if err != nil {
		return err
	}
	if n != 0 {
		return fmt.Errorf("%d of %d messages are back in the queue (not acked)", n, s.n)
	}
	for _, q := range []string{s.top.Queue + ".retry", s.top.Queue + ".dlq"} {
		if n, err := s.k.depth(q); err != nil || n != 0 {
			return fmt.Errorf("queue %s holds %d messages (%v); want none in a clean run", q, n, err)
		}
	}
	return nil
}

func (s *rabbitSource) close() {
	ch, err := s.k.channel()
	if err != nil {
		return
	}
	defer ch.Close()
	for _, q := range []string{s.top.Queue, s.top.Queue + ".retry", s.top.Queue + ".dlq"} {
		_, _ = ch.QueueDelete(q, false, false, false)
	}
	_ = ch.ExchangeDelete(s.top.Queue+".dlx", false, false)
}

// depth is how many ready messages queue holds.
func (k *rabbitKind) depth(queue string) (int, error) {
	ch, err := k.channel()
	if err != nil {
		return 0, err
	}
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		return 0, err
	}
	return q.Messages, nil
}

// rabbitSink is a durable classic queue that both publishers route every
// message to through the default exchange.
type rabbitSink struct {
	k     *rabbitKind
	queue string
}

func (k *rabbitKind) sink(ctx context.Context, tag string, _ int) (sink, error) {
	if err := k.declareQueue(tag); err != nil {
		return nil, err
	}
	return &rabbitSink{k: k, queue: tag}, nil
}

// declareQueue declares a durable classic queue with no arguments (as
// watermill-amqp's NewDurableQueueConfig does).
func (k *rabbitKind) declareQueue(name string) error {
	ch, err := k.channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	_, err = ch.QueueDeclare(name, true, false, false, false, nil)
	return err
}

func (k *rabbitKind) deleteQueue(name string) {
	if ch, err := k.channel(); err == nil {
		_, _ = ch.QueueDelete(name, false, false, false)
		_ = ch.Close()
	}
}

func (s *rabbitSink) publisher() (idem.Publisher, func()) {
	p := rabbitmq.NewPublisher(s.k.url, rabbitmq.WithRoute(func(string) (string, string) { return "", s.queue }),
		consumer.WithLogger(quietLog), rabbitmq.WithConnectionName("idem bench relay"))
	return p, func() { _ = p.Close() }
}

func (s *rabbitSink) rawPublish(ctx context.Context, msgs []idem.OutgoingMessage, batch int) error {
	conn, err := amqp.DialConfig(s.k.url, amqp.Config{Properties: amqp.Table{"connection_name": "idem bench raw publisher"}})
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	return confirmPublish(ctx, ch, s.queue, msgs, batch)
}

// confirmPublish publishes msgs to queue through the default exchange,
// persistent and mandatory, with the id as message_id, batch at a time on a
// channel in confirm mode: every message of a batch in flight, then their
// confirms awaited.
func confirmPublish(ctx context.Context, ch *amqp.Channel, queue string, msgs []idem.OutgoingMessage, batch int) error {
	if err := ch.Confirm(false); err != nil {
		return err
	}
	returned := ch.NotifyReturn(make(chan amqp.Return, 1))
	confirms := make([]*amqp.DeferredConfirmation, 0, batch)
	for start := 0; start < len(msgs); start += batch {
		confirms = confirms[:0]
		for _, m := range msgs[start:min(start+batch, len(msgs))] {
			dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, true, false, amqp.Publishing{
				MessageId: m.ID, Body: m.Payload, DeliveryMode: amqp.Persistent, ContentType: "application/json",
			})
			if err != nil {
				return err
			}
			confirms = append(confirms, dc)
		}
		for _, dc := range confirms {
			ok, err := dc.WaitContext(ctx)
			if err != nil {
				return err
			}
			if !ok {
				return errors.New("the broker nacked a message")
			}
		}
		select {
		case r := <-returned:
			return fmt.Errorf("a message was returned: %s", r.ReplyText)
		default:
		}
	}
	return nil
}

func (s *rabbitSink) count(ctx context.Context) (int, error) { return s.k.depth(s.queue) }
func (s *rabbitSink) close()                                 { s.k.deleteQueue(s.queue) }
