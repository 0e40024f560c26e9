package catalog

import (
	"context"
	"errors"
	"io/fs"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemtest"
)

// TestWrappersCheck: PlaceOrder's wrapper (mode=entity) passes its Check
// with the package's migrations. Without idemgen's, it names the one that
// adds the fingerprint column to orders. SetPrice's (mode=natural) needs no
// table of idemgen's.
func TestWrappersCheck(t *testing.T) {
	ctx := context.Background()
	own, err := fs.ReadFile(Migrations(), "00001_catalog.sql")
	if err != nil {
		t.Fatal(err)
	}
	migrated := idemtest.New(t, Migrations())
	withoutIdemgen := idemtest.New(t, fstest.MapFS{"00001_catalog.sql": {Data: own}})

	if err := NewPlaceOrderIdem(migrated.Pool, &Service{}).Check(ctx); err != nil {
		t.Errorf("PlaceOrder: Check with the migrations applied: %v", err)
	}
	const want = "idem: consumer catalog.order: table orders: no column idem_fingerprint (bytea): apply migrations/00002_idem_orders_fingerprint.sql"
	if err := NewPlaceOrderIdem(withoutIdemgen.Pool, &Service{}).Check(ctx); !errors.Is(err, idem.ErrNotMigrated) || err.Error() != want {
		t.Errorf("PlaceOrder: Check without idemgen's migration: %v\nwant: %s", err, want)
	}
	const noTable = "table orders does not exist: it is the handler's own table"
	if err := NewPlaceOrderIdem(idemtest.New(t, nil).Pool, &Service{}).Check(ctx); !errors.Is(err, idem.ErrNotMigrated) || !strings.Contains(err.Error(), noTable) {
		t.Errorf("PlaceOrder: Check without any migration: %v; want it to say %q", err, noTable)
	}
	if err := NewSetPriceIdem(withoutIdemgen.Pool, &Service{}).Check(ctx); err != nil {
		t.Errorf("SetPrice: Check: %v", err)
	}
}
