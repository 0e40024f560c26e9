// Package webhooks is a small shop backend whose handlers come in over HTTP
// and from RabbitMQ with one guarantee. Stripe's payment events arrive as
// signed webhooks (or from a queue that replays them), and API clients ask
// for refunds with an Idempotency-Key header. Each handler runs at most once
// per key, in one transaction with the row that records the key. Every copy
// of a request or an event gets the first one's result back.
package webhooks

//go:generate go run github.com/idemgen/idemgen/cmd/idemgen -migrations migrations .

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/stripe/stripe-go/v82"

	"github.com/idemgen/idemgen/idem"
)

// PaymentSucceeded is the type of the Stripe events RecordEvent books.
const PaymentSucceeded stripe.EventType = "payment_intent.succeeded"

// EventReceipt is what RecordEvent returns for an event, and what every
// copy of the event gets back.
type EventReceipt struct {
	Event   string `json:"event"`
	Type    string `json:"type"`
	Payment string `json:"payment,omitempty"`
	Amount  int64  `json:"amount,omitempty"`
}

// RefundParams is the body of a refund request.
type RefundParams struct {
	Payment string `json:"payment"`
	Amount  int64  `json:"amount"`
}

// Refund is a refund made, as the API answers it.
type Refund struct {
	ID        int64  `json:"id"`
	Object    string `json:"object"`
	Payment   string `json:"payment"`
	Amount    int64  `json:"amount"`
	Remaining int64  `json:"remaining"`
}

// Errors of the refund handler; the API answers them with their own
// statuses (StatusOf). Neither is stored: a retry with the same key runs
// the handler again, and succeeds once the payment is known.
var (
	ErrUnknownPayment = errors.New("webhooks: unknown payment")
	ErrRefundTooLarge = errors.New("webhooks: the refund is larger than what is left of the payment")
	ErrInvalidAmount  = errors.New("webhooks: a refund's amount must be positive")
)

// Service books payments and refunds them.
type Service struct {
	// APIKeys maps the secret key of each API client (its bearer token) to
	// the client's id, which its refunds' keys are scoped to.
	APIKeys map[string]string
	// WebhookSecret is the signing secret of the Stripe webhook endpoint.
	WebhookSecret string
}

// RecordEvent books a Stripe event: a payment_intent.succeeded event records
// its payment, and other types are acknowledged without an effect. The
// event's own id is its key, so a webhook that Stripe retries, or the same
// event replayed from a queue, is booked once.
//
//idem:handler consumer=webhooks.stripe-event key=ID fixture=recordEventFixture
func (s *Service) RecordEvent(ctx context.Context, tx pgx.Tx, ev stripe.Event) (EventReceipt, error) {
	r := EventReceipt{Event: ev.ID, Type: string(ev.Type)}
	if ev.Type != PaymentSucceeded {
		return r, nil
	}
	var intent struct {
		ID     string `json:"id"`
		Amount int64  `json:"amount"`
	}
	if ev.Data == nil || json.Unmarshal(ev.Data.Raw, &intent) != nil || intent.ID == "" {
		return EventReceipt{}, fmt.Errorf("%w: event %s holds no payment intent", idem.ErrUndecodablePayload, ev.ID)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO payments (id, event, amount) VALUES ($1, $2, $3)`, intent.ID, ev.ID, intent.Amount); err != nil {
		return EventReceipt{}, fmt.Errorf("record payment %s: %w", intent.ID, err)
	}
	r.Payment, r.Amount = intent.ID, intent.Amount
	return r, nil
}

// CreateRefund refunds part of a payment. Its key is the API client and the
// request's Idempotency-Key: a client's retry replays its refund, and two
// clients that pick the same key get a refund each.
//
//idem:handler consumer=webhooks.refund key=Client,Key fixture=createRefundFixture
func (s *Service) CreateRefund(ctx context.Context, tx pgx.Tx, req idem.Request[RefundParams]) (Refund, error) {
	if req.Body.Amount <= 0 {
		return Refund{}, ErrInvalidAmount
	}
	r := Refund{Object: "refund", Payment: req.Body.Payment, Amount: req.Body.Amount}
	err := tx.QueryRow(ctx,
		`UPDATE payments SET refunded = refunded + $2 WHERE id = $1 AND refunded + $2 <= amount RETURNING amount - refunded`,
		req.Body.Payment, req.Body.Amount).Scan(&r.Remaining)
	if errors.Is(err, pgx.ErrNoRows) {
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM payments WHERE id = $1)`, req.Body.Payment).Scan(&exists); err != nil {
			return Refund{}, fmt.Errorf("look up payment %s: %w", req.Body.Payment, err)
		}
		if !exists {
			return Refund{}, fmt.Errorf("%w %q", ErrUnknownPayment, req.Body.Payment)
		}
		return Refund{}, ErrRefundTooLarge
	}
	if err != nil {
		return Refund{}, fmt.Errorf("refund payment %s: %w", req.Body.Payment, err)
	}
	err = tx.QueryRow(ctx, `INSERT INTO refunds (client, payment, amount) VALUES ($1, $2, $3) RETURNING id`,
		req.Client, req.Body.Payment, req.Body.Amount).Scan(&r.ID)
	if err != nil {
		return Refund{}, fmt.Errorf("record refund: %w", err)
	}
	return r, nil
}
