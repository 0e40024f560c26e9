package idemimpl

import (
	"bytes"
	"errors"
	"math"
	"testing"

	"github.com/idemgen/idemgen/idem"
)

type messageBody struct {
	OrderID string  `json:"order_id"`
	Amount  float64 `json:"amount"`
}

// TestMessageFingerprint: the fingerprint of a Message covers ID and Body and
// nothing else, so that a redelivery (another attempt, other headers) has the
// fingerprint of the first delivery and a different message does not.
func TestMessageFingerprint(t *testing.T) {
	fp := func(t *testing.T, m any) []byte {
		t.Helper()
		b, err := fingerprint(m)
		if err != nil {
			t.Fatalf("fingerprint(%+v): %v", m, err)
		}
		return b
	}
	first := idem.Message[messageBody]{ID: "m-1", Body: messageBody{OrderID: "o-1", Amount: 5}, Attempt: 1}
	redelivered := first
	redelivered.Attempt = 4
	redelivered.Headers = map[string]string{"x-delivery-count": "3", "traceparent": "00-abc"}
	if !bytes.Equal(fp(t, first), fp(t, redelivered)) {
		t.Errorf("another attempt and other headers changed the fingerprint: %x vs %x", fp(t, first), fp(t, redelivered))
	}
	if !bytes.Equal(fp(t, &first), fp(t, first)) {
		t.Errorf("a *Message has another fingerprint than its Message")
	}

	otherID := first
	otherID.ID = "m-2"
	otherBody := first
	otherBody.Body.Amount = 6
	for name, m := range map[string]idem.Message[messageBody]{"another ID": otherID, "another body": otherBody} {
		if bytes.Equal(fp(t, first), fp(t, m)) {
			t.Errorf("%s: same fingerprint as the first message", name)
		}
	}
	// The body is inside the envelope: its fingerprint there is not the bare
	// body's, so a consumer that moves to Message gets no false duplicates
	// against rows of bare messages, only fresh keys.
	if bytes.Equal(fp(t, first), fp(t, first.Body)) {
		t.Errorf("the Message has the fingerprint of its bare body")
	}

	nan := first
	nan.Body.Amount = math.NaN()
	if _, err := fingerprint(nan); !errors.Is(err, idem.ErrUnencodable) {
		t.Errorf("a NaN in the body: %v; want ErrUnencodable", err)
	}
}
