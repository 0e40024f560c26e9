package idem

import (
	"errors"
	"strings"
	"time"
)

// The errors a caller branches on. Handle wraps them in an *Error that names the
// consumer and the key; test them with errors.Is, and let ActionFor say
// what the consumer does with each.
var (
	// ErrInProgress: another delivery of the same key holds the claim and did
	// not finish within the claim wait. Retry the message later (nack with a
	// delay); never run it in parallel.
	ErrInProgress = errors.New("idem: another delivery of this key is in progress")

	// ErrKeyReused: the key was processed before for a message with a different
	// payload (its fingerprint differs). The producer reused a key or the data
	// changed; dead-letter the message or alert, never drop it silently.
	ErrKeyReused = errors.New("idem: key already used by a message with a different payload")

	// ErrInvalidKey: a key part is empty, missing or malformed. Nothing was
	// written; the message can never succeed as it is, so dead-letter it.
	ErrInvalidKey = errors.New("idem: invalid key")

	// ErrOutsideWindow: the consumer's inbox is partitioned by the message's
	// own time (partition= and time=), and this message's time is outside
	// the window the inbox keeps: older than its retention, whose
	// partitions the janitor drops (so a copy processed before could not be
	// recognised, duplicate or not), or in a bucket that has no partition
	// (later than the janitor creates ahead, or never created because no
	// janitor runs). The handler did not run and nothing was written;
	// dead-letter the message (ActionFor says DeadLetter): only an operator
	// can tell whether it was processed before.
	ErrOutsideWindow = errors.New("idem: the message's time is outside the window the partitioned inbox keeps")

	// ErrStale: the handler has a stale-message guard and a version of the
	// message's entity as new or newer was applied already. The handler did
	// not run and nothing was written; the message is obsolete, so ack it
	// rather than retry it (ActionFor says Ack).
	ErrStale = errors.New("idem: a newer version of the entity was processed already")

	// ErrUndecodableResult: the key was processed, but its stored result no
	// longer decodes into the handler's result type (a field changed type
	// across a deploy, say int64 to string). The message's effect is
	// committed; what failed is replaying its result, and it fails the same
	// way on every redelivery, so dead-letter it rather than retry it. The
	// wrapped error is encoding/json's.
	ErrUndecodableResult = errors.New("idem: the stored result of the processed key does not decode into the handler's result type")

	// ErrUnencodable: the message or the handler's result cannot be encoded
	// (NaN or ±Inf in a float, a cycle, a channel, a MarshalJSON that fails).
	// It fails the same way on every delivery: dead-letter it. Nothing was
	// committed. The wrapped error is encoding/json's (or, for the message's
	// fingerprint, of the same types).
	ErrUnencodable = errors.New("idem: cannot be encoded")

	// ErrUndecodablePayload marks a delivery whose body does not decode
	// into the handler's message type (malformed JSON, a field of another
	// type): it fails the same way on every delivery, so dead-letter it.
	// Handle never returns it, since it receives a decoded message; a broker
	// adapter wraps its decoder's error in it,
	//
	//	fmt.Errorf("%w: %w", idem.ErrUndecodablePayload, err)
	//
	// and a handler may return it for a part of the message it cannot read
	// (an embedded document), so that ActionFor says DeadLetter rather than
	// Retry.
	ErrUndecodablePayload = errors.New("idem: the message's payload does not decode")

	// ErrRetryable marks errors that a later attempt may not have: a
	// serialization failure or deadlock (SQLSTATE 40001, 40P01), or a claim
	// that conflicted with a row that was gone when read back. Nothing was
	// committed; redeliver.
	ErrRetryable = errors.New("idem: retryable")

	// ErrClaimLost: the claim of an external handler's key was taken over by
	// another worker (its lease had run out) or reset by the sweeper while the
	// handler ran, or the heartbeats could not renew it before its lease ran
	// out. The handler's context is cancelled with it as its cause
	// (context.Cause), and a result the handler still returned was discarded:
	// the row holds the other worker's outcome, never a second done. ActionFor
	// says Retry: the redelivery finds the key done (a Duplicate) or claims it
	// again, and the provider, given the same idempotency key, applies the call
	// once.
	ErrClaimLost = errors.New("idem: the claim of the key was lost")

	// ErrNotMigrated: the database does not hold a table, key column or
	// unique constraint of a consumer as its migrations leave it. A
	// migration was not applied, or something was changed by hand. A
	// generated wrapper's Check returns it, naming what differs and the
	// migration to apply. The broker adapters call Check when they start
	// and stop with it. Callers of a wrapper (an HTTP handler, a job) call
	// Check at start-up.
	ErrNotMigrated = errors.New("idem: the database lacks what the consumer's migrations create")
)

// Error is the error Handle returns: what went wrong, for which consumer and
// key. Err is one of the sentinel errors above or the handler's own error,
// wrapped; errors.Is and errors.As see through Error.
type Error struct {
	Consumer string
	// Key renders the key parts as Field=value pairs; it is empty when the key
	// itself could not be extracted.
	Key string
	Err error

	retryable bool
	// retryAfter is how long until the key can be claimed again, set with
	// hasRetryAfter where ErrInProgress or ErrClaimLost is returned.
	retryAfter    time.Duration
	hasRetryAfter bool
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Err.Error())
	b.WriteString(" (consumer ")
	b.WriteString(e.Consumer)
	if e.Key != "" {
		b.WriteString(", key ")
		b.WriteString(e.Key)
	}
	b.WriteString(")")
	return b.String()
}

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether e is retryable when target is ErrRetryable.
func (e *Error) Is(target error) bool { return target == ErrRetryable && e.retryable }

// MaxKeyBytes bounds the total size of a key's string parts. PostgreSQL cannot
// index a B-tree entry much larger than 2.7 kB; a longer key is rejected with
// ErrInvalidKey before anything is written, instead of failing in the index.
const MaxKeyBytes = 2048

// RetryAfter reports, for an error wrapping ErrInProgress or ErrClaimLost,
// how long until the key can be claimed again: what is left of the running
// claim's lease in mode=external (0 after ErrClaimLost, or what is left of
// the new holder's lease when it is known), the claim wait in mode=tx, in
// batches and in the entity and natural modes. ok is false for any other
// error. A broker adapter retries such a delivery no earlier than that and
// does not count it as an attempt (docs/errors.md).
func RetryAfter(err error) (d time.Duration, ok bool) {
	var e *Error
	if !errors.As(err, &e) || !e.hasRetryAfter {
		return 0, false
	}
	return e.retryAfter, true
}

// inProgress marks err, an *Error, with how long until its key can be
// claimed again when it wraps ErrInProgress or ErrClaimLost; see RetryAfter.
func inProgress(err error, after time.Duration) error {
	var e *Error
	if errors.As(err, &e) && (errors.Is(e.Err, ErrInProgress) || errors.Is(e.Err, ErrClaimLost)) {
		e.retryAfter, e.hasRetryAfter = max(after, 0), true
	}
	return err
}
