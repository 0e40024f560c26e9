package idemhttp_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemhttp"
	"github.com/idemgen/idemgen/idem/idemtest"
)

// clientOf is the tests' WithClient: the bearer token names the client.
func clientOf(r *http.Request) string {
	return strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
}

// refundServer serves the refund wrapper at its URL, with the client from
// the bearer token.
func refundServer(t *testing.T, f *fixture, opts ...idemhttp.Option) string {
	return serve(t, idemhttp.Handler(f.refund, append([]idemhttp.Option{idemhttp.WithClient(clientOf)}, opts...)...))
}

const jsonType = "application/json"

// problemOf decodes a problem+json body, failing the test for another
// content type.
func problemOf(t testing.TB, r response) idemhttp.Problem {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("response %v: Content-Type %q; want application/problem+json", r, ct)
	}
	var p idemhttp.Problem
	if err := json.Unmarshal([]byte(r.body), &p); err != nil {
		t.Fatalf("response %v: %v", r, err)
	}
	if p.Status != r.status || p.Title == "" {
		t.Fatalf("response %v: problem %+v; want its status and a title", r, p)
	}
	return p
}

// TestProcessedThenReplayed: the first request is processed (200 with the
// result as JSON), and its copies get the same status and body with
// Idempotent-Replayed: true, also when the key is quoted and the body
// reformatted, reordered or carrying a field the handler does not know.
func TestProcessedThenReplayed(t *testing.T) {
	f := newFixture(t)
	url := refundServer(t, f)
	first := send(t, "POST", url, `{"charge":"ch_1","amount":500}`, "Content-Type", jsonType, "Idempotency-Key", "k-1", "Authorization", "Bearer acct_1")
	if first.status != 200 || first.replayed() || first.header.Get("Content-Type") != jsonType {
		t.Fatalf("first request: %v (replayed %v); want 200 application/json, not replayed", first, first.replayed())
	}
	var r refund
	if err := json.Unmarshal([]byte(first.body), &r); err != nil || r.ID == 0 || r.Charge != "ch_1" || r.Amount != 500 {
		t.Fatalf("first request's body %q: %+v, %v; want the refund", first.body, r, err)
	}
	for _, c := range []struct{ what, key, body string }{
		{"the same request", "k-1", `{"charge":"ch_1","amount":500}`},
		{"a quoted key, another layout", `"k-1"`, "{\n  \"amount\": 500,\n  \"charge\": \"ch_1\"\n}"},
		{"an unknown field", "k-1", `{"charge":"ch_1","amount":500,"metadata":{"order":"o-9"}}`},
	} {
		again := send(t, "POST", url, c.body, "Content-Type", "application/json; charset=utf-8", "Idempotency-Key", c.key, "Authorization", "Bearer acct_1")
		if again.status != 200 || !again.replayed() || again.body != first.body {
			t.Errorf("%s: %v (replayed %v); want 200 %q replayed", c.what, again, again.replayed(), first.body)
		}
	}
	f.wantRows(t, "after 4 copies", map[string]int{"refunds": 1, "idem_test_refund": 1})
}

// TestKeyReusedIs422: the key of a processed request with another body is
// 422 key-reused, and changes nothing.
func TestKeyReusedIs422(t *testing.T) {
	f := newFixture(t)
	url := refundServer(t, f)
	send(t, "POST", url, `{"charge":"ch_1","amount":500}`, "Content-Type", jsonType, "Idempotency-Key", "k-1", "Authorization", "Bearer acct_1")
	r := send(t, "POST", url, `{"charge":"ch_1","amount":700}`, "Content-Type", jsonType, "Idempotency-Key", "k-1", "Authorization", "Bearer acct_1")
	if p := problemOf(t, r); r.status != 422 || p.Type != idemhttp.ProblemKeyReused {
		t.Fatalf("reused key: %v; want 422 %s", r, idemhttp.ProblemKeyReused)
	}
	f.wantRows(t, "after the reused key", map[string]int{"refunds": 1, "idem_test_refund": 1})
}

// TestBadRequestsWriteNothing: each malformed request gets its status and
// problem type, and no row is written.
func TestBadRequestsWriteNothing(t *testing.T) {
	f := newFixture(t)
	url := refundServer(t, f, idemhttp.WithMaxBodySize(64))
	body := `{"charge":"ch_1","amount":500}`
	key, auth, ct := []string{"Idempotency-Key", "k-1"}, []string{"Authorization", "Bearer acct_1"}, []string{"Content-Type", jsonType}
	join := func(hs ...[]string) []string {
		var out []string
		for _, h := range hs {
			out = append(out, h...)
		}
		return out
	}
	for _, c := range []struct {
		what, method, body string
		header             []string
		status             int
		typ                string
	}{
		{"no key header", "POST", body, join(auth, ct), 400, idemhttp.ProblemMissingKey},
		{"an empty key", "POST", body, join(auth, ct, []string{"Idempotency-Key", `""`}), 400, idemhttp.ProblemMissingKey},
		{"an open quoted key", "POST", body, join(auth, ct, []string{"Idempotency-Key", `"k-1`}), 400, idemhttp.ProblemInvalidKey},
		{"two key headers", "POST", body, join(auth, ct, key, []string{"Idempotency-Key", "k-2"}), 400, idemhttp.ProblemInvalidKey},
		{"a key over idem.MaxKeyBytes", "POST", body, join(auth, ct, []string{"Idempotency-Key", strings.Repeat("k", idem.MaxKeyBytes+1)}), 400, idemhttp.ProblemInvalidKey},
		{"no client", "POST", body, join(ct, key), 400, idemhttp.ProblemMissingClient},
		{"GET", "GET", "", join(auth, key), 405, idemhttp.ProblemMethodNotAllowed},
		{"DELETE", "DELETE", "", join(auth, key), 405, idemhttp.ProblemMethodNotAllowed},
		{"text/plain", "POST", body, join(auth, key, []string{"Content-Type", "text/plain"}), 415, idemhttp.ProblemUnsupportedMediaType},
		{"no content type", "POST", body, join(auth, key), 415, idemhttp.ProblemUnsupportedMediaType},
		{"a form", "POST", "charge=ch_1&amount=500", join(auth, key, []string{"Content-Type", "application/x-www-form-urlencoded"}), 415, idemhttp.ProblemUnsupportedMediaType},
		{"malformed JSON", "POST", `{"charge":`, join(auth, key, ct), 400, idemhttp.ProblemMalformedBody},
		{"two JSON values", "POST", body + body, join(auth, key, ct), 400, idemhttp.ProblemMalformedBody},
		{"a field of another type", "POST", `{"charge":"ch_1","amount":"500"}`, join(auth, key, ct), 400, idemhttp.ProblemMalformedBody},
		{"a body over WithMaxBodySize", "POST", `{"charge":"` + strings.Repeat("x", 64) + `"}`, join(auth, key, ct), 413, idemhttp.ProblemBodyTooLarge},
	} {
		r := send(t, c.method, url, c.body, c.header...)
		p := problemOf(t, r)
		if r.status != c.status || p.Type != c.typ {
			t.Errorf("%s: %v; want %d %s", c.what, r, c.status, c.typ)
		}
		if c.status == 405 && r.header.Get("Allow") != "POST, PUT, PATCH" {
			t.Errorf("%s: Allow %q; want POST, PUT, PATCH", c.what, r.header.Get("Allow"))
		}
		f.wantRows(t, c.what, map[string]int{"refunds": 0, "idem_test_refund": 0})
	}
	// A chunked body (no Content-Length) is cut at the limit too.
	req, _ := http.NewRequest("POST", url, strings.NewReader(`{"charge":"`+strings.Repeat("x", 64)+`"}`))
	req.ContentLength = -1
	req.Header.Set("Content-Type", jsonType)
	req.Header.Set("Idempotency-Key", "k-1")
	req.Header.Set("Authorization", "Bearer acct_1")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 413 {
		t.Errorf("a chunked body over the limit: %d; want 413", res.StatusCode)
	}
	f.wantRows(t, "after the chunked body", map[string]int{"refunds": 0, "idem_test_refund": 0})
}

// TestMaxBodySizeIsExact: a body of exactly WithMaxBodySize bytes is read,
// with a Content-Length or chunked; one byte more is 413.
func TestMaxBodySizeIsExact(t *testing.T) {
	f := newFixture(t)
	const limit = 1 << 10
	url := refundServer(t, f, idemhttp.WithMaxBodySize(limit))
	sized := func(n int) string {
		b := `{"charge":"ch_1","amount":500,"pad":""}`
		return b[:len(b)-2] + strings.Repeat("x", n-len(b)) + `"}`
	}
	for i, chunked := range []bool{false, true} {
		for _, c := range []struct {
			n      int
			status int
		}{{limit, 200}, {limit + 1, 413}} {
			body := sized(c.n)
			req, _ := http.NewRequest("POST", url, strings.NewReader(body))
			if chunked {
				req.ContentLength = -1
			}
			req.Header.Set("Content-Type", jsonType)
			req.Header.Set("Idempotency-Key", fmt.Sprintf("k-%d-%d", i, c.n))
			req.Header.Set("Authorization", "Bearer acct_1")
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if len(body) != c.n || res.StatusCode != c.status {
				t.Errorf("a body of %d bytes (chunked %v) under a limit of %d: %d; want %d", len(body), chunked, limit, res.StatusCode, c.status)
			}
		}
	}
	f.wantRows(t, "after two bodies at the limit", map[string]int{"refunds": 2})
	// The default limit is 1 MiB, exactly.
	def := refundServer(t, f)
	for _, c := range []struct {
		n      int
		status int
	}{{idemhttp.DefaultMaxBodySize, 200}, {idemhttp.DefaultMaxBodySize + 1, 413}} {
		r := send(t, "POST", def, sized(c.n), "Content-Type", jsonType, "Idempotency-Key", "big-"+strconv.Itoa(c.n), "Authorization", "Bearer acct_1")
		if r.status != c.status {
			t.Errorf("a body of %d bytes under the default limit: %d; want %d", c.n, r.status, c.status)
		}
	}
}

// TestClientsKeepTheirKeys: two clients that send the same key (and body)
// get two effects, and each client's copy replays its own result.
func TestClientsKeepTheirKeys(t *testing.T) {
	f := newFixture(t)
	url := refundServer(t, f)
	body := `{"charge":"ch_1","amount":500}`
	a := send(t, "POST", url, body, "Content-Type", jsonType, "Idempotency-Key", "same", "Authorization", "Bearer acct_a")
	b := send(t, "POST", url, body, "Content-Type", jsonType, "Idempotency-Key", "same", "Authorization", "Bearer acct_b")
	if a.status != 200 || b.status != 200 || a.replayed() || b.replayed() || a.body == b.body {
		t.Fatalf("two clients, one key: %v and %v; want two processed refunds with their own ids", a, b)
	}
	for _, c := range []struct {
		client string
		first  response
	}{{"acct_a", a}, {"acct_b", b}} {
		again := send(t, "POST", url, body, "Content-Type", jsonType, "Idempotency-Key", "same", "Authorization", "Bearer "+c.client)
		if !again.replayed() || again.body != c.first.body {
			t.Errorf("%s's copy: %v; want its own %q replayed", c.client, again, c.first.body)
		}
	}
	f.wantRows(t, "two clients, two copies each", map[string]int{"refunds": 2, "idem_test_refund": 2})
}

// TestHandlerErrorRunsAgain: a handler error is 500 and stores nothing, so
// the retry with the same key runs the handler again; WithErrorStatus
// chooses another status for the handler's own errors.
func TestHandlerErrorRunsAgain(t *testing.T) {
	f := newFixture(t)
	url := refundServer(t, f, idemhttp.WithErrorStatus(func(err error) (int, bool) {
		if errors.Is(err, errDeclined) {
			return http.StatusPaymentRequired, true
		}
		return 0, false
	}))
	hdr := []string{"Content-Type", jsonType, "Idempotency-Key", "k-1", "Authorization", "Bearer acct_1"}
	r := send(t, "POST", url, `{"charge":"fail-once","amount":500}`, hdr...)
	if p := problemOf(t, r); r.status != 500 || p.Type != idemhttp.ProblemFailed || strings.Contains(r.body, "first run") {
		t.Fatalf("a failing handler: %v; want 500 %s without the error's text", r, idemhttp.ProblemFailed)
	}
	f.wantRows(t, "after the failure", map[string]int{"refunds": 0, "idem_test_refund": 0})
	r = send(t, "POST", url, `{"charge":"fail-once","amount":500}`, hdr...)
	if r.status != 200 || r.replayed() {
		t.Fatalf("the retry with the same key: %v; want 200, processed", r)
	}
	f.wantRows(t, "after the retry", map[string]int{"refunds": 1, "idem_test_refund": 1})

	hdr[3] = "k-2"
	for i := range 2 {
		r = send(t, "POST", url, `{"charge":"declined","amount":500}`, hdr...)
		if p := problemOf(t, r); r.status != 402 || p.Type != idemhttp.ProblemFailed {
			t.Fatalf("declined, attempt %d: %v; want 402 from WithErrorStatus", i+1, r)
		}
	}
	f.wantRows(t, "after two declines", map[string]int{"refunds": 1, "idem_test_refund": 1})
}

// TestInProgressIs409: a copy that arrives while the first request runs,
// and waits longer than the claim wait, is 409 with Retry-After; once the
// first commits its copies replay it.
func TestInProgressIs409(t *testing.T) {
	// The claim-first protocol holds the key while the first request runs.
	f := newFixture(t, idem.WithClaimWait(200*time.Millisecond), idem.WithPessimisticClaim())
	url := refundServer(t, f)
	hdr := []string{"Content-Type", jsonType, "Idempotency-Key", "k-hold", "Authorization", "Bearer acct_1"}
	body := `{"charge":"hold","amount":500}`
	first := make(chan response, 1)
	go func() { first <- send(t, "POST", url, body, hdr...) }()
	<-f.svc.held
	r := send(t, "POST", url, body, hdr...)
	if p := problemOf(t, r); r.status != 409 || p.Type != idemhttp.ProblemInProgress || r.header.Get("Retry-After") != "1" {
		t.Errorf("a copy while the first runs: %v, Retry-After %q; want 409 %s, Retry-After 1", r, r.header.Get("Retry-After"), idemhttp.ProblemInProgress)
	}
	close(f.svc.release)
	r1 := <-first
	if r1.status != 200 || r1.replayed() {
		t.Fatalf("the first request: %v; want 200, processed", r1)
	}
	if r = send(t, "POST", url, body, hdr...); !r.replayed() || r.body != r1.body {
		t.Errorf("a copy after the first: %v; want its body replayed", r)
	}
	f.wantRows(t, "after three copies", map[string]int{"refunds": 1, "idem_test_refund": 1})
}

// TestConcurrentCopies: 16 copies of a request at once have one effect;
// one is processed, and each other one replays it or is 409 with
// Retry-After.
func TestConcurrentCopies(t *testing.T) {
	const n = 16
	f := newFixture(t)
	idemtest.Warm(t, f.pool, n)
	url := refundServer(t, f)
	rs := make([]response, n)
	idemtest.AtOnce(n, func(i int) {
		rs[i] = send(t, "POST", url, `{"charge":"ch_1","amount":500}`, "Content-Type", jsonType, "Idempotency-Key", "k-16", "Authorization", "Bearer acct_1")
	})
	var processed []response
	replays, busy := 0, 0
	for _, r := range rs {
		switch {
		case r.status == 200 && !r.replayed():
			processed = append(processed, r)
		case r.status == 200:
			replays++
		case r.status == 409 && r.header.Get("Retry-After") != "":
			busy++
		default:
			t.Errorf("a copy got %v; want 200 or 409 with Retry-After", r)
		}
	}
	if len(processed) != 1 {
		t.Fatalf("%d copies processed; want 1", len(processed))
	}
	for _, r := range rs {
		if r.status == 200 && r.body != processed[0].body {
			t.Errorf("a replay %q differs from the processed %q", r.body, processed[0].body)
		}
	}
	t.Logf("%d copies: 1 processed, %d replayed, %d in progress (409)", n, replays, busy)
	f.wantRows(t, "after 16 copies", map[string]int{"refunds": 1, "idem_test_refund": 1})
}

// TestNoResultIs204: a handler without a result is answered 204, and its
// copies 204 with Idempotent-Replayed; the key comes from WithKeyHeader's
// header, and the message type is a pointer to an idem.Request.
func TestNoResultIs204(t *testing.T) {
	f := newFixture(t)
	url := serve(t, idemhttp.Handler(f.note, idemhttp.WithKeyHeader("webhook-id")))
	for i, want := range []bool{false, true} {
		r := send(t, "PUT", url, `{"text":"hello"}`, "Content-Type", jsonType, "webhook-id", "msg_1")
		if r.status != 204 || r.body != "" || r.replayed() != want {
			t.Errorf("copy %d: %v (replayed %v); want 204 without a body, replayed %v", i+1, r, r.replayed(), want)
		}
	}
	if r := send(t, "PUT", url, `{"text":"hello"}`, "Content-Type", jsonType, "Idempotency-Key", "msg_1"); r.status != 400 {
		t.Errorf("the key in Idempotency-Key instead of webhook-id: %v; want 400", r)
	}
	f.wantRows(t, "after two copies", map[string]int{"notes": 1, "idem_test_note": 1})
}

// TestOwnIDNeedsNoHeader: a handler of a body keyed by its own id takes
// requests without a key header; a body without the id is 400 and writes
// nothing.
func TestOwnIDNeedsNoHeader(t *testing.T) {
	f := newFixture(t)
	url := serve(t, idemhttp.Handler(f.event, idemhttp.WithStatus(http.StatusCreated)))
	first := send(t, "POST", url, `{"id":"evt_1","type":"charge.refunded"}`, "Content-Type", jsonType)
	again := send(t, "PATCH", url, `{"type":"charge.refunded","id":"evt_1"}`, "Content-Type", "application/vnd.event+json")
	if first.status != 201 || first.replayed() || again.status != 201 || !again.replayed() || again.body != first.body {
		t.Fatalf("an event and its copy: %v, %v; want 201 twice, the second replayed", first, again)
	}
	r := send(t, "POST", url, `{"type":"charge.refunded"}`, "Content-Type", jsonType)
	if p := problemOf(t, r); r.status != 400 || p.Type != idemhttp.ProblemInvalidKey {
		t.Errorf("an event without its id: %v; want 400 %s", r, idemhttp.ProblemInvalidKey)
	}
	f.wantRows(t, "after the events", map[string]int{"events": 1, "idem_test_event": 1})
}

// decodeForm is a WithDecoder decoder of form bodies, such as stripe-go's
// calls of /v1 paths send.
func decodeForm(r *http.Request, v any) error {
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/x-www-form-urlencoded" {
		return idemhttp.ErrUnsupportedMediaType
	}
	p, ok := v.(*refundParams)
	if !ok {
		return fmt.Errorf("decodeForm: cannot decode into %T", v)
	}
	if err := r.ParseForm(); err != nil {
		return err
	}
	amount, err := strconv.ParseInt(r.PostForm.Get("amount"), 10, 64)
	if err != nil {
		return err
	}
	p.Charge, p.Amount = r.PostForm.Get("charge"), amount
	return nil
}

// TestDecoderServesForms: WithDecoder serves form bodies beside JSON; the
// fingerprint is of the decoded message, so the same request as a form
// and as JSON is one request; a decoder's failure is 400 and a body too
// long for it 413.
func TestDecoderServesForms(t *testing.T) {
	f := newFixture(t)
	url := refundServer(t, f, idemhttp.WithDecoder(decodeForm), idemhttp.WithMaxBodySize(100))
	auth := []string{"Idempotency-Key", "k-1", "Authorization", "Bearer acct_1"}
	form := send(t, "POST", url, "charge=ch_1&amount=500", append(auth, "Content-Type", "application/x-www-form-urlencoded")...)
	asJSON := send(t, "POST", url, `{"amount":500,"charge":"ch_1"}`, append(auth, "Content-Type", jsonType)...)
	if form.status != 200 || form.replayed() || !asJSON.replayed() || asJSON.body != form.body {
		t.Fatalf("a form, then the same request as JSON: %v, %v; want processed, then replayed", form, asJSON)
	}
	for _, c := range []struct {
		what, body, ct string
		status         int
	}{
		{"a form without an amount", "charge=ch_2", "application/x-www-form-urlencoded", 400},
		{"a form over the limit", "charge=" + strings.Repeat("x", 100), "application/x-www-form-urlencoded", 413},
		{"text/plain", "charge=ch_2&amount=1", "text/plain", 415},
	} {
		r := send(t, "POST", url, c.body, "Idempotency-Key", "k-2", "Authorization", "Bearer acct_1", "Content-Type", c.ct)
		if problemOf(t, r); r.status != c.status {
			t.Errorf("%s: %v; want %d", c.what, r, c.status)
		}
	}
	f.wantRows(t, "after the form and its copy", map[string]int{"refunds": 1, "idem_test_refund": 1})
}

// stripeError writes problems as Stripe's API does, {"error": {...}}, so
// that stripe-go stops retrying a 4xx.
func stripeError(w http.ResponseWriter, _ *http.Request, p idemhttp.Problem) {
	typ := "invalid_request_error"
	switch p.Type {
	case idemhttp.ProblemKeyReused, idemhttp.ProblemInProgress:
		typ = "idempotency_error"
	case idemhttp.ProblemFailed:
		typ = "api_error"
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"type": typ, "message": p.Detail}})
}

// TestErrorWriter: WithErrorWriter replaces the problem's shape.
func TestErrorWriter(t *testing.T) {
	f := newFixture(t)
	url := refundServer(t, f, idemhttp.WithErrorWriter(stripeError))
	hdr := []string{"Content-Type", jsonType, "Idempotency-Key", "k-1", "Authorization", "Bearer acct_1"}
	send(t, "POST", url, `{"charge":"ch_1","amount":500}`, hdr...)
	r := send(t, "POST", url, `{"charge":"ch_1","amount":1}`, hdr...)
	var body struct {
		Error struct{ Type, Message string }
	}
	if err := json.Unmarshal([]byte(r.body), &body); err != nil || r.status != 422 || body.Error.Type != "idempotency_error" || body.Error.Message == "" {
		t.Fatalf("a reused key through a Stripe-style writer: %v (%v); want 422 {\"error\": {\"type\": \"idempotency_error\", ...}}", r, err)
	}
}

// TestOptionsRefused: options that cannot apply panic when Handler is
// built, not on the first request.
func TestOptionsRefused(t *testing.T) {
	f := newFixture(t)
	for what, build := range map[string]func(){
		"WithClient for a body keyed by its id":    func() { idemhttp.Handler(f.event, idemhttp.WithClient(clientOf)) },
		"WithKeyHeader for a body keyed by its id": func() { idemhttp.Handler(f.event, idemhttp.WithKeyHeader("webhook-id")) },
		"WithKeyHeader of a bad name":              func() { idemhttp.WithKeyHeader("webhook id") },
		"WithStatus(302)":                          func() { idemhttp.WithStatus(302) },
		"WithMaxBodySize(0)":                       func() { idemhttp.WithMaxBodySize(0) },
		"WithDecoder(nil)":                         func() { idemhttp.WithDecoder(nil) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s did not panic", what)
				}
			}()
			build()
		}()
	}
}

// TestDecoratorServed: an idem.Handler that is not a generated wrapper
// (a decorator) is served through Deliver, without a result.
func TestDecoratorServed(t *testing.T) {
	f := newFixture(t)
	var mu sync.Mutex
	var seen []string
	logged := idem.HandlerFunc[idem.Request[refundParams]](func(ctx context.Context, req idem.Request[refundParams]) (idem.Outcome, error) {
		o, err := f.refund.Deliver(ctx, req)
		mu.Lock()
		seen = append(seen, o.String())
		mu.Unlock()
		return o, err
	})
	url := serve(t, idemhttp.Handler(logged, idemhttp.WithClient(clientOf)))
	for range 2 {
		if r := send(t, "POST", url, `{"charge":"ch_1","amount":5}`, "Content-Type", jsonType, "Idempotency-Key", "k-1", "Authorization", "Bearer a"); r.status != 204 {
			t.Errorf("through a decorator: %v; want 204", r)
		}
	}
	if strings.Join(seen, ",") != "processed,duplicate" {
		t.Errorf("the decorator saw %v; want processed, duplicate", seen)
	}
}
