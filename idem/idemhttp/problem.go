package idemhttp

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// Problem is an error response: an RFC 9457 problem details object. Its
// Type is one of the Problem constants, the same for every response of one
// case, so that a client can branch on it; Detail says what was wrong with
// the request and never how the server failed.
type Problem struct {
	// Type identifies the case: ProblemMissingKey, ProblemInProgress, ...
	Type string `json:"type"`
	// Title is the case's short, fixed summary.
	Title string `json:"title"`
	// Status is the response's status code.
	Status int `json:"status"`
	// Detail explains this occurrence to the client; empty for none.
	Detail string `json:"detail,omitempty"`
	// Err is the error behind the problem, for an error writer that logs
	// it or tells errors apart: Handle's error, or the decoder's. nil for
	// problems of the request's form (405, a missing key). WriteProblem
	// never writes it.
	Err error `json:"-"`
}

// ProblemBase is where the problem types are documented; each Problem
// constant is ProblemBase followed by the case's name.
const ProblemBase = "https://github.com/idemgen/idemgen/blob/main/docs/http.md#"

// The problem types, one per case.
const (
	// ProblemMissingKey (400): the request has no idempotency key header,
	// or an empty one.
	ProblemMissingKey = ProblemBase + "missing-key"
	// ProblemInvalidKey (400): the key header is malformed (a quoted string
	// left open, two header lines), or the key is invalid: longer than
	// idem.MaxKeyBytes, or a key part of the body is missing.
	ProblemInvalidKey = ProblemBase + "invalid-key"
	// ProblemMissingClient (400): WithClient found no client for the
	// request.
	ProblemMissingClient = ProblemBase + "missing-client"
	// ProblemMethodNotAllowed (405): a method other than POST, PUT or
	// PATCH.
	ProblemMethodNotAllowed = ProblemBase + "method-not-allowed"
	// ProblemBodyTooLarge (413): the body is longer than WithMaxBodySize.
	ProblemBodyTooLarge = ProblemBase + "body-too-large"
	// ProblemUnsupportedMediaType (415): no decoder takes the request's
	// content type.
	ProblemUnsupportedMediaType = ProblemBase + "unsupported-media-type"
	// ProblemMalformedBody (400): a decoder took the content type but could
	// not decode the body.
	ProblemMalformedBody = ProblemBase + "malformed-body"
	// ProblemInProgress (409): a request with the same key is being
	// processed; retry after Retry-After seconds.
	ProblemInProgress = ProblemBase + "in-progress"
	// ProblemKeyReused (422): the key was used before for a request with
	// another body.
	ProblemKeyReused = ProblemBase + "key-reused"
	// ProblemStale (409): the handler's stale-message guard has applied a
	// newer version of the entity already.
	ProblemStale = ProblemBase + "stale"
	// ProblemOutsideWindow (422): the message's own time is outside the
	// window its partitioned inbox keeps.
	ProblemOutsideWindow = ProblemBase + "outside-window"
	// ProblemFailed (500, or WithErrorStatus's status): the handler or the
	// database failed and nothing was stored; retry with the same key.
	ProblemFailed = ProblemBase + "failed"
)

// titles are the fixed titles of the problem types.
var titles = map[string]string{
	ProblemMissingKey:           "Missing idempotency key",
	ProblemInvalidKey:           "Invalid idempotency key",
	ProblemMissingClient:        "Unknown client",
	ProblemMethodNotAllowed:     "Method not allowed",
	ProblemBodyTooLarge:         "Request body too large",
	ProblemUnsupportedMediaType: "Unsupported media type",
	ProblemMalformedBody:        "Malformed request body",
	ProblemInProgress:           "A request with this key is in progress",
	ProblemKeyReused:            "Idempotency key reused with another request body",
	ProblemStale:                "A newer version was applied already",
	ProblemOutsideWindow:        "Outside the kept window",
	ProblemFailed:               "The request failed",
}

// newProblem is the Problem of type typ with its title.
func newProblem(typ string, status int, detail string, err error) Problem {
	return Problem{Type: typ, Title: titles[typ], Status: status, Detail: detail, Err: err}
}

// WriteProblem writes p as an application/problem+json body with status
// p.Status: the default of WithErrorWriter.
func WriteProblem(w http.ResponseWriter, _ *http.Request, p Problem) {
	body, err := json.Marshal(p)
	if err != nil {
		// A Problem holds strings and an int: it always encodes.
		panic(err)
	}
	body = append(body, '\n')
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(p.Status)
	_, _ = w.Write(body)
}
