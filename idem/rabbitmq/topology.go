package rabbitmq

import (
	"errors"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// DefaultRetryDelay is the retry delay of a Topology that sets none.
const DefaultRetryDelay = 5 * time.Second

// Topology names a work queue and says how Declare declares it and its retry
// and dead-letter routes. The consumer needs only Queue and RetryDelay; the
// other names follow from Queue.
type Topology struct {
	// Queue is the work queue the consumer consumes.
	Queue string
	// RetryDelay is how long a delivery that failed with a Retry action
	// waits in the retry queue before it is delivered again (default
	// DefaultRetryDelay). Declare sets it as the retry queue's
	// x-message-ttl; the consumer also sets it as each retry copy's
	// expiration, so a retry queue declared with a longer TTL still holds a
	// copy for RetryDelay at most once it is at the head of the queue.
	RetryDelay time.Duration
	// Quorum makes Declare declare quorum queues (replicated; a quorum queue
	// counts redeliveries in x-delivery-count) instead of classic ones.
	Quorum bool
	// Exchange, when not empty, is an exchange Declare declares (durable, of
	// ExchangeKind, "direct" when empty) and binds Queue to with each of
	// BindingKeys (Queue itself when none).
	Exchange     string
	ExchangeKind string
	BindingKeys  []string
}

// RetryQueue returns the name of the retry queue: Queue + ".retry".
func (t Topology) RetryQueue() string { return t.Queue + ".retry" }

// DeadLetterExchange returns the name of the dead-letter exchange: Queue +
// ".dlx".
func (t Topology) DeadLetterExchange() string { return t.Queue + ".dlx" }

// DeadLetterQueue returns the name of the dead-letter queue: Queue + ".dlq".
func (t Topology) DeadLetterQueue() string { return t.Queue + ".dlq" }

func (t Topology) retryDelay() time.Duration {
	if t.RetryDelay <= 0 {
		return DefaultRetryDelay
	}
	return t.RetryDelay
}

func (t Topology) validate() error {
	switch {
	case t.Queue == "":
		return errors.New("rabbitmq: the Topology has no Queue")
	case len(t.Queue) > 255-len(".retry"):
		return fmt.Errorf("rabbitmq: queue name %q is %d bytes long; with the suffix .retry it must fit AMQP's 255", t.Queue, len(t.Queue))
	case t.RetryDelay < 0:
		return fmt.Errorf("rabbitmq: queue %s: negative RetryDelay %v", t.Queue, t.RetryDelay)
	case t.RetryDelay > 0 && t.RetryDelay < time.Millisecond:
		return fmt.Errorf("rabbitmq: queue %s: RetryDelay %v is below RabbitMQ's millisecond TTL resolution", t.Queue, t.RetryDelay)
	}
	return nil
}

// Declare declares t's topology on ch: the dead-letter exchange and queue,
// the retry queue, the work queue and, if t.Exchange is set, that exchange
// and the work queue's bindings to it; see the package documentation for
// their arguments. Declaring is idempotent, but RabbitMQ refuses to redeclare
// a queue with other arguments (PRECONDITION_FAILED, which also closes ch):
// the error names the queue, so delete it or declare it with the same
// arguments.
func Declare(ch *amqp.Channel, t Topology) error {
	if err := t.validate(); err != nil {
		return err
	}
	queueArgs := func(args amqp.Table) amqp.Table {
		if t.Quorum {
			args["x-queue-type"] = "quorum"
		}
		return args
	}
	dlx, dlq, retry := t.DeadLetterExchange(), t.DeadLetterQueue(), t.RetryQueue()
	if err := ch.ExchangeDeclare(dlx, amqp.ExchangeDirect, true, false, false, false, nil); err != nil {
		return fmt.Errorf("rabbitmq: declare the dead-letter exchange %s: %w", dlx, err)
	}
	if _, err := ch.QueueDeclare(dlq, true, false, false, false, queueArgs(amqp.Table{})); err != nil {
		return fmt.Errorf("rabbitmq: declare the dead-letter queue %s: %w", dlq, err)
	}
	if err := ch.QueueBind(dlq, t.Queue, dlx, false, nil); err != nil {
		return fmt.Errorf("rabbitmq: bind the dead-letter queue %s to %s: %w", dlq, dlx, err)
	}
	if _, err := ch.QueueDeclare(retry, true, false, false, false, queueArgs(amqp.Table{
		"x-message-ttl":             t.retryDelay().Milliseconds(),
		"x-dead-letter-exchange":    "",
		"x-dead-letter-routing-key": t.Queue,
	})); err != nil {
		return fmt.Errorf("rabbitmq: declare the retry queue %s: %w", retry, err)
	}
	if _, err := ch.QueueDeclare(t.Queue, true, false, false, false, queueArgs(amqp.Table{
		"x-dead-letter-exchange":    dlx,
		"x-dead-letter-routing-key": t.Queue,
	})); err != nil {
		return fmt.Errorf("rabbitmq: declare the work queue %s: %w", t.Queue, err)
	}
	if t.Exchange == "" {
		return nil
	}
	kind := t.ExchangeKind
	if kind == "" {
		kind = amqp.ExchangeDirect
	}
	if err := ch.ExchangeDeclare(t.Exchange, kind, true, false, false, false, nil); err != nil {
		return fmt.Errorf("rabbitmq: declare the exchange %s: %w", t.Exchange, err)
	}
	keys := t.BindingKeys
	if len(keys) == 0 {
		keys = []string{t.Queue}
	}
	for _, key := range keys {
		if err := ch.QueueBind(t.Queue, key, t.Exchange, false, nil); err != nil {
			return fmt.Errorf("rabbitmq: bind %s to %s with %q: %w", t.Queue, t.Exchange, key, err)
		}
	}
	return nil
}

// checkRoutes reports what the consumer routes to and cannot find: the retry
// queue and the dead-letter exchange. A passive declare of a missing entity
// closes the channel, so each check gets a channel of its own.
func checkRoutes(conn *amqp.Connection, t Topology) error {
	check := func(what, name string, f func(ch *amqp.Channel) error) error {
		ch, err := conn.Channel()
		if err != nil {
			return fmt.Errorf("rabbitmq: open a channel: %w", err)
		}
		defer ch.Close()
		if err := f(ch); err != nil {
			return fmt.Errorf("rabbitmq: queue %s: its %s %s: %w (declare the topology with rabbitmq.Declare, or as the package documentation describes)", t.Queue, what, name, err)
		}
		return nil
	}
	if err := check("retry queue", t.RetryQueue(), func(ch *amqp.Channel) error {
		_, err := ch.QueueDeclarePassive(t.RetryQueue(), true, false, false, false, nil)
		return err
	}); err != nil {
		return err
	}
	return check("dead-letter exchange", t.DeadLetterExchange(), func(ch *amqp.Channel) error {
		return ch.ExchangeDeclarePassive(t.DeadLetterExchange(), amqp.ExchangeDirect, true, false, false, false, nil)
	})
}
