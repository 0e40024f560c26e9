package inventory

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/idemgen/idemgen/idem/idemtest"
)

// The fixtures of the generated tests in idem_gen_test.go. Each returns a
// message its handler processes and counts the handler's business effect, so
// that every scenario proves the effect happened exactly once.

func receiveGoodsFixture(t testing.TB, db *idemtest.DB) idemtest.Fixture[idemtest.NoReceiver, CloudEvent] {
	data, err := json.Marshal(GoodsReceived{SKU: idemtest.UniqueString[string](), Quantity: 5})
	if err != nil {
		t.Fatal(err)
	}
	return idemtest.Fixture[idemtest.NoReceiver, CloudEvent]{
		Message: CloudEvent{
			SpecVersion: "1.0", Type: "com.example.goods.received",
			Source: "/scanners/" + idemtest.UniqueString[string](), ID: idemtest.UniqueString[string](), Data: data,
		},
		Variant: func(ev CloudEvent) CloudEvent {
			ev.Time = "2026-01-01T00:00:00Z"
			return ev
		},
		Effect: func(ctx context.Context, db *idemtest.DB, ev CloudEvent) (int, error) {
			return count(ctx, db, `SELECT count(*) FROM movements WHERE reason = $1`, "received "+ev.Source+"/"+ev.ID)
		},
	}
}

// bookReturnFixture's return has no RMA number: the generated tests prove
// the key with a NULL part.
func bookReturnFixture(t testing.TB, db *idemtest.DB) idemtest.Fixture[idemtest.NoReceiver, ReturnReceived] {
	return idemtest.Fixture[idemtest.NoReceiver, ReturnReceived]{
		Message: ReturnReceived{OrderID: idemtest.UniqueString[string](), SKU: idemtest.UniqueString[string](), Quantity: 1},
		Variant: func(msg ReturnReceived) ReturnReceived {
			msg.Quantity++
			return msg
		},
		Effect: func(ctx context.Context, db *idemtest.DB, msg ReturnReceived) (int, error) {
			return count(ctx, db, `SELECT count(*) FROM movements WHERE reason = $1`, "return of "+msg.OrderID)
		},
	}
}

func applyCountFixture(t testing.TB, db *idemtest.DB) idemtest.Fixture[idemtest.NoReceiver, StockCounted] {
	return idemtest.Fixture[idemtest.NoReceiver, StockCounted]{
		Message: StockCounted{CountID: idemtest.UniqueUUID[[16]byte](), SKU: idemtest.UniqueString[string](), Seq: 1, OnHand: 7},
		Variant: func(msg StockCounted) StockCounted {
			msg.OnHand++
			return msg
		},
		Effect: func(ctx context.Context, db *idemtest.DB, msg StockCounted) (int, error) {
			return count(ctx, db, `SELECT count(*) FROM stock WHERE sku = $1 AND counted_seq = $2`, msg.SKU, msg.Seq)
		},
	}
}

func count(ctx context.Context, db *idemtest.DB, sql string, args ...any) (int, error) {
	var n int
	err := db.Pool.QueryRow(ctx, sql, args...).Scan(&n)
	return n, err
}
