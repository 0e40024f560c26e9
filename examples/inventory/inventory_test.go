package inventory_test

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/examples/inventory"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemtest"
)

func query(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// concurrently runs deliver n times at once on a pool warmed to n
// connections.
func concurrently(t *testing.T, pool *pgxpool.Pool, n int, deliver func(i int)) {
	t.Helper()
	idemtest.Warm(t, pool, n)
	idemtest.AtOnce(n, deliver)
}

func event(source, id, sku string, qty int64) inventory.CloudEvent {
	data, _ := json.Marshal(inventory.GoodsReceived{SKU: sku, Quantity: qty})
	return inventory.CloudEvent{SpecVersion: "1.0", Type: "com.example.goods.received", Source: source, ID: id, Data: data}
}

// TestCloudEventsKeyedBySourceAndID: the same id from two sources is two
// events; the same (source, id) twice is one.
func TestCloudEventsKeyedBySourceAndID(t *testing.T) {
	db := idemtest.New(t, inventory.Migrations())
	ctx := context.Background()
	receive := inventory.NewReceiveGoodsIdem(db.Pool)
	for _, d := range []struct {
		ev   inventory.CloudEvent
		want idem.Outcome
	}{
		{event("/scanners/dock-1", "42", "sku-1", 5), idem.Processed},
		{event("/scanners/dock-1", "42", "sku-1", 5), idem.Duplicate},
		{event("/scanners/dock-2", "42", "sku-1", 3), idem.Processed},
	} {
		if _, o, err := receive.Handle(ctx, d.ev); err != nil || o != d.want {
			t.Fatalf("%s/%s: %v, %v; want %v", d.ev.Source, d.ev.ID, o, err, d.want)
		}
	}
	if got := query(t, db.Pool, `SELECT on_hand FROM stock WHERE sku = 'sku-1'`); got != 8 {
		t.Errorf("on hand %d, want 8", got)
	}
	if _, _, err := receive.Handle(ctx, event("", "43", "sku-1", 1)); !errors.Is(err, idem.ErrInvalidKey) {
		t.Errorf("an event without a source: %v, want ErrInvalidKey", err)
	}
}

// TestReturnsWithAndWithoutRMA: 16 concurrent deliveries of a return without
// RMA number apply it once, and a return of the same order with an RMA number
// is another message.
func TestReturnsWithAndWithoutRMA(t *testing.T) {
	db := idemtest.New(t, inventory.Migrations())
	ctx := context.Background()
	book := inventory.NewBookReturnIdem(db.Pool)

	legacy := inventory.ReturnReceived{OrderID: "o-1", SKU: "sku-2", Quantity: 1}
	var mu sync.Mutex
	outcomes := map[idem.Outcome]int{}
	concurrently(t, db.Pool, 16, func(int) {
		_, o, err := book.Handle(ctx, legacy)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			t.Errorf("Handle: %v", err)
		}
		outcomes[o]++
	})
	if outcomes[idem.Processed] != 1 || outcomes[idem.Duplicate] != 15 {
		t.Fatalf("16 deliveries of (o-1, no RMA): %v", outcomes)
	}

	rma := "RMA-7"
	withRMA := inventory.ReturnReceived{OrderID: "o-1", RMA: &rma, SKU: "sku-2", Quantity: 2}
	for _, want := range []idem.Outcome{idem.Processed, idem.Duplicate} {
		if _, o, err := book.Handle(ctx, withRMA); err != nil || o != want {
			t.Fatalf("(o-1, RMA-7): %v, %v; want %v", o, err, want)
		}
	}
	if got := query(t, db.Pool, `SELECT on_hand FROM stock WHERE sku = 'sku-2'`); got != 3 {
		t.Errorf("on hand %d, want 3 (1 without RMA, 2 with)", got)
	}
	if got := query(t, db.Pool, `SELECT count(*) FROM idem_inventory_return`); got != 2 {
		t.Errorf("%d inbox rows, want 2", got)
	}
}

// TestCountsOutOfOrder delivers 24 counts of one SKU at once, in random
// order: only newer counts apply, so the final stock is the newest count's.
func TestCountsOutOfOrder(t *testing.T) {
	db := idemtest.New(t, inventory.Migrations())
	ctx := context.Background()
	apply := inventory.NewApplyCountIdem(db.Pool, idem.WithClaimWait(10*idem.DefaultClaimWait))
	const n = 24
	order := rand.Perm(n)
	var mu sync.Mutex
	results := map[string]int{}
	concurrently(t, db.Pool, n, func(i int) {
		seq := int64(order[i] + 1)
		o, err := apply.Handle(ctx, inventory.StockCounted{CountID: uuid.New(), SKU: "sku-3", Seq: seq, OnHand: 100 * seq})
		mu.Lock()
		defer mu.Unlock()
		switch {
		case errors.Is(err, idem.ErrStale):
			results["stale"]++
		case err != nil:
			t.Errorf("count %d: %v", seq, err)
		default:
			results[o.String()]++
		}
	})
	if results["processed"]+results["stale"] != n || results["processed"] == 0 {
		t.Errorf("results %v: every count must be applied or stale", results)
	}
	if got := query(t, db.Pool, `SELECT on_hand FROM stock WHERE sku = 'sku-3'`); got != 100*n {
		t.Errorf("on hand %d, want %d (the newest count)", got, 100*n)
	}
	if got := query(t, db.Pool, `SELECT counted_seq FROM stock WHERE sku = 'sku-3'`); got != n {
		t.Errorf("counted seq %d, want %d", got, n)
	}
	// A count older than the applied one, arriving late, is stale.
	if _, err := apply.Handle(ctx, inventory.StockCounted{CountID: uuid.New(), SKU: "sku-3", Seq: 2, OnHand: 1}); !errors.Is(err, idem.ErrStale) {
		t.Errorf("late count: %v, want ErrStale", err)
	}
}

func TestMigrationsGoDownAndUpAgain(t *testing.T) {
	db := idemtest.New(t, inventory.Migrations())
	ctx := context.Background()
	p := db.Migrations(t, inventory.Migrations())
	if _, err := p.DownTo(ctx, 0); err != nil {
		t.Fatalf("down to 0: %v", err)
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatalf("up again: %v", err)
	}
}
