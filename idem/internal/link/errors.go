package link

// NewError returns the *idem.Error of a delivery of consumer: key is the key
// as the error shows it ("" when it could not be taken apart), err what
// failed; retryable marks it errors.Is(err, idem.ErrRetryable).
var NewError func(consumer, key string, err error, retryable bool) error
