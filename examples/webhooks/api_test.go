package webhooks_test

import (
	"strings"
	"testing"

	"github.com/idemgen/idemgen/examples/webhooks"
	"github.com/idemgen/idemgen/idem/idemhttp"
	"github.com/idemgen/idemgen/idem/idemtest"
)

// TestRefundAPIStatuses calls the refund API with net/http for each answer
// the contract names, and logs each (go test -v shows them): first 200;
// its copy replayed; 16 copies at once with one effect; 422, 400, 413, 415
// and 405 that write nothing; a handler error, then the retry with the same
// key processed.
func TestRefundAPIStatuses(t *testing.T) {
	db := newDB(t)
	seedPayment(t, db.Pool, "pi_1", 10000)
	url := serve(t, newService().Routes(db.Pool)) + webhooks.RefundsV2Path
	refunds := func() int { return queryInt(t, db.Pool, `SELECT count(*) FROM refunds`) }
	inbox := func() int { return queryInt(t, db.Pool, `SELECT count(*) FROM idem_webhooks_refund`) }
	log := func(what string, r response) { t.Logf("%-44s → %v", what, r) }

	body := `{"payment":"pi_1","amount":500}`
	first := send(t, "POST", url, body, refundHeader("k-1")...)
	log("POST, Idempotency-Key: k-1", first)
	if first.status != 200 || first.replayed() || !strings.Contains(first.body, `"remaining":9500`) {
		t.Fatalf("first request: %v; want 200 with the refund, not replayed", first)
	}
	again := send(t, "POST", url, body, refundHeader("k-1")...)
	log("the same again", again)
	if again.status != 200 || !again.replayed() || again.body != first.body {
		t.Fatalf("copy: %v; want 200 %q replayed", again, first.body)
	}

	const n = 16
	idemtest.Warm(t, db.Pool, n)
	rs := make([]response, n)
	idemtest.AtOnce(n, func(i int) { rs[i] = send(t, "POST", url, `{"payment":"pi_1","amount":100}`, refundHeader("k-16")...) })
	processed, replayed, busy := 0, 0, 0
	for _, r := range rs {
		switch {
		case r.status == 200 && !r.replayed():
			processed++
		case r.status == 200:
			replayed++
		case r.status == 409 && r.header.Get("Retry-After") != "" && r.problemType() == idemhttp.ProblemInProgress:
			busy++
		default:
			t.Errorf("one of 16 copies: %v; want 200, or 409 with Retry-After", r)
		}
	}
	t.Logf("%-44s → %d processed, %d replayed, %d × 409", "16 copies of k-16 at once", processed, replayed, busy)
	if processed != 1 || refunds() != 2 {
		t.Fatalf("16 copies at once: %d processed, %d refunds in all; want 1 processed, 2 refunds", processed, refunds())
	}

	for _, c := range []struct {
		what, method, body string
		header             []string
		status             int
		typ                string
	}{
		{"k-1 with another amount", "POST", `{"payment":"pi_1","amount":501}`, refundHeader("k-1"), 422, idemhttp.ProblemKeyReused},
		{"no Idempotency-Key", "POST", body, refundHeader("")[:4], 400, idemhttp.ProblemMissingKey},
		{"a body over 1 MiB", "POST", `{"payment":"` + strings.Repeat("x", 1<<20) + `"}`, refundHeader("k-big"), 413, idemhttp.ProblemBodyTooLarge},
		{"Content-Type: text/plain", "POST", body, append(refundHeader("k-text")[2:], "Content-Type", "text/plain"), 415, idemhttp.ProblemUnsupportedMediaType},
		{"GET", "GET", "", refundHeader("k-get"), 405, idemhttp.ProblemMethodNotAllowed},
	} {
		before, beforeInbox := refunds(), inbox()
		r := send(t, c.method, url, c.body, c.header...)
		log(c.what, r)
		if r.status != c.status || r.problemType() != c.typ {
			t.Errorf("%s: %v; want %d %s", c.what, r, c.status, c.typ)
		}
		if refunds() != before || inbox() != beforeInbox {
			t.Errorf("%s wrote rows: refunds %d → %d, inbox %d → %d", c.what, before, refunds(), beforeInbox, inbox())
		}
	}

	// The refund of a payment whose webhook has not arrived yet fails (404
	// from StatusOf); nothing is stored, so once the payment is booked the
	// retry with the same key runs the handler again.
	late := `{"payment":"pi_late","amount":200}`
	r := send(t, "POST", url, late, refundHeader("k-late")...)
	log("a refund of an unknown payment", r)
	if r.status != 404 || r.problemType() != idemhttp.ProblemFailed {
		t.Fatalf("a refund of an unknown payment: %v; want 404 %s", r, idemhttp.ProblemFailed)
	}
	ev := postEvent(t, strings.TrimSuffix(url, webhooks.RefundsV2Path), eventJSON("evt_late", "pi_late", 1000))
	log("the payment's webhook", ev)
	r = send(t, "POST", url, late, refundHeader("k-late")...)
	log("the retry with the same key", r)
	if r.status != 200 || r.replayed() {
		t.Fatalf("the retry: %v; want 200, processed", r)
	}
	if got := refunds(); got != 3 {
		t.Errorf("%d refunds; want 3", got)
	}
}

// TestClientsGetTheirOwnRefunds: two API clients that send the same
// Idempotency-Key get a refund each, and each client's retry replays its
// own.
func TestClientsGetTheirOwnRefunds(t *testing.T) {
	db := newDB(t)
	seedPayment(t, db.Pool, "pi_1", 10000)
	url := serve(t, newService().Routes(db.Pool)) + webhooks.RefundsV2Path
	body := `{"payment":"pi_1","amount":500}`
	header := func(key string) []string {
		return []string{"Content-Type", "application/json", "Authorization", "Bearer " + key, "Idempotency-Key", "order-17"}
	}
	first := map[string]response{}
	for _, key := range []string{apiKey, otherKey} {
		first[key] = send(t, "POST", url, body, header(key)...)
		t.Logf("client %s, order-17 → %v", key, first[key])
		if r := first[key]; r.status != 200 || r.replayed() {
			t.Fatalf("client %s: %v; want 200, processed", key, r)
		}
	}
	if first[apiKey].body == first[otherKey].body {
		t.Fatalf("both clients got %q; want a refund each", first[apiKey].body)
	}
	for _, key := range []string{apiKey, otherKey} {
		r := send(t, "POST", url, body, header(key)...)
		t.Logf("client %s, order-17 again → %v", key, r)
		if !r.replayed() || r.body != first[key].body {
			t.Errorf("client %s's retry: %v; want its own %q replayed", key, r, first[key].body)
		}
	}
	if n := queryInt(t, db.Pool, `SELECT count(*) FROM refunds`); n != 2 {
		t.Errorf("%d refunds; want 2, one per client", n)
	}
	if n := queryInt(t, db.Pool, `SELECT refunded FROM payments WHERE id = 'pi_1'`); n != 1000 {
		t.Errorf("refunded %d; want 1000", n)
	}
	if r := send(t, "POST", url, body, "Content-Type", "application/json", "Idempotency-Key", "order-17"); r.status != 401 {
		t.Errorf("without an API key: %v; want 401", r)
	}
}

// TestWebhookRetried delivers a Stripe-signed event 3 times, then another
// one 8 times at once: one payment each, every copy answered with the
// first one's receipt. A forged signature is 400 and books nothing.
func TestWebhookRetried(t *testing.T) {
	db := newDB(t)
	url := serve(t, newService().Routes(db.Pool))
	payments := func(event string) int {
		return queryInt(t, db.Pool, `SELECT count(*) FROM payments WHERE event = $1`, event)
	}
	payload := eventJSON("evt_1", "pi_1", 4200)
	var first response
	for i := range 3 {
		// Stripe signs each delivery anew: the signature differs, the event
		// does not.
		r := postEvent(t, url, payload)
		t.Logf("evt_1, delivery %d → %v", i+1, r)
		if i == 0 {
			first = r
		}
		if r.status != 200 || r.replayed() != (i > 0) || r.body != first.body {
			t.Errorf("evt_1, delivery %d: %v; want 200 %q, replayed after the first", i+1, r, first.body)
		}
	}
	if !strings.Contains(first.body, `"payment":"pi_1"`) || payments("evt_1") != 1 {
		t.Fatalf("evt_1: receipt %q, %d payments; want pi_1 booked once", first.body, payments("evt_1"))
	}

	const n = 8
	idemtest.Warm(t, db.Pool, n)
	payload = eventJSON("evt_2", "pi_2", 900)
	rs := make([]response, n)
	idemtest.AtOnce(n, func(i int) { rs[i] = postEvent(t, url, payload) })
	processed := 0
	for _, r := range rs {
		switch {
		case r.status == 200 && !r.replayed():
			processed++
		case r.status == 200 || r.status == 409 && r.header.Get("Retry-After") != "":
		default:
			t.Errorf("one of 8 copies of evt_2: %v; want 200, or 409 with Retry-After", r)
		}
	}
	t.Logf("evt_2, 8 deliveries at once → %d processed; %d payment(s) booked", processed, payments("evt_2"))
	if processed != 1 || payments("evt_2") != 1 {
		t.Fatalf("evt_2 delivered 8 times at once: %d processed, %d payments; want 1 and 1", processed, payments("evt_2"))
	}

	forged := eventJSON("evt_3", "pi_3", 100)
	r := send(t, "POST", url+webhooks.WebhookPath, string(forged), "Content-Type", "application/json",
		"Stripe-Signature", signed([]byte(strings.Replace(string(forged), "100", "1", 1))))
	t.Logf("evt_3 with a signature of another body → %v", r)
	if r.status != 400 || r.problemType() != idemhttp.ProblemMalformedBody || payments("evt_3") != 0 {
		t.Errorf("a forged event: %v, %d payments; want 400 %s and nothing booked", r, payments("evt_3"), idemhttp.ProblemMalformedBody)
	}
	if n := queryInt(t, db.Pool, `SELECT count(*) FROM idem_webhooks_stripe_event`); n != 2 {
		t.Errorf("%d inbox rows; want 2 (evt_1, evt_2)", n)
	}
}
