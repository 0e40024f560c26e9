package payments_test

import (
	"context"
	"errors"
	"testing"

	"github.com/idemgen/idemgen/examples/payments"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemtest"
)

// TestWrapperCheck: Charge's wrapper (mode=external) passes its Check with
// the package's migrations, and names the one that creates its claims table
// without them.
func TestWrapperCheck(t *testing.T) {
	ctx := context.Background()
	if err := payments.NewChargeIdem(idemtest.New(t, payments.Migrations()).Pool, &payments.Service{}).Check(ctx); err != nil {
		t.Errorf("Check with the migrations applied: %v", err)
	}
	const want = "idem: consumer payments.charge: table idem_payments_charge does not exist: apply migrations/00001_idem_payments_charge.sql"
	if err := payments.NewChargeIdem(idemtest.New(t, nil).Pool, &payments.Service{}).Check(ctx); !errors.Is(err, idem.ErrNotMigrated) || err.Error() != want {
		t.Errorf("Check without the migrations: %v\nwant: %s", err, want)
	}
}
