package inventory_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/examples/inventory"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemtest"
)

// countingDB is a user's own wrapper around the pool: it counts the
// connections the generated wrapper takes.
type countingDB struct {
	*pgxpool.Pool
	acquires atomic.Int64
}

func (c *countingDB) Acquire(ctx context.Context) (*pgxpool.Conn, error) {
	c.acquires.Add(1)
	return c.Pool.Acquire(ctx)
}

// TestGeneratedConstructorTakesAUserDB: a generated constructor takes any
// idem.DB, not only a *pgxpool.Pool, and every connection the wrapper uses
// comes through it: one per delivery and one per purge batch.
func TestGeneratedConstructorTakesAUserDB(t *testing.T) {
	db := idemtest.New(t, inventory.Migrations())
	ctx := context.Background()
	counting := &countingDB{Pool: db.Pool}
	receive := inventory.NewReceiveGoodsIdem(counting)
	ev := event("/scanners/dock-9", "7", "sku-db", 4)
	for _, want := range []idem.Outcome{idem.Processed, idem.Duplicate} {
		if _, o, err := receive.Handle(ctx, ev); err != nil || o != want {
			t.Fatalf("Handle: %v, %v; want %v", o, err, want)
		}
	}
	if n, err := receive.Purge(ctx); err != nil || n != 0 {
		t.Fatalf("Purge: %d, %v; want 0 rows deleted", n, err)
	}
	if got := counting.acquires.Load(); got != 3 {
		t.Errorf("the wrapper saw %d acquires, want 3 (two deliveries, one purge batch)", got)
	}
	if got := query(t, db.Pool, `SELECT on_hand FROM stock WHERE sku = 'sku-db'`); got != 4 {
		t.Errorf("on hand %d, want 4", got)
	}
}
