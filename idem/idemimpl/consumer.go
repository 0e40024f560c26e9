package idemimpl

import (
	"context"
	"fmt"

	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/internal/config"
	"github.com/idemgen/idemgen/idem/internal/link"
	"github.com/idemgen/idemgen/idem/internal/pgutil"
)

// consumerOf is what an inbox of every mode knows of its consumer: the name
// and key fields its errors and records carry, how a message's key is taken
// apart, and the observer of its deliveries. Each mode's inbox embeds one,
// so that every mode fails, classifies and observes a delivery the same way.
type consumerOf[M any] struct {
	name   string
	fields []string
	key    func(M) ([]any, error)
	ob     observer
	// external: the records carry the idempotency key (mode=external).
	external bool
	// wait is how long until a key in progress can be claimed again, at the
	// earliest, which fail gives its ErrInProgress (RetryAfter): the claim
	// wait in mode=tx. mode=external sets what is left of the lease where
	// it returns ErrInProgress; after ErrClaimLost the key may be claimed at
	// once.
	wait time.Duration
}

func newConsumerOf[M any](o config.Options, name string, fields []string, key func(M) ([]any, error)) consumerOf[M] {
	return consumerOf[M]{name: name, fields: fields, key: key, ob: newObserver(o, name)}
}

// fail is the *Error of a delivery of key (nil when the key could not be
// taken apart); serialization failures and deadlocks are retryable.
func (c *consumerOf[M]) fail(key []any, err error) error {
	return link.InProgress(newError(c.name, c.fields, key, err), c.wait)
}

// retryable is fail, marked retryable (errors.Is(err, ErrRetryable)).
func (c *consumerOf[M]) retryable(key []any, err error) error {
	return link.InProgress(newErrorOf(c.name, c.fields, key, err, true), c.wait)
}

// keyText is the key of msg as the log record shows it (keyTextOf), and for
// mode=external its idempotency key.
func (c *consumerOf[M]) keyText(msg M, err error) (key, idemKey string) {
	key = keyTextOf(c.fields, c.key, msg, err)
	if c.external && key != "" {
		if parts, kerr := c.key(msg); kerr == nil {
			idemKey = idem.ExternalKey(c.name, parts)
		}
	}
	return key, idemKey
}

// delivery is what the inbox of every mode embeds: its consumer, and the
// Handle and Deliver that validate a message's key, fingerprint it (unless
// the mode records nothing: noFingerprint), take the delivery's connection
// of connOf (for the modes that do nothing else before), run the mode's part
// of the delivery (part) and observe it, once per message, so that every
// mode refuses, counts, logs and recovers a delivery the same way. part gets
// the valid key, the fingerprint and the connection (nil without connOf),
// and sets *claimAttempt to the attempts of a mode=external claim.
type delivery[M, R any] struct {
	consumerOf[M]
	part          func(ctx context.Context, msg M, d deliveryOf, claimAttempt *int) (R, idem.Outcome, error)
	noFingerprint bool
	connOf        idem.DB
}

// deliveryOf is what Handle hands a mode's part of a delivery.
type deliveryOf struct {
	key  []any
	fp   []byte
	conn *pgx.Conn
}

// Handle delivers msg and returns what the handler returned (or, for a
// Duplicate, its stored result), the outcome and the error; what the
// consumer then does with the message is idem.ActionFor(err). Each delivery
// is counted (idem.deliveries, idem.handler.duration) and logged at its
// outcome's level (idem.WithMeterProvider, idem.WithLogger;
// docs/observability.md), a handler's panic as an error before it goes on
// up the stack. The type's doc says how its mode runs a delivery.
func (d *delivery[M, R]) Handle(ctx context.Context, msg M) (R, idem.Outcome, error) {
	return observe(ctx, &d.ob, msg, func(err error) (string, string) { return d.keyText(msg, err) },
		func(claimAttempt *int) (R, idem.Outcome, error) {
			var zero R
			key, fp, err := identify(msg, d.key, d.fields, !d.noFingerprint)
			if err != nil {
				return zero, 0, d.fail(key, err)
			}
			of := deliveryOf{key: key, fp: fp}
			if d.connOf != nil {
				pooled, err := acquire(ctx, d.connOf)
				if err != nil {
					return zero, 0, d.fail(key, err)
				}
				defer pooled.Release()
				of.conn = pooled.Conn()
			}
			return d.part(ctx, msg, of, claimAttempt)
		})
}

// acquire takes a connection of db for a delivery.
func acquire(ctx context.Context, db idem.DB) (*pgxpool.Conn, error) {
	c, err := db.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("idem: acquire a connection: %w", err)
	}
	return c, nil
}

// Deliver is Handle with the result dropped: it makes the inbox an
// [idem.Handler] of M, the form broker adapters take.
func (d *delivery[M, R]) Deliver(ctx context.Context, msg M) (idem.Outcome, error) {
	_, o, err := d.Handle(ctx, msg)
	return o, err
}

// purge runs a table's purge statement (sql with args: the retention and
// the batch size purgeBatch) until a run deletes less than a batch, so that
// no statement holds its locks for long, and returns how many rows it
// deleted; each run is counted in idem.purged under table and kind.
func purge[M any](ctx context.Context, db idem.DB, c *consumerOf[M], table, kind string, sql string, args []any) (int64, error) {
	var total int64
	for {
		tag, err := pgutil.Exec(ctx, db, sql, args...)
		c.ob.ins.Purged(ctx, table, kind, tag.RowsAffected())
		if err != nil {
			return total, c.fail(nil, fmt.Errorf("idem: purge %s: %w", table, err))
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < purgeBatch {
			return total, nil
		}
	}
}
