package idem

// Message is a delivery as a broker adapter hands it to a handler: the
// broker's message id, the decoded body, which delivery of the message this
// is, and the message's headers. A handler keys on the broker's id with
// key=ID, on a field of the body with key=Body.Field.
//
// Its payload fingerprint covers ID and Body only: Attempt and Headers
// (tagged json:"-", which the canonical encoding follows) differ between
// deliveries of one message and would make every redelivery ErrKeyReused.
// Body is fingerprinted by the canonical encoding like any message; an
// IdemFingerprint method of the body type is not consulted inside a Message,
// whose envelope is where the per-delivery fields belong. A Body that cannot
// be encoded (a NaN) fails with ErrUnencodable, as a bare message does.
//
// The broker's per-delivery tag, an offset or a receive time are never part of
// a Message: they are not keys, and a key must not change between deliveries.
type Message[T any] struct {
	// ID is the broker's message id: AMQP message_id, JetStream Nats-Msg-Id,
	// a Kafka header. The relay sends the outbox's stable id as this id.
	ID string `json:"id"`
	// Body is the decoded payload.
	Body T `json:"body"`
	// Attempt is 1 on the first delivery and counts retries and
	// redeliveries as far as the broker reports them.
	Attempt int `json:"-"`
	// Headers are the message's headers whose values are text or numbers,
	// as text.
	Headers map[string]string `json:"-"`
}

// SetDelivery sets ID, Attempt and Headers: a broker adapter calls it after
// decoding the body into BodyTarget.
func (m *Message[T]) SetDelivery(id string, attempt int, headers map[string]string) {
	m.ID, m.Attempt, m.Headers = id, attempt, headers
}

// BodyTarget returns &m.Body, for a broker adapter's decoder.
func (m *Message[T]) BodyTarget() any { return &m.Body }

// attempter is implemented by Message[T]: the broker's delivery attempt, for
// the log record of a delivery (link.Attempt).
type attempter interface{ deliveryAttempt() int }

func (m Message[T]) deliveryAttempt() int { return m.Attempt }
