// Package payments is a small payment consumer whose handler idemgen makes
// idempotent in mode=external: the charge is made by a payment provider over
// HTTP, outside the database, so no transaction can undo it. The wrapper
// claims the order's key before the call, the handler sends the provider the
// idempotency key idem.KeyFrom(ctx) gives it in the Idempotency-Key header, and
// the provider's deduplication of that key is what makes a rerun (after a
// crash, or a claim that expired) charge once.
package payments

//go:generate go run github.com/idemgen/idemgen/cmd/idemgen -migrations migrations .

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/idemgen/idemgen/idem"
)

// ChargeRequested asks for an order to be charged; the order service sends
// it, and the broker may deliver it more than once.
type ChargeRequested struct {
	OrderID     string `json:"order_id"`
	AmountCents int64  `json:"amount_cents"`
	Currency    string `json:"currency"`
}

// Receipt is what Charge returns, and what every redelivery of the same order
// gets back: the provider's id of the charge.
type Receipt struct {
	ChargeID string `json:"charge_id"`
}

// IdempotencyKeyHeader is the header that carries the idempotency key, as
// payment APIs (Stripe, Adyen) name it.
const IdempotencyKeyHeader = "Idempotency-Key"

// Service charges orders through a payment provider's HTTP API.
type Service struct {
	// ProviderURL is the provider's charges endpoint.
	ProviderURL string
	// Client makes the requests; nil is http.DefaultClient.
	Client *http.Client
}

// ErrDeclined is returned by Charge when the provider refuses the charge.
var ErrDeclined = errors.New("payments: the provider declined the charge")

// Charge asks the provider to charge msg's order, once however often it runs:
// every attempt sends the same idempotency key, and the provider answers a
// key it has seen with the charge it made then.
//
//idem:handler consumer=payments.charge key=OrderID mode=external lease=30s fixture=chargeFixture
func (s *Service) Charge(ctx context.Context, msg ChargeRequested) (Receipt, error) {
	key, ok := idem.KeyFrom(ctx)
	if !ok {
		return Receipt{}, errors.New("payments: Charge runs through its idempotent wrapper (NewChargeIdem), which gives it the idempotency key")
	}
	body, err := json.Marshal(msg)
	if err != nil {
		return Receipt{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.ProviderURL, bytes.NewReader(body))
	if err != nil {
		return Receipt{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(IdempotencyKeyHeader, key)
	client := s.Client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return Receipt{}, fmt.Errorf("payments: charge order %s: %w", msg.OrderID, err)
	}
	defer resp.Body.Close()
	var answer struct {
		ID    string `json:"id"`
		Error string `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil {
		return Receipt{}, fmt.Errorf("payments: charge order %s: the provider answered %s with an unreadable body: %w", msg.OrderID, resp.Status, err)
	}
	switch {
	case resp.StatusCode == http.StatusPaymentRequired:
		return Receipt{}, fmt.Errorf("%w: order %s: %s", ErrDeclined, msg.OrderID, answer.Error)
	case resp.StatusCode != http.StatusOK:
		return Receipt{}, fmt.Errorf("payments: charge order %s: the provider answered %s: %s", msg.OrderID, resp.Status, answer.Error)
	}
	return Receipt{ChargeID: answer.ID}, nil
}
