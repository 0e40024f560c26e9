package idemhttp

import (
	"fmt"
	"net/http"
	"net/textproto"
	"strings"
)

// DefaultMaxBodySize is the largest request body Handler reads by default, 1
// MiB; a larger one gets 413. WithMaxBodySize sets another.
const DefaultMaxBodySize = 1 << 20

// The header fields Handler reads and writes.
const (
	// HeaderKey is the request header that carries the idempotency key of
	// an idem.Request, as a structured-field string ("k-1") or bare (k-1).
	HeaderKey = "Idempotency-Key"
	// HeaderReplayed is set to "true" on a response replayed from the
	// stored result of an earlier request with the same key.
	HeaderReplayed = "Idempotent-Replayed"
)

// An Option configures Handler.
type Option struct{ apply func(*options) }

// options are Handler's settings.
type options struct {
	keyHeader   string
	client      func(*http.Request) string
	status      int
	errorStatus func(error) (int, bool)
	writeError  func(http.ResponseWriter, *http.Request, Problem)
	maxBody     int64
	decoders    []Decoder
}

func newOptions(opts []Option) options {
	o := options{keyHeader: HeaderKey, status: http.StatusOK, maxBody: DefaultMaxBodySize, writeError: WriteProblem}
	for _, opt := range opts {
		opt.apply(&o)
	}
	return o
}

// A Decoder decodes the body of r into v, a pointer to the handler's
// message type (or to an idem.Request's Body). It reads r.Body, which
// Handler limits to WithMaxBodySize bytes (reading past the limit fails
// with an *http.MaxBytesError, and Handler answers 413). A decoder that
// does not take r's content type returns an error wrapping
// ErrUnsupportedMediaType, and the next decoder is tried; any other error
// is a malformed body (400).
type Decoder func(r *http.Request, v any) error

// WithKeyHeader names the request header that carries an idem.Request's
// Key (default Idempotency-Key): WithKeyHeader("webhook-id") for senders
// that follow Standard Webhooks. It panics on a name that is not a valid
// header field name.
func WithKeyHeader(name string) Option {
	if !validHeaderName(name) {
		panic(fmt.Sprintf("idemhttp: WithKeyHeader(%q): not a valid header field name", name))
	}
	return Option{func(o *options) { o.keyHeader = textproto.CanonicalMIMEHeaderKey(name) }}
}

// WithClient sets how an idem.Request's Client is told from the request:
// the account behind its credentials, say. A handler keyed on Client and
// Key (key=Client,Key) then keeps each client's keys apart, as the
// idempotency-key draft asks. A request for which client returns "" gets
// 400 and reaches no handler; authenticate before Handler to answer 401.
func WithClient(client func(r *http.Request) string) Option {
	return Option{func(o *options) { o.client = client }}
}

// WithStatus sets the status of a processed request's response and of its
// replays (default 200 OK), such as http.StatusCreated. A handler without a
// result is answered 204 No Content whatever the status. It panics on a
// status outside 200 to 299.
func WithStatus(status int) Option {
	if status < 200 || status > 299 {
		panic(fmt.Sprintf("idemhttp: WithStatus(%d): want a 2xx status", status))
	}
	return Option{func(o *options) { o.status = status }}
}

// WithErrorStatus chooses the status of a failed request (default 500) from
// the error that Handle returned: the handler's own error, wrapped in an
// *idem.Error (errors.Is and errors.As see through it), or a database
// error. status returns false to keep 500, and a status outside 400 to 599
// is taken as 500. It is not asked about the errors whose status the
// protocol fixes: a missing or invalid key (400), a key in progress (409),
// a reused key (422), a stale or out-of-window message (409, 422).
//
// Nothing is stored for a failed request, whatever its status: the retry
// with the same key runs the handler again.
func WithErrorStatus(status func(err error) (int, bool)) Option {
	return Option{func(o *options) { o.errorStatus = status }}
}

// WithErrorWriter replaces how error responses are written (default
// WriteProblem, an application/problem+json body): write must set the
// Content-Type, then call w.WriteHeader(p.Status) and write the body.
// Handler has set Retry-After (409) and Allow (405) before it is called.
// A Stripe-style body ({"error": {"type": ..., "message": ...}}) makes
// stripe-go give up on a 4xx instead of retrying it.
func WithErrorWriter(write func(w http.ResponseWriter, r *http.Request, p Problem)) Option {
	return Option{func(o *options) { o.writeError = write }}
}

// WithMaxBodySize sets the largest request body Handler reads, in bytes
// (default DefaultMaxBodySize): a body of exactly n bytes is read, a longer
// one gets 413. It panics on n < 1.
func WithMaxBodySize(n int64) Option {
	if n < 1 {
		panic(fmt.Sprintf("idemhttp: WithMaxBodySize(%d): want at least 1", n))
	}
	return Option{func(o *options) { o.maxBody = n }}
}

// WithDecoder adds a decoder of request bodies, tried before the JSON one
// in the order given: a form decoder for clients that send
// application/x-www-form-urlencoded, or one that verifies a webhook's
// signature before it decodes. A request whose content type no decoder
// takes gets 415.
func WithDecoder(d Decoder) Option {
	if d == nil {
		panic("idemhttp: WithDecoder(nil)")
	}
	return Option{func(o *options) { o.decoders = append(o.decoders, d) }}
}

// validHeaderName reports whether name is an RFC 9110 token.
func validHeaderName(name string) bool {
	if name == "" {
		return false
	}
	for _, c := range name {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("!#$%&'*+-.^_`|~", c)
		if !ok {
			return false
		}
	}
	return true
}
