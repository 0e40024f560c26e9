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
// discards them, and so does a delivery that does not commit. A relay.Relay
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
//
// A set-based handler, one that takes the whole batch (msgs []M), gets one
// Outbox for the run and publishes what msgs[i] causes through out.For(i):
// each outgoing message is tied to the incoming message that caused it, whose
// key its id derives from, exactly as if a handler of one message had
// published it. The run's Outbox itself refuses Publish.
type Outbox struct {
	buf link.Buffer
	// each are the Outboxes of the messages of a set-based handler's run, in
	// the order of its msgs; nil for the Outbox of one message.
	each []*Outbox
	// set is the run's Outbox of a set-based handler, for the Outbox of one
	// of its messages (For): it is closed when the run is.
	set *Outbox
}

// For returns the Outbox of msgs[i], for a set-based handler (one that takes
// msgs []M and out *Outbox): what it publishes there is written with the
// commit and gets the ids of msgs[i]'s key ([OutgoingMessageID] of the
// consumer, that key and the position among msgs[i]'s messages). It panics
// when i is out of range, like an index of msgs, and on the Outbox of a
// handler of one message, which has no For: it publishes on out itself.
func (o *Outbox) For(i int) *Outbox {
	if o.each == nil {
		panic("idem: Outbox.For on the Outbox of a handler of one message; publish on it directly (For is for a set-based handler, whose msgs []M each have an Outbox)")
	}
	if i < 0 || i >= len(o.each) {
		panic(fmt.Sprintf("idem: Outbox.For(%d) out of range: the run has %d messages", i, len(o.each)))
	}
	return o.each[i]
}

// closed reports whether the run the Outbox belongs to is over.
func (o *Outbox) closed() bool { return o.buf.Closed || (o.set != nil && o.set.buf.Closed) }

// newSetOutbox returns the Outbox of a set-based handler's run of n
// messages, and the Outbox of each.
func newSetOutbox(n int) (*Outbox, []*Outbox) {
	set := &Outbox{each: make([]*Outbox, n)}
	for i := range set.each {
		set.each[i] = &Outbox{set: set}
	}
	return set, set.each
}

// PublishOption configures one message of [Outbox.Publish].
type PublishOption func(*publishOptions)

type publishOptions struct {
	orderingKey string
	headers     map[string]string
}

// WithOrderingKey sets the message's ordering key: a relay in ordered mode
// (relay.WithOrdered) publishes the messages of one key one at a time, in
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
	if o.closed() {
		return fmt.Errorf("idem: Outbox.Publish(%q) after the handler returned: an Outbox belongs to one run of the handler and must not be kept beyond it", destination)
	}
	if o.each != nil {
		return fmt.Errorf("idem: Outbox.Publish(%q) on the Outbox of a set-based handler's run: publish through out.For(i), the Outbox of msgs[i], so that the message is tied to the one that caused it (its id derives from that message's key)", destination)
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

// OutboxChannel is the channel of the NOTIFY that wakes the relays after
// commits that wrote outbox rows. It is sent once such a commit is
// acknowledged, at most once per DB every few milliseconds.
const OutboxChannel = "idem_outbox"

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
