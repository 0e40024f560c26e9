package webhooks_test

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stripe/stripe-go/v82"

	"github.com/idemgen/idemgen/examples/webhooks"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemhttp"
)

// refundParams is the refund API's parameters as a stripe-go client sends
// them: JSON to /v2 paths, a form to /v1 paths.
type refundParams struct {
	stripe.Params `form:"*"`
	Payment       *string `form:"payment" json:"payment"`
	Amount        *int64  `form:"amount" json:"amount"`
}

// refundResource is the refund API's answer as stripe-go decodes it.
type refundResource struct {
	stripe.APIResource
	ID        int64  `json:"id"`
	Object    string `json:"object"`
	Payment   string `json:"payment"`
	Amount    int64  `json:"amount"`
	Remaining int64  `json:"remaining"`
}

// stripeLog routes stripe-go's log lines (its retries among them) to the
// test's log.
type stripeLog struct{ t testing.TB }

func (l stripeLog) Debugf(string, ...any)     {}
func (l stripeLog) Infof(f string, v ...any)  { l.t.Logf("stripe-go: "+f, v...) }
func (l stripeLog) Warnf(f string, v ...any)  { l.t.Logf("stripe-go: "+f, v...) }
func (l stripeLog) Errorf(f string, v ...any) { l.t.Logf("stripe-go: "+f, v...) }

// stripeBackend is a stripe-go client of the API at url, which retries
// failed calls (network errors, timeouts) up to retries times, and gives
// each attempt timeout.
func stripeBackend(t testing.TB, url string, retries int64, timeout time.Duration) stripe.Backend {
	return stripe.GetBackendWithConfig(stripe.APIBackend, &stripe.BackendConfig{
		URL:               stripe.String(url),
		MaxNetworkRetries: stripe.Int64(retries),
		HTTPClient:        &http.Client{Timeout: timeout},
		LeveledLogger:     stripeLog{t},
		EnableTelemetry:   stripe.Bool(false),
	})
}

// refund calls the refund API at path through b with the idempotency key.
func refund(b stripe.Backend, path, key, payment string, amount int64) (*refundResource, error) {
	p := &refundParams{Payment: stripe.String(payment), Amount: stripe.Int64(amount)}
	p.SetIdempotencyKey(key)
	var r refundResource
	err := b.Call(http.MethodPost, path, apiKey, p, &r)
	return &r, err
}

// attempts counts the requests that reach a handler, per idempotency key,
// and holds the response of a key's first request back for delay (after
// the handler committed: the response is what is slow).
type attempts struct {
	h     http.Handler
	delay map[string]time.Duration
	mu    sync.Mutex
	n     map[string]int
}

func newAttempts(h http.Handler, delay map[string]time.Duration) *attempts {
	return &attempts{h: h, delay: delay, n: map[string]int{}}
}

func (a *attempts) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	a.mu.Lock()
	a.n[key]++
	first := a.n[key] == 1
	a.mu.Unlock()
	if d := a.delay[key]; first && d > 0 {
		w = &slowWriter{ResponseWriter: w, delay: d}
	}
	a.h.ServeHTTP(w, r)
}

func (a *attempts) of(key string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.n[key]
}

// slowWriter sleeps before the response's status goes out.
type slowWriter struct {
	http.ResponseWriter
	delay time.Duration
	slept bool
}

func (s *slowWriter) WriteHeader(code int) {
	if !s.slept {
		s.slept = true
		time.Sleep(s.delay)
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *slowWriter) Write(b []byte) (int, error) {
	s.WriteHeader(http.StatusOK)
	return s.ResponseWriter.Write(b)
}

// TestStripeClientRetries calls the refund API with stripe-go's client
// (Backend.Call, retries on, a 500 ms timeout per attempt). The client
// retries a response held back past the timeout with the same key, and a
// handler held up past it before its commit: the refund exists once.
func TestStripeClientRetries(t *testing.T) {
	db := newDB(t)
	seedPayment(t, db.Pool, "pi_1", 10000)
	svc := newService()
	var slowCommits atomic.Int32
	slowCommits.Store(1)
	holdCommit := idem.WithBeforeCommit(func(ctx context.Context, tx pgx.Tx) error {
		if slowCommits.Add(-1) == 0 {
			time.Sleep(time.Second)
		}
		return nil
	})
	srv := newAttempts(svc.RefundHandler(webhooks.NewCreateRefundIdem(db.Pool, svc)), map[string]time.Duration{"slow-response": 1500 * time.Millisecond})
	slowSrv := newAttempts(svc.RefundHandler(webhooks.NewCreateRefundIdem(db.Pool, svc, holdCommit)), nil)
	mux := http.NewServeMux()
	mux.Handle(webhooks.RefundsV2Path, srv)
	mux.Handle(webhooks.RefundsV1Path, srv)
	mux.Handle("/v2/slow-commit/refunds", slowSrv)
	b := stripeBackend(t, serve(t, mux), 3, 500*time.Millisecond)
	refunds := func(payment string) int {
		return queryInt(t, db.Pool, `SELECT count(*) FROM refunds WHERE payment = $1`, payment)
	}

	t.Run("response_delayed_past_the_timeout", func(t *testing.T) {
		r, err := refund(b, webhooks.RefundsV2Path, "slow-response", "pi_1", 300)
		if err != nil {
			t.Fatalf("refund through stripe-go: %v", err)
		}
		replayed := r.LastResponse.Header.Get("Idempotent-Replayed")
		t.Logf("stripe-go got refund %d after %d attempts (the last replayed: %q)", r.ID, srv.of("slow-response"), replayed)
		if srv.of("slow-response") < 2 || replayed != "true" || r.ID == 0 || r.Amount != 300 {
			t.Fatalf("%d attempts, replayed %q, refund %+v; want the client's retry answered with the stored refund", srv.of("slow-response"), replayed, r)
		}
		if n := queryInt(t, db.Pool, `SELECT count(*) FROM refunds WHERE amount = 300`); n != 1 {
			t.Fatalf("%d refunds of 300; want 1", n)
		}
	})

	t.Run("handler_delayed_past_the_timeout", func(t *testing.T) {
		r, err := refund(b, "/v2/slow-commit/refunds", "slow-commit", "pi_1", 400)
		if err != nil {
			t.Fatalf("refund through stripe-go: %v", err)
		}
		t.Logf("stripe-go got refund %d after %d attempts (the last replayed: %q)", r.ID, slowSrv.of("slow-commit"), r.LastResponse.Header.Get("Idempotent-Replayed"))
		if slowSrv.of("slow-commit") < 2 || r.ID == 0 {
			t.Fatalf("%d attempts, refund %+v; want a retry, and the refund", slowSrv.of("slow-commit"), r)
		}
		if n := queryInt(t, db.Pool, `SELECT count(*) FROM refunds WHERE amount = 400`); n != 1 {
			t.Fatalf("%d refunds of 400; want 1", n)
		}
	})

	t.Run("v1_form_and_v2_json_are_one_request", func(t *testing.T) {
		v2, err := refund(b, webhooks.RefundsV2Path, "both-ways", "pi_1", 500)
		if err != nil {
			t.Fatal(err)
		}
		v1, err := refund(b, webhooks.RefundsV1Path, "both-ways", "pi_1", 500)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("POST /v2 (JSON) → refund %d; POST /v1 (form), same key → refund %d, replayed %q", v2.ID, v1.ID, v1.LastResponse.Header.Get("Idempotent-Replayed"))
		if v1.ID != v2.ID || v1.LastResponse.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("the form copy of a JSON request: refund %d (replayed %q); want %d replayed", v1.ID, v1.LastResponse.Header.Get("Idempotent-Replayed"), v2.ID)
		}
		if n := refunds("pi_1"); n != 3 {
			t.Fatalf("%d refunds of pi_1; want 3", n)
		}
	})

	t.Run("stripe_errors_stop_retries", func(t *testing.T) {
		// A reused key is 422. stripe-go cannot read a problem+json body
		// as a Stripe error and retries it; a Stripe-style body
		// (WithErrorWriter(webhooks.StripeError)) makes it give up.
		stripeStyle := newAttempts(svc.RefundHandler(webhooks.NewCreateRefundIdem(db.Pool, svc), idemhttp.WithErrorWriter(webhooks.StripeError)), nil)
		b2 := stripeBackend(t, serve(t, stripeStyle), 2, 5*time.Second)
		if _, err := refund(b2, webhooks.RefundsV2Path, "reused", "pi_1", 10); err != nil {
			t.Fatal(err)
		}
		_, err := refund(b2, webhooks.RefundsV2Path, "reused", "pi_1", 11)
		// stripe-go reads the error of a /v2 path as a V2RawError.
		var se *stripe.V2RawError
		if !errors.As(err, &se) || se.Type == nil || *se.Type != stripe.ErrorTypeIdempotency || stripeStyle.of("reused") != 2 {
			t.Fatalf("a reused key, Stripe-style errors: %v, %d requests; want one idempotency_error", err, stripeStyle.of("reused")-1)
		}
		t.Logf("Stripe-style body: %v, after 1 request", err)

		_, err = refund(b, webhooks.RefundsV2Path, "reused-2", "pi_1", 10)
		if err != nil {
			t.Fatal(err)
		}
		b3 := stripeBackend(t, serve(t, srv), 2, 5*time.Second)
		_, err = refund(b3, webhooks.RefundsV2Path, "reused-2", "pi_1", 11)
		if err == nil || srv.of("reused-2") != 4 {
			t.Fatalf("a reused key, problem+json: %v, %d requests; want an error after 1 + 2 retries", err, srv.of("reused-2")-1)
		}
		t.Logf("problem+json body: %v, after %d requests", err, srv.of("reused-2")-1)
		if n := refunds("pi_1"); n != 5 {
			t.Fatalf("%d refunds of pi_1; want 5", n)
		}
	})
}
