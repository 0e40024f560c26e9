package jetstream

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// DefaultAckWait is the ack wait [Declare] gives the durable consumer when
// [Topology].AckWait is zero.
const DefaultAckWait = 30 * time.Second

// Topology names what a [Consumer] reads from and dead-letters to, and what
// [Declare] declares.
type Topology struct {
	// Stream is the work stream. Required.
	Stream string
	// Subjects are the work stream's subjects, for Declare (default: the
	// stream's name).
	Subjects []string
	// Consumer is the durable pull consumer's name. Required.
	Consumer string
	// FilterSubject, when set, is the durable consumer's filter subject,
	// for Declare.
	FilterSubject string
	// AckWait is the durable consumer's ack wait, for Declare (default 30s).
	// The consumer reads the actual ack wait from the server and sends
	// InProgress at a third of it while a handler runs.
	AckWait time.Duration
	// DuplicateWindow is the work stream's deduplication window on
	// Nats-Msg-Id, for Declare (default: the server's, 2 minutes).
	DuplicateWindow time.Duration
	// DeadLetterSubject is where a dead-lettered message's copy is published
	// (default "idem.dlq." + Stream). It must not be one of the work
	// stream's subjects.
	DeadLetterSubject string
	// DeadLetterStream is the stream that captures DeadLetterSubject, for
	// Declare (default Stream + "_DLQ").
	DeadLetterStream string
	// Storage is the storage of the streams Declare declares (default
	// file).
	Storage jetstream.StorageType
	// Replicas is how many servers of a JetStream cluster hold each
	// stream Declare declares, and the durable consumer's state (default
	// 1; at most 5). With 3, a stream and its consumer survive the loss of
	// one server, their leader too (see docs/jetstream.md).
	Replicas int
}

// DeadLetterSubjectName returns the dead-letter subject: DeadLetterSubject,
// or "idem.dlq." + Stream.
func (t Topology) DeadLetterSubjectName() string {
	if t.DeadLetterSubject != "" {
		return t.DeadLetterSubject
	}
	return "idem.dlq." + t.Stream
}

// DeadLetterStreamName returns the dead-letter stream: DeadLetterStream, or
// Stream + "_DLQ".
func (t Topology) DeadLetterStreamName() string {
	if t.DeadLetterStream != "" {
		return t.DeadLetterStream
	}
	return t.Stream + "_DLQ"
}

func (t Topology) subjects() []string {
	if len(t.Subjects) > 0 {
		return t.Subjects
	}
	return []string{t.Stream}
}

func (t Topology) validate() error {
	switch {
	case t.Stream == "":
		return errors.New("jetstream: Topology.Stream is empty")
	case t.Consumer == "":
		return fmt.Errorf("jetstream: Topology.Consumer of stream %s is empty", t.Stream)
	case t.AckWait < 0:
		return fmt.Errorf("jetstream: Topology.AckWait of %s is %v", t.Consumer, t.AckWait)
	case t.Replicas < 0 || t.Replicas > 5:
		return fmt.Errorf("jetstream: Topology.Replicas of %s is %d; want 1 to 5 (0 is 1)", t.Stream, t.Replicas)
	}
	for _, s := range t.subjects() {
		if s == t.DeadLetterSubjectName() {
			return fmt.Errorf("jetstream: the dead-letter subject %q of %s is one of the work stream's subjects", s, t.Stream)
		}
	}
	return nil
}

// Declare creates or updates, on the server js talks to, the work stream
// (Stream, with Subjects, DuplicateWindow and Replicas), the dead-letter stream
// (DeadLetterStream, capturing DeadLetterSubject) and the durable pull
// consumer (Consumer on Stream: explicit ack, AckWait, no MaxDeliver: the
// Consumer dead-letters after WithMaxAttempts itself). Declaring is opt-in:
// call it at startup, or declare the same with your own tooling. It works
// with NATS server 2.9 and later.
func Declare(ctx context.Context, js jetstream.JetStream, t Topology) error {
	if err := t.validate(); err != nil {
		return err
	}
	storage := t.Storage
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:       t.Stream,
		Subjects:   t.subjects(),
		Storage:    storage,
		Duplicates: t.DuplicateWindow,
		Replicas:   t.Replicas,
	}); err != nil {
		return fmt.Errorf("jetstream: declare the stream %s: %w", t.Stream, err)
	}
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:     t.DeadLetterStreamName(),
		Subjects: []string{t.DeadLetterSubjectName()},
		Storage:  storage,
		Replicas: t.Replicas,
	}); err != nil {
		return fmt.Errorf("jetstream: declare the dead-letter stream %s: %w", t.DeadLetterStreamName(), err)
	}
	ackWait := t.AckWait
	if ackWait == 0 {
		ackWait = DefaultAckWait
	}
	if _, err := js.CreateOrUpdateConsumer(ctx, t.Stream, jetstream.ConsumerConfig{
		Durable:       t.Consumer,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       ackWait,
		MaxDeliver:    -1,
		FilterSubject: t.FilterSubject,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	}); err != nil {
		return fmt.Errorf("jetstream: declare the consumer %s on %s: %w", t.Consumer, t.Stream, err)
	}
	return nil
}
