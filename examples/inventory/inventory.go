// Package inventory is a stock service that shows idemgen's key features:
// CloudEvents keyed by source and id, a key with a nullable part, and a
// stale-message guard that keeps only the newest stock count of each SKU.
package inventory

//go:generate go run github.com/idemgen/idemgen/cmd/idemgen -migrations migrations .

import (
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// CloudEvent is a CloudEvents 1.0 event in structured JSON mode. Its source
// and id together identify it: producers guarantee that pair is unique, so
// it is the deduplication key.
type CloudEvent struct {
	SpecVersion string          `json:"specversion"`
	Type        string          `json:"type"`
	Source      string          `json:"source"`
	ID          string          `json:"id"`
	Time        string          `json:"time,omitempty"`
	Data        json.RawMessage `json:"data"`
}

// GoodsReceived is the data of a "com.example.goods.received" event.
type GoodsReceived struct {
	SKU      string `json:"sku"`
	Quantity int64  `json:"quantity"`
}

// Level is a SKU's stock after a change.
type Level struct {
	SKU    string `json:"sku"`
	OnHand int64  `json:"on_hand"`
}

// ReceiveGoods books goods reported by a warehouse scanner.
//
//idem:handler consumer=inventory.goods-received key=Source,ID fixture=receiveGoodsFixture
func ReceiveGoods(ctx context.Context, tx pgx.Tx, ev CloudEvent) (Level, error) {
	var data GoodsReceived
	if err := json.Unmarshal(ev.Data, &data); err != nil {
		return Level{}, fmt.Errorf("event %s from %s: %w", ev.ID, ev.Source, err)
	}
	return adjust(ctx, tx, data.SKU, data.Quantity, "received "+ev.Source+"/"+ev.ID)
}

// ReturnReceived is a customer return. Returns booked before the RMA system
// existed have no RMA number: (order, no RMA) is one message, (order, RMA-7)
// another.
type ReturnReceived struct {
	OrderID  string  `json:"order_id"`
	RMA      *string `json:"rma,omitempty"`
	SKU      string  `json:"sku"`
	Quantity int64   `json:"quantity"`
}

// BookReturn puts returned goods back into stock.
//
//idem:handler consumer=inventory.return key=OrderID,RMA fixture=bookReturnFixture
func BookReturn(ctx context.Context, tx pgx.Tx, msg ReturnReceived) (Level, error) {
	return adjust(ctx, tx, msg.SKU, msg.Quantity, "return of "+msg.OrderID)
}

// StockCounted is the result of a physical count of a SKU. Counts are
// numbered per SKU; a count that arrives after a newer one is obsolete and
// must not overwrite it.
type StockCounted struct {
	CountID uuid.UUID `json:"count_id"`
	SKU     string    `json:"sku"`
	Seq     int64     `json:"seq"`
	OnHand  int64     `json:"on_hand"`
}

// ApplyCount sets a SKU's stock to the counted quantity.
//
//idem:handler consumer=inventory.count key=CountID order=SKU version=Seq fixture=applyCountFixture
func ApplyCount(ctx context.Context, tx pgx.Tx, msg StockCounted) error {
	_, err := tx.Exec(ctx, `INSERT INTO stock (sku, on_hand, counted_seq) VALUES ($1, $2, $3)
		ON CONFLICT (sku) DO UPDATE SET on_hand = EXCLUDED.on_hand, counted_seq = EXCLUDED.counted_seq`,
		msg.SKU, msg.OnHand, msg.Seq)
	if err != nil {
		return fmt.Errorf("apply count %d of %s: %w", msg.Seq, msg.SKU, err)
	}
	return nil
}

// adjust changes a SKU's stock and records the movement.
func adjust(ctx context.Context, tx pgx.Tx, sku string, delta int64, reason string) (Level, error) {
	l := Level{SKU: sku}
	err := tx.QueryRow(ctx, `INSERT INTO stock (sku, on_hand) VALUES ($1, $2)
		ON CONFLICT (sku) DO UPDATE SET on_hand = stock.on_hand + EXCLUDED.on_hand RETURNING on_hand`, sku, delta).Scan(&l.OnHand)
	if err != nil {
		return Level{}, fmt.Errorf("adjust %s: %w", sku, err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO movements (sku, delta, reason) VALUES ($1, $2, $3)`, sku, delta, reason); err != nil {
		return Level{}, fmt.Errorf("record movement of %s: %w", sku, err)
	}
	return l, nil
}

//go:embed migrations/*.sql
var migrations embed.FS

// Migrations returns the service's goose migrations, its own and idemgen's.
func Migrations() fs.FS {
	sub, err := fs.Sub(migrations, "migrations")
	if err != nil {
		panic(err) // the embedded folder is fixed at build time
	}
	return sub
}
