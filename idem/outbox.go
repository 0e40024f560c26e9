package idem

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/idemgen/idemgen/idem/internal/config"
	"github.com/idemgen/idemgen/idem/internal/link"
	"github.com/idemgen/idemgen/idem/internal/msgid"
)

// Outbox buffers the messages a handler sends. A handler that takes an
// *Outbox right after its tx calls Publish; the generated wrapper's inbox
// writes the buffered messages as rows of the outbox table,
// idem_outbox, in the round trip that stores the result and commits, so they
// exist exactly when the handler's change committed. A handler error or panic
// discards them, and so does a delivery that does not commit. A [Relay]
// then publishes the committed rows.
//
// The messages of one run get stable ids, [OutgoingMessageID] of the
// consumer, the incoming key and their position among the run's Publish
// calls (0, 1, ...): a run after a crash before the commit mints the same
// ids.
//
// An Outbox belongs to one run of the handler: it is not safe for
// concurrent use (a handler that publishes from several goroutines
// serialises the calls itself, and their order is the messages' order), and
// it refuses Publish once the handler has returned.
type Outbox struct {
	buf link.Buffer
}

// PublishOption configures one message of [Outbox.Publish].
type PublishOption func(*publishOptions)

type publishOptions struct {
	orderingKey string
	headers     map[string]string
}

// WithOrderingKey sets the message's ordering key: a relay in ordered mode
// ([WithRelayOrdered]) publishes the messages of one key one at a time, in
// the order their rows were written. An empty key is no key.
func WithOrderingKey(key string) PublishOption {
	return func(o *publishOptions) { o.orderingKey = key }
}

// WithHeader adds a header to the message; the broker adapter sends it as a
// header of the broker's message. Repeat it for several headers; a name given
// twice keeps its last value.
func WithHeader(name, value string) PublishOption {
	return func(o *publishOptions) {
		if o.headers == nil {
			o.headers = make(map[string]string, 2)
		}
		o.headers[name] = value
	}
}

// Publish buffers a message to destination (an exchange and routing key, a
// subject or a topic, as the relay's [Publisher] reads it). A payload of type
// []byte or json.RawMessage is sent as given (copied: the caller may reuse
// it); anything else is encoded with encoding/json.
//
// Publish writes nothing: the message becomes a row only if the delivery
// commits. Its error wraps [ErrUnencodable] when the message cannot become a
// row: a payload that encoding/json refuses (NaN or ±Inf, a channel, a cycle,
// a MarshalJSON that fails), an empty destination, or a destination, ordering
// key or header that is not valid UTF-8 or holds a NUL byte (PostgreSQL's text
// and jsonb cannot). Return it from the handler: the delivery then rolls back
// and [ActionFor] says DeadLetter, since it fails the same way every time. A
// Publish that failed buffers nothing and takes no position in the sequence
// of ids.
func (o *Outbox) Publish(destination string, payload any, opts ...PublishOption) error {
	if o.buf.Closed {
		return fmt.Errorf("idem: Outbox.Publish(%q) after the handler returned: an Outbox belongs to one run of the handler and must not be kept beyond it", destination)
	}
	var po publishOptions
	for _, opt := range opts {
		opt(&po)
	}
	if destination == "" {
		return fmt.Errorf("%w: outgoing message: the destination is empty", ErrUnencodable)
	}
	if err := checkText("the destination", destination); err != nil {
		return err
	}
	if err := checkText(fmt.Sprintf("the ordering key of the message to %q", destination), po.orderingKey); err != nil {
		return err
	}
	if len(po.orderingKey) > MaxOrderingKeyBytes {
		// The ordered index (ordering_key, id) holds at most 2704 bytes a
		// row; a longer key fails the commit (SQLSTATE 54000), every time.
		return fmt.Errorf("%w: outgoing message: the ordering key of the message to %q is %d bytes, more than the %d the outbox's index holds (MaxOrderingKeyBytes)",
			ErrUnencodable, destination, len(po.orderingKey), MaxOrderingKeyBytes)
	}
	headers := "{}"
	if len(po.headers) > 0 {
		for name, value := range po.headers {
			if err := checkText(fmt.Sprintf("the name of a header of the message to %q", destination), name); err != nil {
				return err
			}
			if err := checkText(fmt.Sprintf("header %q of the message to %q", name, destination), value); err != nil {
				return err
			}
		}
		b, err := json.Marshal(po.headers) // cannot fail: strings, checked above
		if err != nil {
			return fmt.Errorf("%w: the headers of the message to %q: %w", ErrUnencodable, destination, err)
		}
		headers = string(b)
	}
	var body []byte
	switch p := payload.(type) {
	case []byte:
		body = append(make([]byte, 0, len(p)), p...)
	case json.RawMessage:
		body = append(make([]byte, 0, len(p)), p...)
	default:
		b, err := json.Marshal(payload)
		if err != nil {
			return fmt.Errorf("%w: the payload (%T) of the message to %q: %w", ErrUnencodable, payload, destination, err)
		}
		body = b
	}
	o.buf.Msgs = append(o.buf.Msgs, link.Message{Destination: destination, OrderingKey: po.orderingKey, Headers: headers, Payload: body})
	return nil
}

// MaxOrderingKeyBytes is the longest ordering key (WithOrderingKey) the
// outbox takes, in bytes: its ordered index holds at most 2704 bytes a row,
// so Outbox.Publish refuses a longer key with ErrUnencodable before the
// commit rather than have the commit fail on every delivery.
const MaxOrderingKeyBytes = 2048

// checkText rejects what a PostgreSQL text or jsonb value cannot hold.
func checkText(what, s string) error {
	switch {
	case !utf8.ValidString(s):
		return fmt.Errorf("%w: outgoing message: %s is not valid UTF-8", ErrUnencodable, what)
	case strings.IndexByte(s, 0) >= 0:
		return fmt.Errorf("%w: outgoing message: %s contains a NUL byte", ErrUnencodable, what)
	}
	return nil
}

// WithoutNotify turns off the NOTIFY on [OutboxChannel] that wakes the
// relays after a publishing inbox committed outbox rows. The NOTIFY is not
// part of the delivery's transaction (whose commit it would serialise with
// every other notifying commit, PostgreSQL takes a server-wide lock for it):
// once the commit is acknowledged, one NOTIFY of its own is sent on a
// connection of the inbox's DB, shared by the commits of that DB within a
// few milliseconds (docs/outbox.md). Without it, relays find the rows by
// polling (their poll interval is then the latency from commit to publish).
// Without outbox rows nothing is sent either way.
func WithoutNotify() Option {
	return func(o *options) { o.NoNotify = true; o.Given |= config.WithoutNotify }
}

// OutgoingMessageID is the stable id of the seq-th message (0-based) that a
// run of the handler of consumer publishes for the incoming key (its parts as
// the key= fields, in order): the id of its outbox row and the broker's
// message id, a UUID in text form. A rerun (after a crash before the commit)
// mints the same ids; two different (consumer, key, seq) never share one.
//
// It is a name-based UUID, version 5 (RFC 9562: the SHA-1 of a namespace and
// a name), in the namespace
// uuid.NewSHA1(uuid.NameSpaceURL, "https://github.com/idemgen/idemgen/idem#OutgoingMessageID"),
// of a name that encodes (consumer, key, seq) injectively: "idem.outbox.v1",
// then the consumer, the number of key parts (a uvarint), each part, and seq
// (a uvarint); a string is its length as a uvarint and its bytes. A key part
// is a type byte and its value: 's' and a string, 'i' (signed) or 'u'
// (unsigned) and 8 bytes big-endian, 'g' and the 16 bytes of a UUID
// ([16]byte), 'n' alone for a NULL part (nil); any other type, which no
// generated Table returns, 'x' and two strings, its Go type name and its fmt
// %v. Different names give different UUIDs unless SHA-1 collides in its first
// 122 bits.
func OutgoingMessageID(consumer string, key []any, seq int) string {
	return msgid.ID(msgid.Name(consumer, key), seq).String()
}
