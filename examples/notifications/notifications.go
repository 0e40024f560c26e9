// Package notifications is the consumer at the end of the example's flow:
// it receives billing's ChargeCompleted messages from a broker, each with the
// stable message id the outbox gave it, and records one customer
// notification per message. idemgen makes its handler idempotent on that id,
// so a message the relay or the broker delivers again is a Duplicate and
// notifies nobody twice.
package notifications

//go:generate go run github.com/idemgen/idemgen/cmd/idemgen -migrations migrations .

import (
	"context"
	"embed"
	"fmt"
	"io/fs"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/examples/billing"
	"github.com/idemgen/idemgen/idem"
)

// NotifyChargeCompleted records the notification that tells the account's
// owner their order was charged. It keys on the broker's message id (key=ID):
// the relay sends every ChargeCompleted with the id derived from billing's
// consumer and the order id, the same on every publish of it, which the
// broker adapters put into idem.Message.ID (AMQP message_id, Nats-Msg-Id, the
// Kafka header idem-message-id).
//
//idem:handler consumer=notifications.charge-completed key=ID fixture=notifyFixture
func NotifyChargeCompleted(ctx context.Context, tx pgx.Tx, msg idem.Message[billing.ChargeCompleted]) error {
	c := msg.Body
	text := fmt.Sprintf("Order %s: %d cents charged, balance %d cents.", c.OrderID, c.AmountCents, c.BalanceCents)
	if _, err := tx.Exec(ctx,
		`INSERT INTO notifications (message_id, order_id, account_id, text) VALUES ($1, $2, $3, $4)`,
		msg.ID, c.OrderID, c.AccountID, text); err != nil {
		return fmt.Errorf("record notification: %w", err)
	}
	return nil
}

//go:embed migrations/*.sql
var migrations embed.FS

// Migrations returns the service's goose migrations: its notifications table
// and the inbox table idemgen generated, in one sequence.
func Migrations() fs.FS {
	sub, err := fs.Sub(migrations, "migrations")
	if err != nil {
		panic(err) // the embedded folder is fixed at build time
	}
	return sub
}
