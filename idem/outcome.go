package idem

// Outcome says what Handle did with a message whose error is nil.
type Outcome uint8

const (
	// Processed: the handler ran and its transaction, with the inbox row,
	// committed; for a mode=external consumer, the handler ran and its key was
	// marked done with the result, under a claim that was still its own.
	Processed Outcome = iota + 1
	// Duplicate: the key was already processed; the stored result was returned
	// and the handler was not called.
	Duplicate
)

// String returns "processed", "duplicate", or "none" for the zero Outcome
// that accompanies an error.
func (o Outcome) String() string {
	switch o {
	case Processed:
		return "processed"
	case Duplicate:
		return "duplicate"
	default:
		return "none"
	}
}
