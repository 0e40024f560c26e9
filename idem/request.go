package idem

// Request is an HTTP request as package idemhttp hands it to a handler: the
// request's idempotency key, the client that sent it, and the decoded body.
// A handler keys on the client's key with key=Client,Key, so that two clients
// that pick the same key never share a result; key=Key alone suits an
// endpoint whose keys are unique across clients (a webhook sender's event
// id). A handler whose body carries its own id may key on Body.Field, or
// take the body type itself.
//
// Its payload fingerprint covers Key, Client and Body by the canonical
// encoding: Key and Client are the key's parts, the same for every copy of
// one request, and Body is what a reused key is told apart by. Body is
// fingerprinted as decoded, so the same content sent again with other white
// space, another field order or as a form instead of JSON is a replay.
//
// A Request is plain JSON ({"key", "client", "body"}), so that a broker can
// carry one too: a RabbitMQ consumer of the same handler decodes it whole,
// and a copy with the same key is a duplicate whichever way it came.
type Request[T any] struct {
	// Key is the request's idempotency key: the Idempotency-Key header, or
	// the header idemhttp.WithKeyHeader names, unquoted.
	Key string `json:"key"`
	// Client names the sender, from idemhttp.WithClient (an account id
	// behind the request's credentials); empty without it.
	Client string `json:"client"`
	// Body is the decoded request body.
	Body T `json:"body"`
}

// SetRequest sets Key and Client: an HTTP front door calls it after decoding
// the body into BodyTarget.
func (r *Request[T]) SetRequest(key, client string) { r.Key, r.Client = key, client }

// BodyTarget returns &r.Body, for an HTTP front door's decoder.
func (r *Request[T]) BodyTarget() any { return &r.Body }
