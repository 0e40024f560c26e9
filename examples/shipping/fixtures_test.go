package shipping

import (
	"context"
	"testing"
	"time"

	"github.com/idemgen/idemgen/examples/shipping/queries"
	"github.com/idemgen/idemgen/idem/idemtest"
)

// The fixtures of the generated tests in idem_gen_test.go: each seeds what
// its handler needs, returns a message, and counts the handler's business
// effect through the same sqlc queries, so that every scenario proves the
// effect happened exactly once.

func shipFixture(t testing.TB, db *idemtest.DB) idemtest.Fixture[*Service, OrderPaid] {
	return idemtest.Fixture[*Service, OrderPaid]{
		Receiver: &Service{},
		Message:  OrderPaid{OrderID: idemtest.UniqueString[string](), Address: "1 Quay St", Parcels: []Parcel{{WeightG: 900}, {WeightG: 250}}},
		Variant: func(msg OrderPaid) OrderPaid {
			msg.Address = "2 Quay St"
			return msg
		},
		Effect: func(ctx context.Context, db *idemtest.DB, msg OrderPaid) (int, error) {
			n, err := queries.New(db.Pool).CountShipments(ctx, msg.OrderID)
			return int(n), err
		},
		Conflict: func(ctx context.Context, db *idemtest.DB, msg OrderPaid) error {
			// The order was shipped by another path: the handler's INSERT
			// violates shipments_order_id_key.
			_, err := queries.New(db.Pool).CreateShipment(ctx, queries.CreateShipmentParams{OrderID: msg.OrderID, Address: "elsewhere", Parcels: 1})
			return err
		},
	}
}

func deliveredFixture(t testing.TB, db *idemtest.DB) idemtest.Fixture[*Service, CarrierDelivered] {
	order := idemtest.UniqueString[string]()
	if _, err := queries.New(db.Pool).CreateShipment(context.Background(), queries.CreateShipmentParams{OrderID: order, Address: "1 Quay St", Parcels: 1}); err != nil {
		t.Fatal(err)
	}
	return idemtest.Fixture[*Service, CarrierDelivered]{
		Receiver: &Service{},
		Message:  CarrierDelivered{CarrierRef: idemtest.UniqueString[string](), OrderID: order, DeliveredAt: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)},
		Variant: func(msg CarrierDelivered) CarrierDelivered {
			msg.DeliveredAt = msg.DeliveredAt.Add(time.Hour)
			return msg
		},
		Effect: func(ctx context.Context, db *idemtest.DB, msg CarrierDelivered) (int, error) {
			n, err := queries.New(db.Pool).CountDeliveries(ctx, msg.OrderID)
			return int(n), err
		},
	}
}
