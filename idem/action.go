package idem

import (
	"errors"
	"strconv"
)

// Action is what a consumer does with a delivery once Handle returned: the
// ack policy, in one place, so that adapters and services do not each
// re-derive it from the errors. ActionFor computes it.
type Action uint8

const (
	// Ack: the message's effect is committed (Processed, Duplicate), or the
	// message is obsolete (ErrStale). Acknowledge it; it must not come back.
	Ack Action = iota + 1
	// Retry: the delivery failed in a way a later attempt may not (a
	// concurrent delivery of the key, a serialization failure, a lost
	// connection, an unknown commit, the handler's own error). Redeliver it,
	// after a delay: RabbitMQ requeue, JetStream NakWithDelay, Kafka seek back.
	// Dead-letter it only after the broker's own bound on attempts.
	Retry
	// DeadLetter: the message fails the same way on every delivery (a reused
	// key, an invalid key, a payload or result that cannot be encoded or
	// decoded). Move it aside (a dead-letter queue, JetStream Term) and
	// alert; retrying would only repeat the failure.
	DeadLetter
)

// String returns "ack", "retry" or "dead-letter".
func (a Action) String() string {
	switch a {
	case Ack:
		return "ack"
	case Retry:
		return "retry"
	case DeadLetter:
		return "dead-letter"
	default:
		return "Action(" + strconv.Itoa(int(a)) + ")"
	}
}

// ActionFor returns what the consumer does with a delivery whose Handle (or
// Deliver) returned err. It looks through wrapping (%w chains, *Error) with
// errors.Is:
//
//   - Ack: nil (Processed or Duplicate) and ErrStale.
//   - Retry: ErrInProgress, ErrRetryable (serialization failures and
//     deadlocks, SQLSTATE 40001 and 40P01) and ErrClaimLost (an external
//     handler's claim taken over or reset while it ran; the redelivery is a
//     Duplicate or claims the key again). So is every other error by
//     default: transient database errors (a lost connection, an
//     administrator's shutdown 57P01, too many connections 53300, a lock
//     timeout 55P03 of the handler's own), a cancelled context or a passed
//     deadline, a failed or lost COMMIT (the outcome is unknown; the
//     redelivery resolves it as a Duplicate or by processing the message),
//     a database error of a deploy not finished yet (a table not migrated),
//     and the handler's own error. A retry loses nothing.
//   - DeadLetter: ErrKeyReused, ErrInvalidKey, ErrOutsideWindow,
//     ErrUnencodable, ErrUndecodableResult and ErrUndecodablePayload,
//     wherever they are in
//     the chain: a handler that finds its message unusable for good returns
//     an error wrapping one of them (ErrUndecodablePayload for a body it
//     cannot read) to have it dead-lettered rather than retried.
//
// When an error wraps both a retryable and a dead-letter error, Retry wins:
// the retryable condition explains the failure, and a redelivery finds out.
func ActionFor(err error) Action {
	switch {
	case err == nil, errors.Is(err, ErrStale):
		return Ack
	case errors.Is(err, ErrInProgress), errors.Is(err, ErrRetryable), errors.Is(err, ErrClaimLost):
		return Retry
	case errors.Is(err, ErrKeyReused),
		errors.Is(err, ErrInvalidKey),
		errors.Is(err, ErrOutsideWindow),
		errors.Is(err, ErrUnencodable),
		errors.Is(err, ErrUndecodableResult),
		errors.Is(err, ErrUndecodablePayload):
		return DeadLetter
	default:
		return Retry
	}
}
