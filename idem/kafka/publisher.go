package kafka

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/internal/consume"
)

// Publisher produces outbox messages to Kafka for a relay.Relay, through an
// idempotent producer with acks from all in-sync replicas (franz-go's
// default); see the package documentation. Close it when done.
type Publisher struct {
	o   options
	cl  *kgo.Client
	err error
}

var _ idem.Publisher = (*Publisher)(nil)

// NewPublisher returns a Publisher to the brokers (seed addresses,
// host:port). Options: WithRecord, WithLogger, WithClientOptions.
func NewPublisher(brokers []string, opts ...Option) *Publisher {
	p := &Publisher{o: newOptions(opts)}
	if len(brokers) == 0 {
		p.err = errors.New("kafka: publisher: no seed brokers")
		return p
	}
	cl, err := kgo.NewClient(append(append([]kgo.Opt(nil), p.o.client...), kgo.SeedBrokers(brokers...))...)
	if err != nil {
		p.err = fmt.Errorf("kafka: publisher: %w", err)
		return p
	}
	p.cl = cl
	return p
}

// Publish produces msgs, all in flight at once, and returns one error per
// message, in order: nil once the brokers acknowledged it. Each record goes
// to the topic msg.Destination, keyed by msg.OrderingKey, or by msg.ID when
// there is none, with the headers of msg plus idem-message-id = msg.ID. The
// batch does not wait for the producer's linger (franz-go's ProduceSync):
// the relay hands over a whole batch and waits for its acknowledgements.
func (p *Publisher) Publish(ctx context.Context, msgs []idem.OutgoingMessage) []error {
	if p.err != nil {
		return consume.Failed(len(msgs), p.err)
	}
	errs := make([]error, len(msgs))
	records := make([]*kgo.Record, 0, len(msgs))
	index := make(map[*kgo.Record]int, len(msgs))
	for i, m := range msgs {
		if m.Destination == "" {
			errs[i] = fmt.Errorf("kafka: publish %s: no destination topic", m.ID)
			continue
		}
		r := p.recordOf(m)
		records = append(records, r)
		index[r] = i
	}
	if len(records) == 0 {
		return errs
	}
	// The results come in the order the records were acknowledged.
	for _, res := range p.cl.ProduceSync(ctx, records...) {
		if res.Err != nil {
			i := index[res.Record]
			errs[i] = fmt.Errorf("kafka: publish %s to %s: %w", msgs[i].ID, msgs[i].Destination, res.Err)
		}
	}
	return errs
}

func (p *Publisher) recordOf(m idem.OutgoingMessage) *kgo.Record {
	key := m.OrderingKey
	if key == "" {
		key = m.ID
	}
	headers := make([]kgo.RecordHeader, 0, len(m.Headers)+1)
	for k, v := range m.Headers {
		if k != HeaderMessageID {
			headers = append(headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
		}
	}
	headers = append(headers, kgo.RecordHeader{Key: HeaderMessageID, Value: []byte(m.ID)})
	r := &kgo.Record{Topic: m.Destination, Key: []byte(key), Value: m.Payload, Headers: headers}
	if p.o.record != nil {
		p.o.record(m, r)
	}
	return r
}

// Close flushes nothing (Publish waits for its acks) and closes the client.
func (p *Publisher) Close() {
	if p.cl != nil {
		p.cl.Close()
	}
}
