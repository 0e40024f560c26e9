package idemimpl

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/idem"
)

// NewSetInbox is [NewInbox] for a set-based handler, one that takes the
// whole batch: HandleBatch claims every key of a transaction's messages in
// one statement and calls handler once, on the claim's transaction, with the
// messages whose keys it freshly claimed, in input order (a key twice in the
// batch, a key processed before and an invalid key are answered without it).
// handler returns one result a message, in the order of msgs: any other
// length is an error naming the handler (table.Handler) and both lengths,
// and the transaction rolls back. The results and the inbox rows are stored
// in the round trip of the COMMIT.
//
// Handle is a batch of one: handler gets a slice of one message. When
// handler fails, the batch's transaction rolls back and each of its
// messages is delivered alone, as a batch of one, so that each gets its own
// outcome and the others commit.
//
// For generated code: the constructor of a generated wrapper whose handler
// takes msgs []M calls it.
func NewSetInbox[M, R any](db idem.DB, table Table[M], handler func(ctx context.Context, tx pgx.Tx, msgs []M) ([]R, error), opts ...idem.Option) *Inbox[M, R] {
	if handler == nil {
		panic(fmt.Sprintf("idemimpl.NewSetInbox (consumer %s): the handler is nil", table.Consumer))
	}
	in := newInbox[M, R]("idemimpl.NewSetInbox", db, table, opts)
	in.set = func(ctx context.Context, tx pgx.Tx, _ *idem.Outbox, msgs []M) ([]R, error) {
		return handler(ctx, tx, msgs)
	}
	return in
}

// NewPublishingSetInbox is [NewSetInbox] for a set-based handler that sends
// messages: it takes an *[idem.Outbox] right after tx, the Outbox of the
// run, and publishes what msgs[i] causes through out.For(i), so that each
// outgoing message gets the ids a handler of msgs[i] alone would give it
// (see [NewPublishingInbox]). The rows are written in the commit's round
// trip, one INSERT for the whole batch.
//
// For generated code: the constructor of a generated wrapper whose handler
// takes out *idem.Outbox and msgs []M calls it.
func NewPublishingSetInbox[M, R any](db idem.DB, table Table[M], handler func(ctx context.Context, tx pgx.Tx, out *idem.Outbox, msgs []M) ([]R, error), opts ...idem.Option) *Inbox[M, R] {
	if handler == nil {
		panic(fmt.Sprintf("idemimpl.NewPublishingSetInbox (consumer %s): the handler is nil", table.Consumer))
	}
	in := newInbox[M, R]("idemimpl.NewPublishingSetInbox", db, table, opts)
	in.set, in.publishing = handler, true
	return in
}

// NoResultSet adapts a set-based handler that returns only an error to
// [NewSetInbox]: its results are one idem.None a message.
//
// For generated code: the constructor of a generated wrapper calls it.
func NoResultSet[M any](handler func(ctx context.Context, tx pgx.Tx, msgs []M) error) func(context.Context, pgx.Tx, []M) ([]idem.None, error) {
	return func(ctx context.Context, tx pgx.Tx, msgs []M) ([]idem.None, error) {
		if err := handler(ctx, tx, msgs); err != nil {
			return nil, err
		}
		return make([]idem.None, len(msgs)), nil
	}
}

// NoResultPublishingSet adapts a publishing set-based handler that returns
// only an error to [NewPublishingSetInbox], as [NoResultSet] does for
// [NewSetInbox].
//
// For generated code: the constructor of a generated wrapper calls it.
func NoResultPublishingSet[M any](handler func(ctx context.Context, tx pgx.Tx, out *idem.Outbox, msgs []M) error) func(context.Context, pgx.Tx, *idem.Outbox, []M) ([]idem.None, error) {
	return func(ctx context.Context, tx pgx.Tx, out *idem.Outbox, msgs []M) ([]idem.None, error) {
		if err := handler(ctx, tx, out, msgs); err != nil {
			return nil, err
		}
		return make([]idem.None, len(msgs)), nil
	}
}
