package jetstream

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/internal/consume"
)

// Publisher publishes outbox messages to JetStream for a relay.Relay, each
// with its PubAck; see the package documentation. Publish calls are served
// one at a time; give each relay its own Publisher to publish in parallel.
type Publisher struct {
	js  jetstream.JetStream
	o   options
	err error
	mu  sync.Mutex
}

var _ idem.Publisher = (*Publisher)(nil)

// NewPublisher returns a Publisher over nc. The connection should reconnect
// forever (nats.MaxReconnects(-1)); a message published while it is
// reconnecting fails and the relay tries it again. Options: WithMaxInFlight,
// WithMsg, WithLogger.
func NewPublisher(nc *nats.Conn, opts ...Option) *Publisher {
	p := &Publisher{o: newOptions(opts)}
	if nc == nil {
		p.err = errors.New("jetstream: publisher: no NATS connection")
		return p
	}
	if p.err = p.o.validate("publisher"); p.err != nil {
		return p
	}
	p.js, p.err = jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(p.o.maxInFlight))
	if p.err != nil {
		p.err = fmt.Errorf("jetstream: publisher: %w", p.err)
	}
	return p
}

// Publish publishes msgs to their destinations (subjects) and returns one
// error per message, in order: nil once the stream's PubAck came back (also
// when the stream reports it a duplicate: it holds the message already).
// Every message carries the outbox's stable id as Nats-Msg-Id, so the
// stream's deduplication window drops a relay's second try, and the next
// consumer keys on it. Up to WithMaxInFlight messages are in flight at once.
// A subject no stream captures, or a stream that refuses the message, fails
// that message alone.
func (p *Publisher) Publish(ctx context.Context, msgs []idem.OutgoingMessage) []error {
	if p.err != nil {
		return consume.Failed(len(msgs), p.err)
	}
	errs := make([]error, len(msgs))
	p.mu.Lock()
	defer p.mu.Unlock()
	for start := 0; start < len(msgs); start += p.o.maxInFlight {
		end := min(start+p.o.maxInFlight, len(msgs))
		p.publishChunk(ctx, msgs[start:end], errs[start:end])
	}
	return errs
}

func (p *Publisher) publishChunk(ctx context.Context, msgs []idem.OutgoingMessage, errs []error) {
	futures := make([]jetstream.PubAckFuture, len(msgs))
	for i, m := range msgs {
		if err := ctx.Err(); err != nil {
			errs[i] = fmt.Errorf("jetstream: publisher: %w before %s was published", err, m.ID)
			continue
		}
		nm := &nats.Msg{Subject: m.Destination, Data: m.Payload, Header: nats.Header{}}
		for k, v := range m.Headers {
			nm.Header.Set(k, v)
		}
		if p.o.msg != nil {
			p.o.msg(m, nm)
		}
		nm.Header.Set(jetstream.MsgIDHeader, m.ID)
		f, err := p.js.PublishMsgAsync(nm)
		if err != nil {
			errs[i] = fmt.Errorf("jetstream: publisher: publish %s to %q: %w", m.ID, m.Destination, err)
			continue
		}
		futures[i] = f
	}
	for i, f := range futures {
		if f == nil {
			continue
		}
		m := msgs[i]
		select {
		case <-f.Ok():
		case err := <-f.Err():
			errs[i] = fmt.Errorf("jetstream: publisher: no PubAck for %s to %q: %w", m.ID, m.Destination, err)
		case <-ctx.Done():
			errs[i] = fmt.Errorf("jetstream: publisher: %w before the PubAck of %s", ctx.Err(), m.ID)
		}
	}
}
