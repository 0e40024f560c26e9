package idemimpl

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemgen/idemgen/generated/outboxdb"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/internal/link"
	"github.com/idemgen/idemgen/idem/internal/msgid"
	"github.com/idemgen/idemgen/idem/internal/pgutil"
)

// NewPublishingInbox is [NewInbox] for a handler that sends messages: it
// takes an *[idem.Outbox] right after tx. What the handler publishes is written to
// idem_outbox in the round trip that commits the delivery (with the result
// and the check of the claim), as one multi-row INSERT: a run that publishes
// nothing, or 1, or 10 messages costs the same round trips. Once the commit
// is acknowledged, a NOTIFY on [idem.OutboxChannel] wakes the relays unless
// [WithoutNotify] is given: sent on its own, and shared by the commits of
// the DB within a few milliseconds (see notify.go). A duplicate
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
func NewPublishingInbox[M, R any](db idem.DB, table Table[M], handler func(ctx context.Context, tx pgx.Tx, out *idem.Outbox, msg M) (R, error), opts ...idem.Option) *Inbox[M, R] {
	if handler == nil {
		panic(fmt.Sprintf("idemimpl.NewPublishingInbox (consumer %s): the handler is nil", table.Consumer))
	}
	in := newInbox[M, R]("idemimpl.NewPublishingInbox", db, table, opts)
	in.each, in.publishing = handler, true
	return in
}

// NoResultPublishing adapts a publishing handler that returns only an error to
// [NewPublishingInbox], as [NoResult] does for [NewInbox].
//
// For generated code: the constructor of a generated wrapper calls it.
func NoResultPublishing[M any](handler func(ctx context.Context, tx pgx.Tx, out *idem.Outbox, msg M) error) func(context.Context, pgx.Tx, *idem.Outbox, M) (idem.None, error) {
	return func(ctx context.Context, tx pgx.Tx, out *idem.Outbox, msg M) (idem.None, error) {
		return idem.None{}, handler(ctx, tx, out, msg)
	}
}

// queueOutbox queues on b the INSERT of the outgoing messages of deliveries
// (sql/outbox.sql's InsertOutbox, compiled by sqlc): outs[k] are the
// messages the delivery of keys[k] published, each with its stable id. It
// queues nothing and returns 0 when there is none; else it returns how many
// rows the INSERT writes.
func queueOutbox(b *pgx.Batch, consumer string, fields []string, keys [][]any, outs [][]link.Message) int {
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
		name, key := msgid.Name(consumer, keys[k]), pgutil.FormatKey(fields, keys[k])
		for seq, m := range msgs {
			p.Keys = append(p.Keys, key)
			p.MessageIds = append(p.MessageIds, msgid.ID(name, seq).String())
			p.Destinations = append(p.Destinations, m.Destination)
			p.OrderingKeys = append(p.OrderingKeys, m.OrderingKey)
			p.Headers = append(p.Headers, m.Headers)
			p.Payloads = append(p.Payloads, m.Payload)
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

func (queueOnly) QueryRow(context.Context, string, ...any) pgx.Row { return pgutil.Fail(errQueueOnly) }

var errQueueOnly = errors.New("idem: a query that returns rows cannot be queued on a commit's batch")

// errOutboxInsert explains a failed INSERT into idem_outbox.
func errOutboxInsert(n int, err error) error {
	if pgutil.HasSQLState(err, pgerrcode.UndefinedTable, pgerrcode.UndefinedColumn) {
		return fmt.Errorf("idem: write %d outgoing messages: the outbox table idem_outbox is missing or out of date (apply the migrations of github.com/idemgen/idemgen/migrations; idemgen writes them into the handler's migrations folder): %w", n, err)
	}
	return fmt.Errorf("idem: write %d outgoing messages to idem_outbox: %w", n, err)
}
