// Package shipping is a shipping service whose handlers write their business
// rows through sqlc-generated queries (package queries, from queries.sql):
// queries.New(tx) on the pgx.Tx the idemgen wrapper hands them runs every
// query in the inbox's transaction, and the outbox sits beside them. What
// sqlc and idemgen generate is committed; go generate regenerates both.
package shipping

//go:generate go run github.com/sqlc-dev/sqlc/cmd/sqlc@v1.31.1 generate
//go:generate go run github.com/idemgen/idemgen/cmd/idemgen -migrations migrations .

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/idemgen/idemgen/examples/shipping/queries"
	"github.com/idemgen/idemgen/idem"
)

// OrderPaid is published by billing once an order is paid for: ship it.
type OrderPaid struct {
	OrderID string   `json:"order_id"`
	Address string   `json:"address"`
	Parcels []Parcel `json:"parcels"`
}

// Parcel is one box of an order.
type Parcel struct {
	WeightG int32 `json:"weight_g"`
}

// Shipment is what Ship returns, and what every redelivery of the order gets
// back.
type Shipment struct {
	ShipmentID int64 `json:"shipment_id"`
}

// ShipmentCreatedDestination is where Ship publishes ShipmentCreated.
const ShipmentCreatedDestination = "shipping.shipment-created"

// ShipmentCreated tells the carrier integration to pick the parcels up.
type ShipmentCreated struct {
	OrderID    string `json:"order_id"`
	ShipmentID int64  `json:"shipment_id"`
	Parcels    int    `json:"parcels"`
}

// ErrNoParcels is Ship's error for an order without parcels: nothing to ship.
var ErrNoParcels = errors.New("shipping: the order has no parcels")

// Service is the shipping service's handlers.
type Service struct{}

// Ship creates the order's shipment and its parcels through the sqlc
// queries on the inbox's transaction, and publishes ShipmentCreated in the
// same transaction.
//
//idem:handler consumer=shipping.ship key=OrderID fixture=shipFixture
func (s *Service) Ship(ctx context.Context, tx pgx.Tx, out *idem.Outbox, msg OrderPaid) (Shipment, error) {
	if len(msg.Parcels) == 0 {
		return Shipment{}, ErrNoParcels
	}
	q := queries.New(tx)
	row, err := q.CreateShipment(ctx, queries.CreateShipmentParams{OrderID: msg.OrderID, Address: msg.Address, Parcels: int32(len(msg.Parcels))})
	if err != nil {
		return Shipment{}, fmt.Errorf("create the shipment of order %s: %w", msg.OrderID, err)
	}
	for i, p := range msg.Parcels {
		if err := q.AddParcel(ctx, queries.AddParcelParams{ShipmentID: row.ID, Seq: int32(i + 1), WeightG: p.WeightG}); err != nil {
			return Shipment{}, fmt.Errorf("add parcel %d of order %s: %w", i+1, msg.OrderID, err)
		}
	}
	created := ShipmentCreated{OrderID: msg.OrderID, ShipmentID: row.ID, Parcels: len(msg.Parcels)}
	if err := out.Publish(ShipmentCreatedDestination, created); err != nil {
		return Shipment{}, err
	}
	return Shipment{ShipmentID: row.ID}, nil
}

// CarrierDelivered is the carrier's notice that a shipment arrived; the
// carrier's reference identifies the notice.
type CarrierDelivered struct {
	CarrierRef  string    `json:"carrier_ref"`
	OrderID     string    `json:"order_id"`
	DeliveredAt time.Time `json:"delivered_at"`
}

// ErrUnknownShipment is RecordDelivery's error for a notice about an order
// that has no shipment (yet): the broker retries it later.
var ErrUnknownShipment = errors.New("shipping: no shipment for the order")

// RecordDelivery records the delivery of the order's shipment, once per
// carrier notice, through the sqlc query on the inbox's transaction.
//
//idem:handler consumer=shipping.delivered key=CarrierRef fixture=deliveredFixture
func (s *Service) RecordDelivery(ctx context.Context, tx pgx.Tx, msg CarrierDelivered) error {
	n, err := queries.New(tx).RecordDelivery(ctx, queries.RecordDeliveryParams{
		CarrierRef:  msg.CarrierRef,
		DeliveredAt: pgtype.Timestamptz{Time: msg.DeliveredAt, Valid: true},
		OrderID:     msg.OrderID,
	})
	if err != nil {
		return fmt.Errorf("record the delivery of order %s: %w", msg.OrderID, err)
	}
	if n == 0 {
		return fmt.Errorf("%w %s", ErrUnknownShipment, msg.OrderID)
	}
	return nil
}
