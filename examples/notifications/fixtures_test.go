package notifications

import (
	"context"
	"testing"

	"github.com/idemgen/idemgen/examples/billing"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemtest"
)

// notifyFixture is the fixture of the generated tests in idem_gen_test.go
// (fixture= of NotifyChargeCompleted's directive): a ChargeCompleted envelope
// with a unique message id and order, and the count of its notifications, so
// that every scenario proves the notification was recorded exactly once.
func notifyFixture(t testing.TB, db *idemtest.DB) idemtest.Fixture[idemtest.NoReceiver, idem.Message[billing.ChargeCompleted]] {
	return idemtest.Fixture[idemtest.NoReceiver, idem.Message[billing.ChargeCompleted]]{
		Message: idem.Message[billing.ChargeCompleted]{
			ID: idemtest.UniqueString[string](),
			Body: billing.ChargeCompleted{OrderID: idemtest.UniqueString[string](), AccountID: "acc-1",
				ChargeID: 1, AmountCents: 1200, BalanceCents: 3800},
		},
		Variant: func(msg idem.Message[billing.ChargeCompleted]) idem.Message[billing.ChargeCompleted] {
			msg.Body.AmountCents++
			return msg
		},
		Effect: func(ctx context.Context, db *idemtest.DB, msg idem.Message[billing.ChargeCompleted]) (int, error) {
			var n int
			err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM notifications WHERE order_id = $1`, msg.Body.OrderID).Scan(&n)
			return n, err
		},
		Conflict: func(ctx context.Context, db *idemtest.DB, msg idem.Message[billing.ChargeCompleted]) error {
			// The order was notified through another path: the handler's
			// INSERT violates notifications_order_id_key.
			_, err := db.Pool.Exec(ctx, `INSERT INTO notifications (message_id, order_id, account_id, text) VALUES ('other', $1, $2, 'other')`,
				msg.Body.OrderID, msg.Body.AccountID)
			return err
		},
	}
}
