package idem

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemgen/idemgen/generated/outboxdb"
)

// Outbox buffers the messages a handler sends. A handler that takes an
// *Outbox right after its tx (see [NewPublishingInbox]) calls Publish; the
// inbox writes the buffered messages as rows of the outbox table,
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
	msgs   []outgoing
	closed bool
}

// outgoing is one buffered message, encoded.
type outgoing struct {
	destination string
	orderingKey string
	headers     string // a JSON object
	payload     []byte
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
	if o.closed {
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
	o.msgs = append(o.msgs, outgoing{destination: destination, orderingKey: po.orderingKey, headers: headers, payload: body})
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

// NewPublishingInbox is [NewInbox] for a handler that sends messages: it
// takes an *[Outbox] right after tx. What the handler publishes is written to
// idem_outbox in the round trip that commits the delivery (with the result
// and the check of the claim), as one multi-row INSERT, and with one NOTIFY
// on [OutboxChannel] unless [WithoutNotify] is given: a run that publishes
// nothing, or 1, or 10 messages costs the same round trips. A duplicate
// delivery runs no handler and writes no row; the rows of the first delivery
// stay for the relay.
//
// The outbox table must be in the database the inbox table is in, found
// through the connection's search_path: apply the migrations of
// github.com/idemgen/idemgen/migrations (idemgen writes them into the
// handler's migrations folder).
//
// For generated code: the constructor of a generated wrapper whose handler
// takes an *idem.Outbox calls it.
func NewPublishingInbox[M, R any](db DB, table Table[M], handler func(ctx context.Context, tx pgx.Tx, out *Outbox, msg M) (R, error), opts ...Option) *Inbox[M, R] {
	if handler == nil {
		panic(fmt.Sprintf("idem.NewPublishingInbox (consumer %s): the handler is nil", table.Consumer))
	}
	in := newInbox[M, R]("idem.NewPublishingInbox", db, table, opts)
	in.publishing = handler
	return in
}

// NoResultPublishing adapts a publishing handler that returns only an error to
// [NewPublishingInbox], as [NoResult] does for [NewInbox].
//
// For generated code: the constructor of a generated wrapper calls it.
func NoResultPublishing[M any](handler func(ctx context.Context, tx pgx.Tx, out *Outbox, msg M) error) func(context.Context, pgx.Tx, *Outbox, M) (None, error) {
	return func(ctx context.Context, tx pgx.Tx, out *Outbox, msg M) (None, error) {
		return None{}, handler(ctx, tx, out, msg)
	}
}

// WithoutNotify turns off the NOTIFY on [OutboxChannel] that the commit round
// trip of a publishing inbox sends when it wrote outbox rows. A NOTIFY takes
// a database-wide lock at commit that serialises the committing transactions
// which notify; without it, relays find the rows by polling (their poll
// interval is then the latency from commit to publish). Without outbox rows
// nothing is sent either way.
func WithoutNotify() Option {
	return func(o *options) { o.noNotify = true; o.given |= optWithoutNotify }
}

// outboxNamespace is the namespace of the outgoing message ids:
// uuid.NewSHA1(uuid.NameSpaceURL, "https://github.com/idemgen/idemgen/idem#OutgoingMessageID"),
// written out (TestOutgoingMessageIDNamespace checks it).
var outboxNamespace = uuid.MustParse("e542afdc-30ee-55de-8f8c-b40f62f867cf")

// OutgoingMessageID is the stable id of the seq-th message (0-based) that a
// run of the handler of consumer publishes for the incoming key (its parts as
// [Table.Key] returns them): the id of its outbox row and the broker's
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
	return outgoingID(outgoingName(consumer, key), seq).String()
}

// outgoingName is the name of OutgoingMessageID without seq.
func outgoingName(consumer string, key []any) []byte {
	b := make([]byte, 0, 64)
	b = appendString(b, "idem.outbox.v1")
	b = appendString(b, consumer)
	b = binary.AppendUvarint(b, uint64(len(key)))
	for _, part := range key {
		switch v := part.(type) {
		case nil:
			b = append(b, 'n')
		case string:
			b = append(b, 's')
			b = appendString(b, v)
		case int64:
			b = binary.BigEndian.AppendUint64(append(b, 'i'), uint64(v))
		case int:
			b = binary.BigEndian.AppendUint64(append(b, 'i'), uint64(int64(v)))
		case int32:
			b = binary.BigEndian.AppendUint64(append(b, 'i'), uint64(int64(v)))
		case uint64:
			b = binary.BigEndian.AppendUint64(append(b, 'u'), v)
		case [16]byte:
			b = append(append(b, 'g'), v[:]...)
		default:
			b = append(b, 'x')
			b = appendString(b, fmt.Sprintf("%T", v))
			b = appendString(b, fmt.Sprintf("%v", v))
		}
	}
	return b
}

// outgoingID completes a name of outgoingName with seq.
func outgoingID(name []byte, seq int) uuid.UUID {
	return uuid.NewSHA1(outboxNamespace, binary.AppendUvarint(name[:len(name):len(name)], uint64(seq)))
}

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// notifyOutbox is the NOTIFY of a committing transaction that wrote outbox
// rows; it is delivered when the transaction commits, and not at all if it
// does not.
const notifyOutbox = "SELECT pg_notify('" + OutboxChannel + "', '')"

// queueOutbox queues on b the INSERT of the outgoing messages of deliveries
// (sql/outbox.sql's InsertOutbox, compiled by sqlc): outs[k] are the
// messages the delivery of keys[k] published, each with its stable id. It
// queues nothing and returns 0 when there is none; else it returns how many
// rows the INSERT writes.
func queueOutbox(b *pgx.Batch, consumer string, fields []string, keys [][]any, outs [][]outgoing) int {
	n := 0
	for _, msgs := range outs {
		n += len(msgs)
	}
	if n == 0 {
		return 0
	}
	p := outboxdb.InsertOutboxParams{
		Consumer: consumer, Keys: make([]string, 0, n), MessageIds: make([]string, 0, n),
		Destinations: make([]string, 0, n), OrderingKeys: make([]string, 0, n),
		Headers: make([]string, 0, n), Payloads: make([][]byte, 0, n),
	}
	for k, msgs := range outs {
		if len(msgs) == 0 {
			continue
		}
		name, key := outgoingName(consumer, keys[k]), formatKey(fields, keys[k])
		for seq, m := range msgs {
			p.Keys = append(p.Keys, key)
			p.MessageIds = append(p.MessageIds, outgoingID(name, seq).String())
			p.Destinations = append(p.Destinations, m.destination)
			p.OrderingKeys = append(p.OrderingKeys, m.orderingKey)
			p.Headers = append(p.Headers, m.headers)
			p.Payloads = append(p.Payloads, m.payload)
		}
	}
	// Queued, not run: the INSERT rides in the commit's round trip, and its
	// result is read from the batch's results.
	_, _ = outboxdb.New(queueOnly{b}).InsertOutbox(context.Background(), p)
	return n
}

// queueOnly is an outboxdb.DBTX that queues a statement on a batch instead
// of running it, so that a query sqlc compiled can travel in a delivery's
// commit round trip with its arguments as sqlc defines them.
type queueOnly struct{ b *pgx.Batch }

func (q queueOnly) Exec(_ context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	q.b.Queue(sql, args...)
	return pgconn.CommandTag{}, nil
}

func (queueOnly) Query(context.Context, string, ...any) (pgx.Rows, error) {
	return nil, errQueueOnly
}

func (queueOnly) QueryRow(context.Context, string, ...any) pgx.Row { return errRows{errQueueOnly} }

var errQueueOnly = errors.New("idem: a query that returns rows cannot be queued on a commit's batch")

// errOutboxInsert explains a failed INSERT into idem_outbox.
func errOutboxInsert(n int, err error) error {
	if hasSQLState(err, pgerrcode.UndefinedTable, pgerrcode.UndefinedColumn) {
		return fmt.Errorf("idem: write %d outgoing messages: the outbox table idem_outbox is missing or out of date (apply the migrations of github.com/idemgen/idemgen/migrations; idemgen writes them into the handler's migrations folder): %w", n, err)
	}
	return fmt.Errorf("idem: write %d outgoing messages to idem_outbox: %w", n, err)
}
