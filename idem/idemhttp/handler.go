package idemhttp

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"reflect"
	"strconv"

	"github.com/idemgen/idemgen/idem"
)

// request is implemented by *idem.Request[T]: Handler decodes the body into
// BodyTarget and sets the key and the client.
type request interface {
	SetRequest(key, client string)
	BodyTarget() any
}

var _ request = (*idem.Request[struct{}])(nil)

// allowed is the Allow header of a 405: the methods Handler serves.
const allowed = "POST, PUT, PATCH"

// Handler returns an http.Handler that serves h, a generated wrapper (with
// or without a result) or any idem.Handler, over HTTP with the guarantee h
// gives a broker: each request's effect at most once per key, and the same
// answer for every copy of it.
//
// For each POST, PUT or PATCH request it decodes the body into the
// handler's message type M (JSON unless a WithDecoder decoder takes the
// content type). When M is an idem.Request[T] (or a pointer to one) the
// body fills its Body, Key is the idempotency key header and Client comes
// from WithClient; any other M is decoded whole, keyed on its own fields,
// and needs no key header. Then it calls h's Handle and answers:
//
//   - processed: WithStatus's status (200 OK by default) with the result as
//     JSON; 204 No Content for a handler without a result;
//   - duplicate: the same status and body, from the stored result, with
//     Idempotent-Replayed: true;
//   - 400 for a missing or invalid key or client, or a body a decoder could
//     not decode; 405 for another method (with Allow); 413 for a body
//     longer than WithMaxBodySize; 415 for a content type no decoder takes;
//   - 409 with Retry-After while another request with the key is in
//     progress (idem.ErrInProgress, idem.ErrClaimLost), and 409 for
//     idem.ErrStale;
//   - 422 for a key reused with another body (idem.ErrKeyReused), or a
//     message outside a partitioned inbox's window;
//   - 500 for any other error (WithErrorStatus chooses another): nothing is
//     stored, and a retry with the same key runs the handler again.
//
// Error responses are application/problem+json (RFC 9457) with a Problem
// type per case and no internal detail (WithErrorWriter writes another
// shape). None of the 4xx answers before Handle runs writes anything.
//
// The handler runs with the request's context: a client that disconnects
// cancels it, and the delivery rolls back unless its COMMIT is on its way.
// Either way the client's retry with the same key finds the effect once.
//
// Handler panics on WithKeyHeader or WithClient when M is not an
// idem.Request, whose Key and Client they fill.
func Handler[M any](h idem.Handler[M], opts ...Option) http.Handler {
	o := newOptions(opts)
	s := &server[M]{opts: o, handle: handleOf(h), isRequest: isRequest[M]()}
	s.decoders = append(append(s.decoders, o.decoders...), DecodeJSON)
	if !s.isRequest {
		var m M
		switch {
		case o.client != nil:
			panic(fmt.Sprintf("idemhttp: WithClient given for a handler of %T: the client is the Client of an idem.Request[T]", m))
		case o.keyHeader != HeaderKey:
			panic(fmt.Sprintf("idemhttp: WithKeyHeader given for a handler of %T: the header fills the Key of an idem.Request[T]", m))
		}
	}
	return s
}

// server is what Handler returns.
type server[M any] struct {
	opts      options
	handle    handleFunc[M]
	decoders  []Decoder
	isRequest bool
}

// isRequest reports whether M is an idem.Request[T] or a pointer to one.
func isRequest[M any]() bool {
	_, ok := newMessage[M]().target.(request)
	return ok
}

// message is a new value of a message type, with where to decode into.
type message[M any] struct {
	msg    *M
	target any // msg, or what it points to when M is a pointer type
}

// newMessage returns a new M to decode into; a pointer M points to a new
// value, so that an idem.Request behind the pointer is one too.
func newMessage[M any]() message[M] {
	msg := new(M)
	target := any(msg)
	if v := reflect.ValueOf(msg).Elem(); v.Kind() == reflect.Pointer {
		v.Set(reflect.New(v.Type().Elem()))
		target = v.Interface()
	}
	return message[M]{msg: msg, target: target}
}

func (s *server[M]) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodPost, http.MethodPut, http.MethodPatch:
	default:
		w.Header().Set("Allow", allowed)
		s.fail(w, r, newProblem(ProblemMethodNotAllowed, http.StatusMethodNotAllowed,
			"This endpoint takes POST, PUT and PATCH requests.", nil))
		return
	}
	m := newMessage[M]()
	var key, client string
	if s.isRequest {
		var p Problem
		var ok bool
		if key, client, p, ok = s.requestKey(r); !ok {
			s.fail(w, r, p)
			return
		}
	}
	if r.ContentLength > s.opts.maxBody {
		s.fail(w, r, newProblem(ProblemBodyTooLarge, http.StatusRequestEntityTooLarge,
			fmt.Sprintf("The body is longer than the %d bytes this endpoint reads.", s.opts.maxBody), nil))
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, s.opts.maxBody)
	target := m.target
	req, _ := target.(request)
	if s.isRequest {
		target = req.BodyTarget()
	}
	if p, ok := decode(r, s.decoders, target, s.opts.maxBody); !ok {
		s.fail(w, r, p)
		return
	}
	if s.isRequest {
		req.SetRequest(key, client)
	}

	result, hasResult, outcome, err := s.handle(r.Context(), *m.msg)
	if err != nil {
		s.fail(w, r, s.problemOf(err))
		return
	}
	if outcome == idem.Duplicate {
		w.Header().Set(HeaderReplayed, "true")
	}
	if !hasResult {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	body, err := json.Marshal(result)
	if err != nil {
		s.fail(w, r, newProblem(ProblemFailed, http.StatusInternalServerError, "", fmt.Errorf("idemhttp: encode the result: %w", err)))
		return
	}
	body = append(body, '\n')
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(s.opts.status)
	_, _ = w.Write(body)
}

// requestKey returns the key and the client of an idem.Request, or the
// problem of a request without them.
func (s *server[M]) requestKey(r *http.Request) (key, client string, p Problem, ok bool) {
	key, err := parseKey(r.Header.Values(s.opts.keyHeader))
	switch {
	case errors.Is(err, errNoKey):
		return "", "", newProblem(ProblemMissingKey, http.StatusBadRequest,
			fmt.Sprintf("The request has no %s header; send a unique key with the request and with each of its retries.", s.opts.keyHeader), nil), false
	case err != nil:
		return "", "", newProblem(ProblemInvalidKey, http.StatusBadRequest,
			fmt.Sprintf("The %s header is invalid: %v.", s.opts.keyHeader, err), nil), false
	}
	if s.opts.client != nil {
		if client = s.opts.client(r); client == "" {
			return "", "", newProblem(ProblemMissingClient, http.StatusBadRequest, "The request's client is not known.", nil), false
		}
	}
	return key, client, Problem{}, true
}

// problemOf is the Problem of an error Handle returned.
func (s *server[M]) problemOf(err error) Problem {
	switch {
	case errors.Is(err, idem.ErrInvalidKey):
		return newProblem(ProblemInvalidKey, http.StatusBadRequest, "The request's idempotency key is invalid: empty, too long, or missing from the body.", err)
	case errors.Is(err, idem.ErrInProgress), errors.Is(err, idem.ErrClaimLost):
		return newProblem(ProblemInProgress, http.StatusConflict, "Another request with this key is being processed; retry after Retry-After seconds.", err)
	case errors.Is(err, idem.ErrKeyReused):
		return newProblem(ProblemKeyReused, http.StatusUnprocessableEntity, "This key was used before for a request with another body; use a new key for a new request.", err)
	case errors.Is(err, idem.ErrStale):
		return newProblem(ProblemStale, http.StatusConflict, "A newer version of this entity was applied already.", err)
	case errors.Is(err, idem.ErrOutsideWindow):
		return newProblem(ProblemOutsideWindow, http.StatusUnprocessableEntity, "The message's time is outside the window this endpoint keeps.", err)
	}
	status := http.StatusInternalServerError
	if s.opts.errorStatus != nil {
		if st, ok := s.opts.errorStatus(err); ok && st >= 400 && st <= 599 {
			status = st
		}
	}
	return newProblem(ProblemFailed, status, "Retry the request with the same idempotency key: a completed request is replayed, an incomplete one runs again.", err)
}

// fail answers r with p through the error writer, with Retry-After for a
// key in progress.
func (s *server[M]) fail(w http.ResponseWriter, r *http.Request, p Problem) {
	if p.Type == ProblemInProgress {
		w.Header().Set("Retry-After", retryAfter(p.Err))
	}
	s.opts.writeError(w, r, p)
}

// retryAfter is the Retry-After value of a key in progress: the seconds
// until the key can be claimed again (idem.RetryAfter), rounded up, at
// least 1.
func retryAfter(err error) string {
	d, _ := idem.RetryAfter(err)
	return strconv.Itoa(max(1, int(math.Ceil(d.Seconds()))))
}
