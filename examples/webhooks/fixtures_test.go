package webhooks

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stripe/stripe-go/v82"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemtest"
)

// The fixtures of the generated tests in idem_gen_test.go, named by the
// fixture= option of each handler's directive. Each is called once per
// scenario with the scenario's fresh schema: it seeds what the handler needs,
// returns a message the handler processes, and counts the handler's business
// effect, so that every scenario proves the effect happened exactly once.
// Neither supplies a Variant: the generated one changes a field of the
// event, or of the request's Body.

func recordEventFixture(t testing.TB, db *idemtest.DB) idemtest.Fixture[*Service, stripe.Event] {
	return idemtest.Fixture[*Service, stripe.Event]{
		Receiver: &Service{},
		Message:  paymentEvent(idemtest.UniqueString[string](), idemtest.UniqueString[string](), 1200),
		Effect: func(ctx context.Context, db *idemtest.DB, ev stripe.Event) (int, error) {
			return count(ctx, db, `SELECT count(*) FROM payments WHERE event = $1`, ev.ID)
		},
		Conflict: func(ctx context.Context, db *idemtest.DB, ev stripe.Event) error {
			// The payment was booked from another event: the handler's
			// INSERT violates payments_pkey.
			_, err := db.Pool.Exec(ctx, `INSERT INTO payments (id, event, amount) VALUES ($1, 'evt_other', 1)`, paymentOf(t, ev))
			return err
		},
	}
}

func createRefundFixture(t testing.TB, db *idemtest.DB) idemtest.Fixture[*Service, idem.Request[RefundParams]] {
	payment := idemtest.UniqueString[string]()
	if _, err := db.Pool.Exec(context.Background(), `INSERT INTO payments (id, event, amount) VALUES ($1, 'evt_seed', 1000)`, payment); err != nil {
		t.Fatalf("seed payment: %v", err)
	}
	return idemtest.Fixture[*Service, idem.Request[RefundParams]]{
		Receiver: &Service{},
		Message: idem.Request[RefundParams]{
			Client: "acct_" + idemtest.UniqueString[string](),
			Key:    idemtest.UniqueString[string](),
			Body:   RefundParams{Payment: payment, Amount: 300},
		},
		Effect: func(ctx context.Context, db *idemtest.DB, req idem.Request[RefundParams]) (int, error) {
			return count(ctx, db, `SELECT count(*) FROM refunds WHERE payment = $1`, req.Body.Payment)
		},
	}
}

// paymentEvent is a payment_intent.succeeded event as Stripe sends it.
func paymentEvent(id, intent string, amount int64) stripe.Event {
	raw := fmt.Sprintf(`{"id":%q,"object":"payment_intent","amount":%d,"currency":"eur","status":"succeeded"}`, intent, amount)
	return stripe.Event{
		ID:         id,
		Object:     "event",
		APIVersion: stripe.APIVersion,
		Type:       PaymentSucceeded,
		Created:    1767225600,
		Data:       &stripe.EventData{Raw: []byte(raw)},
	}
}

// paymentOf is the payment intent id of a paymentEvent.
func paymentOf(t testing.TB, ev stripe.Event) string {
	var intent struct{ ID string }
	if err := json.Unmarshal(ev.Data.Raw, &intent); err != nil {
		t.Fatalf("event %s: %v", ev.ID, err)
	}
	return intent.ID
}

func count(ctx context.Context, db *idemtest.DB, sql string, args ...any) (int, error) {
	var n int
	err := db.Pool.QueryRow(ctx, sql, args...).Scan(&n)
	return n, err
}
