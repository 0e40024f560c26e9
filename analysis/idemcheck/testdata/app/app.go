package app

import (
	"context"

	"github.com/jackc/pgx/v5"
)

type Shipment struct {
	OrderID        string
	TrackingNumber string
	Attempt        int
}

// Ship lost its pgx.Tx: reported at the func keyword.
//
//idem:handler consumer=shop.shipment key=OrderID
func Ship(ctx context.Context, msg Shipment) error { return nil } // want `handler Ship takes no pgx.Tx`

// Track's key names a field that does not exist; Count's, one whose name
// says it changes between deliveries (a warning of key hygiene). A trailing
// // comment on a directive line is not part of the directive.
//
//idem:handler consumer=shop.track key=OrderID,TrackingNum // want `key field TrackingNum: message type Shipment has no field TrackingNum`
func Track(ctx context.Context, tx pgx.Tx, msg Shipment) error { return nil }

//idem:handler consumer=shop.count key=OrderID,Attempt // want `warning: key field Attempt looks like a delivery attempt counter or redelivery flag`
func Count(ctx context.Context, tx pgx.Tx, msg Shipment) error { return nil }

//idem:handler consumer=shop.pay key=OrderID mode=external lease=5m retain=1m // want `retain=1m is shorter than lease=5m: a claim may run for its whole lease`
func Pay(ctx context.Context, msg Shipment) error { return nil }

// Fine is fine: nothing is reported.
//
//idem:handler consumer=shop.fine key=OrderID
func Fine(ctx context.Context, tx pgx.Tx, msg Shipment) error { return nil }

// A handler in the doc comment of a type is misplaced.
//
//idem:handler consumer=shop.misplaced key=OrderID // want `//idem:handler must be in the doc comment of a function or method`
type Misplaced struct{}
