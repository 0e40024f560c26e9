package kafka

import (
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/consumer"
	"github.com/idemgen/idemgen/idem/internal/consume"
)

// Defaults of the options; idem/consumer has those of the shared ones.
const (
	DefaultMaxBodySize = 4 << 20
	DefaultRetryDelay  = 5 * time.Second
	DefaultMaxPoll     = 500
)

// An Option configures a [Consumer] or a [Publisher]; each says which. The
// options of idem/consumer (consumer.WithWorkers, consumer.WithMaxAttempts,
// consumer.WithMaxWait, consumer.WithBatch, consumer.WithLogger...) are
// Options too; for Kafka, WithWorkers bounds how many partitions are
// processed at once (the records of one partition are processed one at a
// time, in order).
type Option = consumer.Option

type options struct {
	consume.Config
	client     []kgo.Opt
	maxPoll    int
	retryDelay time.Duration
	deadLetter func(topic string) string
	record     func(m idem.OutgoingMessage, r *kgo.Record)
}

func newOptions(opts []Option) options {
	o := options{
		maxPoll:    DefaultMaxPoll,
		retryDelay: DefaultRetryDelay,
		deadLetter: func(topic string) string { return topic + ".dlq" },
	}
	o.Config = consume.Resolve(opts, DefaultMaxBodySize, &o)
	return o
}

func (o *options) validate(what string) error {
	if err := o.Config.Validate("kafka", what); err != nil {
		return err
	}
	switch {
	case o.maxPoll < 1:
		return fmt.Errorf("kafka: %s: WithMaxPollRecords(%d): want at least 1", what, o.maxPoll)
	case o.retryDelay < 0:
		return fmt.Errorf("kafka: %s: WithRetryDelay(%v): negative", what, o.retryDelay)
	case o.deadLetter == nil:
		return fmt.Errorf("kafka: %s: WithDeadLetterTopic(nil)", what)
	}
	return nil
}

// WithClientOptions adds franz-go client options (TLS, SASL, FetchMaxWait,
// a client id...) to the consumer's or publisher's client. The consumer's own
// (the group, the topics, auto-commit off, BlockRebalanceOnPoll) come last
// and win.
func WithClientOptions(opts ...kgo.Opt) Option {
	return consume.Transport[Option](func(o *options) { o.client = append(o.client, opts...) })
}

// WithMaxPollRecords bounds the records one poll takes (default 500).
func WithMaxPollRecords(n int) Option {
	return consume.Transport[Option](func(o *options) { o.maxPoll = n })
}

// WithRetryDelay is how long a partition waits before the consumer fetches a
// record to retry again (default 5s).
func WithRetryDelay(d time.Duration) Option {
	return consume.Transport[Option](func(o *options) { o.retryDelay = d })
}

// WithDeadLetterTopic maps a consumed topic to its dead-letter topic
// (default topic + ".dlq").
func WithDeadLetterTopic(f func(topic string) string) Option {
	return consume.Transport[Option](func(o *options) { o.deadLetter = f })
}

// WithRecord lets the publisher adjust each record before it is produced
// (after the topic, key and headers are set).
func WithRecord(f func(m idem.OutgoingMessage, r *kgo.Record)) Option {
	return consume.Transport[Option](func(o *options) { o.record = f })
}
