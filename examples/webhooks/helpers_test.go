package webhooks_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stripe/stripe-go/v82"
	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/idemgen/idemgen/examples/webhooks"
	"github.com/idemgen/idemgen/idem/idemtest"
	"github.com/idemgen/idemgen/idem/idemtest/brokertest"
)

// These tests serve the example's API on a loopback server (net/http) and
// call it as its clients do: net/http for each status, stripe-go for the
// refund API, Stripe-signed events for the webhook, a RabbitMQ queue for the
// same events, and a server process killed with SIGKILL mid-request.

func TestMain(m *testing.M) {
	if os.Getenv(serverEnv) != "" {
		serverChild()
		return
	}
	os.Exit(brokertest.Main(m))
}

// The API key and webhook secret of the tests' service.
const (
	apiKey        = "sk_test_webhooks"
	otherKey      = "sk_test_other"
	webhookSecret = "whsec_test"
)

// newService is the tests' service: two API clients and the webhook
// secret.
func newService() *webhooks.Service {
	return &webhooks.Service{
		APIKeys:       map[string]string{apiKey: "acct_1", otherKey: "acct_2"},
		WebhookSecret: webhookSecret,
	}
}

// newDB is a fresh schema with the example's migrations applied.
func newDB(t *testing.T) *idemtest.DB {
	t.Helper()
	return idemtest.New(t, webhooks.Migrations())
}

// serve runs h on a loopback server for the test and returns its URL.
func serve(t testing.TB, h http.Handler) string {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

func seedPayment(t testing.TB, pool *pgxpool.Pool, id string, amount int64) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), `INSERT INTO payments (id, event, amount) VALUES ($1, 'evt_seed', $2)`, id, amount); err != nil {
		t.Fatalf("seed payment %s: %v", id, err)
	}
}

func queryInt(t testing.TB, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// response is what a request got back.
type response struct {
	status int
	header http.Header
	body   string
}

func (r response) replayed() bool { return r.header.Get("Idempotent-Replayed") == "true" }

func (r response) String() string {
	s := fmt.Sprintf("%d", r.status)
	if r.replayed() {
		s += " Idempotent-Replayed: true"
	}
	if ra := r.header.Get("Retry-After"); ra != "" {
		s += " Retry-After: " + ra
	}
	if a := r.header.Get("Allow"); a != "" {
		s += " Allow: " + a
	}
	body := strings.TrimSpace(r.body)
	if len(body) > 160 {
		body = body[:160] + "…"
	}
	return s + " " + body
}

// problemType is the type of a problem+json body, "" for another body.
func (r response) problemType() string {
	if r.header.Get("Content-Type") != "application/problem+json" {
		return ""
	}
	var p struct{ Type string }
	_ = json.Unmarshal([]byte(r.body), &p)
	return p.Type
}

// send makes one request with net/http; header holds name, value pairs.
func send(t testing.TB, method, url, body string, header ...string) response {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{status: res.StatusCode, header: res.Header, body: string(b)}
}

// refundHeader is the header of a JSON refund request of the client with
// apiKey, with the idempotency key.
func refundHeader(key string) []string {
	return []string{"Content-Type", "application/json", "Authorization", "Bearer " + apiKey, "Idempotency-Key", key}
}

// eventJSON is a payment_intent.succeeded event as Stripe sends it.
func eventJSON(id, intent string, amount int64) []byte {
	return []byte(fmt.Sprintf(`{
  "id": %q,
  "object": "event",
  "api_version": %q,
  "created": 1767225600,
  "type": "payment_intent.succeeded",
  "livemode": false,
  "pending_webhooks": 1,
  "data": {"object": {"id": %q, "object": "payment_intent", "amount": %d, "currency": "eur", "status": "succeeded"}}
}`, id, stripe.APIVersion, intent, amount))
}

// signed returns the Stripe-Signature header of payload, signed now with
// the webhook secret, as Stripe signs each delivery.
func signed(payload []byte) string {
	return webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: payload, Secret: webhookSecret, Timestamp: time.Now()}).Header
}

// postEvent delivers payload to the webhook at url, signed.
func postEvent(t testing.TB, url string, payload []byte) response {
	t.Helper()
	return send(t, "POST", url+webhooks.WebhookPath, string(payload),
		"Content-Type", "application/json; charset=utf-8", "Stripe-Signature", signed(payload))
}
