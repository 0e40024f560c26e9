package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemgen/idemgen/idem"
)

// maxInFlight bounds the messages a Publisher has unconfirmed at once: a
// larger batch goes out in chunks of this size. The channel's buffer for
// returned (unroutable) messages is as large, so the library never drops a
// return while Publish is waiting for confirms.
const maxInFlight = defaultReturnBuffer

// Publisher publishes outbox messages to RabbitMQ for a relay.Relay, with
// publisher confirms; see the package documentation. It connects on the
// first Publish and again after a lost connection. Publish calls are served
// one at a time; give each relay its own Publisher to publish in parallel.
// Close it when done.
type Publisher struct {
	url string
	o   options
	err error

	mu        sync.Mutex
	conn      *amqp.Connection
	ch        *amqp.Channel // in confirm mode
	returns   chan amqp.Return
	closed    chan *amqp.Error
	exchanges map[string]bool // known to exist on this connection
}

var _ idem.Publisher = (*Publisher)(nil)

// NewPublisher returns a Publisher to the broker at url. Options: WithRoute,
// WithPublishing, WithConfig, WithConnectionName, WithLogger.
func NewPublisher(url string, opts ...Option) *Publisher {
	p := &Publisher{url: url, o: newOptions("publisher", opts)}
	if _, err := amqp.ParseURI(url); err != nil {
		p.err = fmt.Errorf("rabbitmq: publisher: %w", err)
	} else if p.o.route == nil {
		p.err = errors.New("rabbitmq: publisher: WithRoute(nil)")
	}
	return p
}

// splitDestination is the default route: "exchange/key", or a routing key on
// the default exchange.
func splitDestination(dest string) (exchange, key string) {
	if exchange, key, ok := strings.Cut(dest, "/"); ok {
		return exchange, key
	}
	return "", dest
}

// Publish publishes msgs and returns one error per message, in order: nil
// once the broker confirmed that message. All of them are in flight at once
// (up to 1024). A message that is unroutable, nacked, or addressed to an
// exchange that does not exist fails alone; when the connection is lost every
// message not yet confirmed fails, and the next Publish connects again.
func (p *Publisher) Publish(ctx context.Context, msgs []idem.OutgoingMessage) []error {
	errs := make([]error, len(msgs))
	if p.err != nil {
		fill(errs, 0, p.err)
		return errs
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for start := 0; start < len(msgs); start += maxInFlight {
		end := min(start+maxInFlight, len(msgs))
		if err := p.connect(ctx); err != nil {
			fill(errs, start, err)
			return errs
		}
		p.publishChunk(ctx, msgs[start:end], errs[start:end])
	}
	return errs
}

func fill(errs []error, from int, err error) {
	for i := from; i < len(errs); i++ {
		errs[i] = err
	}
}

// connect makes sure the publisher has an open channel in confirm mode.
func (p *Publisher) connect(ctx context.Context) error {
	if p.ch != nil && !p.ch.IsClosed() && !p.conn.IsClosed() {
		return nil
	}
	p.drop()
	if err := ctx.Err(); err != nil {
		return err
	}
	conn, err := amqp.DialConfig(p.url, p.o.config)
	if err != nil {
		return fmt.Errorf("rabbitmq: publisher: connect: %w", err)
	}
	ch, err := conn.Channel()
	if err == nil {
		err = ch.Confirm(false)
	}
	if err != nil {
		conn.Close()
		return fmt.Errorf("rabbitmq: publisher: open a channel in confirm mode: %w", err)
	}
	p.conn, p.ch = conn, ch
	p.returns = ch.NotifyReturn(make(chan amqp.Return, defaultReturnBuffer))
	p.closed = ch.NotifyClose(make(chan *amqp.Error, 1))
	p.exchanges = map[string]bool{"": true}
	p.o.Logger.Info("rabbitmq publisher: connected")
	return nil
}

func (p *Publisher) drop() {
	if p.conn != nil {
		_ = p.conn.Close()
	}
	p.conn, p.ch, p.returns, p.closed, p.exchanges = nil, nil, nil, nil, nil
}

// Close closes the publisher's connection. A later Publish connects again.
func (p *Publisher) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var err error
	if p.conn != nil && !p.conn.IsClosed() {
		err = p.conn.Close()
	}
	p.drop()
	return err
}

// checkExchange reports whether exchange exists, on a channel of its own (a
// passive declare of a missing exchange closes its channel), and remembers an
// exchange that does. Without it, a publish to a missing exchange would close
// the publishing channel and fail every later message of the batch too.
func (p *Publisher) checkExchange(exchange string) error {
	if p.exchanges[exchange] {
		return nil
	}
	ch, err := p.conn.Channel()
	if err != nil {
		return fmt.Errorf("rabbitmq: publisher: open a channel: %w", err)
	}
	defer ch.Close()
	if err := ch.ExchangeDeclarePassive(exchange, amqp.ExchangeDirect, true, false, false, false, nil); err != nil {
		return fmt.Errorf("rabbitmq: publisher: exchange %q: %w", exchange, err)
	}
	p.exchanges[exchange] = true
	return nil
}

type pending struct {
	i  int
	dc *amqp.DeferredConfirmation
}

// publishChunk publishes msgs, all in flight, then collects their confirms
// and returns in order.
func (p *Publisher) publishChunk(ctx context.Context, msgs []idem.OutgoingMessage, errs []error) {
	byID := make(map[string][]int, len(msgs))
	var waiting []pending
	for i, m := range msgs {
		exchange, key := p.o.route(m.Destination)
		if err := p.checkExchange(exchange); err != nil {
			errs[i] = err
			continue
		}
		pub := amqp.Publishing{
			MessageId:    m.ID,
			ContentType:  "application/json",
			DeliveryMode: amqp.Persistent,
			Headers:      headerTable(m.Headers),
			Body:         m.Payload,
		}
		if p.o.publishing != nil {
			p.o.publishing(m, &pub)
		}
		dc, err := p.ch.PublishWithDeferredConfirmWithContext(ctx, exchange, key, true, false, pub)
		if err != nil {
			errs[i] = fmt.Errorf("rabbitmq: publish %s to %q: %w", m.ID, m.Destination, err)
			if p.ch.IsClosed() {
				fill(errs, i+1, errs[i])
				break
			}
			continue
		}
		byID[m.ID] = append(byID[m.ID], i)
		waiting = append(waiting, pending{i: i, dc: dc})
	}

	returned := map[int]amqp.Return{}
	take := func(r amqp.Return) {
		// Returns come in publishing order; the first not yet returned
		// message with this id is the one.
		for _, i := range byID[r.MessageId] {
			if _, ok := returned[i]; !ok {
				returned[i] = r
				return
			}
		}
	}
	var lost error
	for _, w := range waiting {
		m := msgs[w.i]
		if lost != nil {
			errs[w.i] = lost
			continue
		}
	wait:
		for {
			select {
			case r, ok := <-p.returns:
				if !ok { // the channel closed: its confirms end too
					p.returns = nil
					continue
				}
				take(r)
			case <-w.dc.Done():
				break wait
			case e := <-p.closed:
				lost = fmt.Errorf("rabbitmq: publisher: the channel closed before the broker confirmed %s: %w", m.ID, amqpErr(e))
				p.closed = nil // a closed channel's NotifyClose stays closed: read it once
				break wait
			case <-ctx.Done():
				lost = fmt.Errorf("rabbitmq: publisher: %w before the broker confirmed %s", ctx.Err(), m.ID)
				break wait
			}
		}
		if lost != nil {
			errs[w.i] = lost
			continue
		}
	drain: // a message's return precedes its confirm
		for {
			select {
			case r, ok := <-p.returns:
				if !ok {
					// Closed with the channel: a nil channel is never
					// ready, so the loop ends at default.
					p.returns = nil
					continue
				}
				take(r)
			default:
				break drain
			}
		}
		switch r, ok := returned[w.i]; {
		case ok:
			exchange, key := p.o.route(m.Destination)
			errs[w.i] = fmt.Errorf("rabbitmq: publisher: %s to %q returned unroutable (%d %s): no queue is bound for routing key %q on exchange %q", m.ID, m.Destination, r.ReplyCode, r.ReplyText, key, exchange)
		case !w.dc.Acked() && p.ch.IsClosed():
			// A closing channel ends its outstanding confirms unacked:
			// not the broker's nack, the lost channel.
			lost = fmt.Errorf("rabbitmq: publisher: the channel closed before the broker confirmed %s: %w", m.ID, p.closeReason())
			errs[w.i] = lost
		case !w.dc.Acked():
			errs[w.i] = fmt.Errorf("rabbitmq: publisher: the broker nacked %s to %q", m.ID, m.Destination)
		}
	}
	if lost == nil && p.ch.IsClosed() {
		lost = fmt.Errorf("rabbitmq: publisher: the channel closed: %w", p.closeReason())
	}
	if lost != nil {
		p.o.Logger.Warn("rabbitmq publisher: batch interrupted; what was not confirmed fails and is published again", "err", lost)
		p.drop()
	}
}

// closeReason is why the publishing channel closed, if the broker said so.
func (p *Publisher) closeReason() error {
	if p.closed != nil {
		select {
		case e := <-p.closed:
			p.closed = nil
			return amqpErr(e)
		default:
		}
	}
	return amqp.ErrClosed
}

func headerTable(h map[string]string) amqp.Table {
	if len(h) == 0 {
		return nil
	}
	t := make(amqp.Table, len(h))
	for k, v := range h {
		t[k] = v
	}
	return t
}
