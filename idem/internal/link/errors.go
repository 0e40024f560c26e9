package link

import "time"

// NewError returns the *idem.Error of a delivery of consumer: key is the key
// as the error shows it ("" when it could not be taken apart), err what
// failed; retryable marks it errors.Is(err, idem.ErrRetryable).
var NewError func(consumer, key string, err error, retryable bool) error

// InProgress marks err, an *idem.Error that wraps idem.ErrInProgress or
// idem.ErrClaimLost, with how long until its key can be claimed again, for
// idem.RetryAfter; it returns err.
var InProgress func(err error, after time.Duration) error
