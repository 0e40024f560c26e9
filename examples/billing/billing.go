// Package billing is a small billing service whose message handlers idemgen
// makes idempotent: each runs at most once per message key, in one
// transaction with the row that records the key.
package billing

//go:generate go run github.com/idemgen/idemgen/cmd/idemgen -migrations migrations .

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/idem"
)

// OrderPlaced is published by the order service when a customer checks out.
type OrderPlaced struct {
	OrderID     string `json:"order_id"`
	AccountID   string `json:"account_id"`
	AmountCents int64  `json:"amount_cents"`
}

// Receipt is what Charge returns, and what every redelivery of the same order
// gets back.
type Receipt struct {
	ChargeID     int64 `json:"charge_id"`
	BalanceCents int64 `json:"balance_cents"`
}

// ChargeCompleted is what Charge publishes, to ChargeCompletedDestination,
// once an order's charge committed. Its message id (idem.OutgoingMessageID of
// the consumer billing.charge and the order id) is the same for every run of
// Charge for the order, so the next consumer can key on it.
type ChargeCompleted struct {
	OrderID      string `json:"order_id"`
	AccountID    string `json:"account_id"`
	ChargeID     int64  `json:"charge_id"`
	AmountCents  int64  `json:"amount_cents"`
	BalanceCents int64  `json:"balance_cents"`
}

// ChargeCompletedDestination is where ChargeCompleted messages go: the
// exchange and routing key, subject or topic the relay's publisher reads.
const ChargeCompletedDestination = "billing.charge-completed"

// PaymentReceived is relayed from a payment provider's webhook. The provider's
// payment id is unique per provider only, so both make up the key.
type PaymentReceived struct {
	Provider    string `json:"provider"`
	PaymentID   string `json:"payment_id"`
	AccountID   string `json:"account_id"`
	AmountCents int64  `json:"amount_cents"`
}

// OpenAccountRequested asks for a new account; the client picks RequestID
// once and sends it with every retry.
type OpenAccountRequested struct {
	RequestID uuid.UUID `json:"request_id"`
	AccountID string    `json:"account_id"`
	Owner     string    `json:"owner"`
}

// Account is the account OpenAccount created.
type Account struct {
	ID    string `json:"id"`
	Owner string `json:"owner"`
}

// ErrInsufficientFunds is returned by Charge when the account would go below
// its credit limit; the charge is rolled back.
var ErrInsufficientFunds = errors.New("billing: insufficient funds")

// ErrUnknownAccount is returned for a message about an account that does not
// exist.
var ErrUnknownAccount = errors.New("billing: unknown account")

// Service charges accounts for orders and books incoming payments.
type Service struct {
	// CreditLimitCents is how far below zero a balance may go.
	CreditLimitCents int64
}

// Charge records the order's charge, debits the account and publishes
// ChargeCompleted through the outbox: the message is written in the same
// transaction, so it exists exactly when the charge does, and a relay.Relay
// delivers it.
//
//idem:handler consumer=billing.charge key=OrderID fixture=chargeFixture
func (s *Service) Charge(ctx context.Context, tx pgx.Tx, out *idem.Outbox, msg OrderPlaced) (Receipt, error) {
	var r Receipt
	err := tx.QueryRow(ctx,
		`INSERT INTO charges (order_id, account_id, amount_cents) VALUES ($1, $2, $3) RETURNING id`,
		msg.OrderID, msg.AccountID, msg.AmountCents).Scan(&r.ChargeID)
	if err != nil {
		return Receipt{}, fmt.Errorf("record charge: %w", err)
	}
	err = tx.QueryRow(ctx,
		`UPDATE accounts SET balance_cents = balance_cents - $2 WHERE id = $1 RETURNING balance_cents`,
		msg.AccountID, msg.AmountCents).Scan(&r.BalanceCents)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return Receipt{}, fmt.Errorf("%w %q", ErrUnknownAccount, msg.AccountID)
	case err != nil:
		return Receipt{}, fmt.Errorf("debit account: %w", err)
	case r.BalanceCents < -s.CreditLimitCents:
		return Receipt{}, ErrInsufficientFunds
	}
	completed := ChargeCompleted{OrderID: msg.OrderID, AccountID: msg.AccountID, ChargeID: r.ChargeID, AmountCents: msg.AmountCents, BalanceCents: r.BalanceCents}
	if err := out.Publish(ChargeCompletedDestination, completed, idem.WithOrderingKey(msg.AccountID)); err != nil {
		return Receipt{}, fmt.Errorf("publish charge completed: %w", err)
	}
	return r, nil
}

// BookPayment records an incoming payment and credits the account.
//
//idem:handler consumer=billing.payment key=Provider,PaymentID retain=2160h fixture=bookPaymentFixture
func (s *Service) BookPayment(ctx context.Context, tx pgx.Tx, msg *PaymentReceived) error {
	if _, err := tx.Exec(ctx,
		`INSERT INTO payments (provider, payment_id, account_id, amount_cents) VALUES ($1, $2, $3, $4)`,
		msg.Provider, msg.PaymentID, msg.AccountID, msg.AmountCents); err != nil {
		return fmt.Errorf("record payment: %w", err)
	}
	tag, err := tx.Exec(ctx,
		`UPDATE accounts SET balance_cents = balance_cents + $2 WHERE id = $1`, msg.AccountID, msg.AmountCents)
	if err != nil {
		return fmt.Errorf("credit account: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w %q", ErrUnknownAccount, msg.AccountID)
	}
	return nil
}

// OpenAccount creates an account. It is a plain function: a handler needs no
// receiver.
//
//idem:handler consumer=billing.open-account key=RequestID fixture=openAccountFixture
func OpenAccount(ctx context.Context, tx pgx.Tx, msg OpenAccountRequested) (Account, error) {
	if _, err := tx.Exec(ctx, `INSERT INTO accounts (id, owner) VALUES ($1, $2)`, msg.AccountID, msg.Owner); err != nil {
		return Account{}, fmt.Errorf("open account: %w", err)
	}
	return Account{ID: msg.AccountID, Owner: msg.Owner}, nil
}
