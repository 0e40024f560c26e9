package link

// Message is one message an *idem.Outbox buffered, encoded.
type Message struct {
	Destination string
	OrderingKey string
	Headers     string // a JSON object
	Payload     []byte
}

// Buffer is what an *idem.Outbox holds: the messages of one run of the
// handler, and whether the run is over (Publish refuses more).
type Buffer struct {
	Msgs   []Message
	Closed bool
}

// OutboxBuffer returns the Buffer of out, an *idem.Outbox.
var OutboxBuffer func(out any) *Buffer

// NewSetOutbox returns the *idem.Outbox of a set-based handler's run of n
// messages and the *idem.Outbox of each (what the run's For(i) returns).
var NewSetOutbox func(n int) (set any, each []any)
