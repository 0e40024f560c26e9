package link

// Attempt returns the broker's delivery attempt of msg when msg is an
// idem.Message[T], for the log record of its delivery.
var Attempt func(msg any) (attempt int, ok bool)
