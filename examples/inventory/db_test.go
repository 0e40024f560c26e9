package inventory_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/examples/inventory"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemtest"
)

// tenantDB is a user's own idem.DB: it takes each connection from the pool
// of the tenant the context names, as a service with a database per tenant
// would. (A map, so == cannot compare it: the runtime must not need to.)
type tenantDB map[string]*pgxpool.Pool

type tenantKey struct{}

func (d tenantDB) Acquire(ctx context.Context) (*pgxpool.Conn, error) {
	tenant, _ := ctx.Value(tenantKey{}).(string)
	pool, ok := d[tenant]
	if !ok {
		return nil, fmt.Errorf("no pool for tenant %q", tenant)
	}
	return pool.Acquire(ctx)
}

// TestGeneratedConstructorTakesAUserDB: a generated constructor takes any
// idem.DB, not only a *pgxpool.Pool, and the wrapper takes its connections
// through it: deliveries and Purge reach the tenant's pool, and a delivery
// for a tenant without one fails with the DB's error.
func TestGeneratedConstructorTakesAUserDB(t *testing.T) {
	db := idemtest.New(t, inventory.Migrations())
	acme := context.WithValue(context.Background(), tenantKey{}, "acme")
	receive := inventory.NewReceiveGoodsIdem(tenantDB{"acme": db.Pool})
	ev := event("/scanners/dock-9", "7", "sku-db", 4)
	for _, want := range []idem.Outcome{idem.Processed, idem.Duplicate} {
		if _, o, err := receive.Handle(acme, ev); err != nil || o != want {
			t.Fatalf("Handle: %v, %v; want %v", o, err, want)
		}
	}
	other := context.WithValue(context.Background(), tenantKey{}, "other")
	if _, _, err := receive.Handle(other, event("/scanners/dock-9", "8", "sku-db", 1)); err == nil ||
		!strings.Contains(err.Error(), `no pool for tenant "other"`) {
		t.Errorf("Handle for a tenant without a pool: %v, want the DB's error", err)
	}
	if n, err := receive.Purge(acme); err != nil || n != 0 {
		t.Fatalf("Purge: %d, %v; want 0 rows deleted", n, err)
	}
	if got := query(t, db.Pool, `SELECT on_hand FROM stock WHERE sku = 'sku-db'`); got != 4 {
		t.Errorf("on hand %d, want 4", got)
	}
}
