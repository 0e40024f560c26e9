package idem

import "context"

// OutgoingMessage is one outbox row on its way to a broker.
type OutgoingMessage struct {
	ID          string            // the stable id, a UUID in text form: the broker's message id
	Destination string            // as given to Publish: exchange/routing key, subject or topic
	OrderingKey string            // "" when none
	Headers     map[string]string // as given to Publish
	Payload     []byte            // JSON, or the bytes given as []byte / json.RawMessage
	Attempt     int               // 1 on the first try
}

// Publisher sends msgs and returns one error per message, in order: nil once the broker
// confirmed that message.
//
// A relay.Relay calls Publish with one batch at a time and no transaction open. It
// cancels ctx when it stops and when it can no longer hold the batch's lease
// (another relay may then take the rows): Publish must return promptly once
// ctx is done, with an error for every message the broker has not confirmed.
// A message whose error is not nil is tried again after a backoff, so a
// broker may see a message more than once, always with the same ID: the next
// consumer keys on it. Publish may send the messages of a batch concurrently;
// in the relay's ordered mode a batch holds at most one message per ordering
// key. Broker adapters implement Publisher; so may users, for a broker idem
// has no adapter for.
type Publisher interface {
	Publish(ctx context.Context, msgs []OutgoingMessage) []error
}

// PublisherFunc adapts a function to a [Publisher].
type PublisherFunc func(ctx context.Context, msgs []OutgoingMessage) []error

// Publish calls f.
func (f PublisherFunc) Publish(ctx context.Context, msgs []OutgoingMessage) []error {
	return f(ctx, msgs)
}
