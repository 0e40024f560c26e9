package billing_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/examples/billing"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemtest"
)

// ExampleChargeIdem_Check is the start-up of a service that calls a wrapper
// from an HTTP handler. A broker adapter would call Check when it starts;
// here the service checks the wrapper's tables before it serves. A missing
// migration then stops the service at once, naming the file to apply. It
// does not fail the first request with a retryable error instead.
// TestChargeServerChecksAtStartUp runs newChargeServer.
func ExampleChargeIdem_Check() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	handler, err := newChargeServer(ctx, pool, &billing.Service{})
	if err != nil {
		// idem: consumer billing.charge: table idem_billing_charge does not
		// exist: apply migrations/00003_idem_billing_charge.sql
		log.Fatal(err)
	}
	log.Fatal(http.ListenAndServe("localhost:8080", handler))
}

// newChargeServer checks the tables of the charge wrapper, then returns the
// HTTP handler that charges the order in each request's body.
func newChargeServer(ctx context.Context, pool *pgxpool.Pool, svc *billing.Service) (http.Handler, error) {
	charge := billing.NewChargeIdem(pool, svc)
	if err := charge.Check(ctx); err != nil {
		return nil, err
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var msg billing.OrderPlaced
		if err := json.NewDecoder(r.Body).Decode(&msg); err != nil {
			http.Error(w, "the body is not an order", http.StatusBadRequest)
			return
		}
		receipt, _, err := charge.Handle(r.Context(), msg)
		if err != nil {
			http.Error(w, "the charge failed", http.StatusInternalServerError)
			return
		}
		_ = json.NewEncoder(w).Encode(receipt)
	}), nil
}

// TestChargeServerChecksAtStartUp runs the example's start-up in three
// schemas. Without the billing migrations, and without the outbox's, it
// refuses to start, naming the migration to apply. With them all, it serves
// a charge.
func TestChargeServerChecksAtStartUp(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name       string
		migrations fs.FS
		want       string
	}{
		{"none", nil, "idem: consumer billing.charge: table idem_billing_charge does not exist: apply migrations/00003_idem_billing_charge.sql"},
		{"without_the_outbox", upTo(t, billing.Migrations(), "00007"), "idem: consumer billing.charge: table idem_outbox does not exist: apply migrations/00008_idem_outbox.sql"},
	} {
		t.Run(c.name, func(t *testing.T) {
			db := idemtest.New(t, c.migrations)
			_, err := newChargeServer(ctx, db.Pool, &billing.Service{})
			if !errors.Is(err, idem.ErrNotMigrated) || err.Error() != c.want {
				t.Fatalf("start-up: %v\nwant: %s", err, c.want)
			}
		})
	}

	db := newDB(t)
	handler, err := newChargeServer(ctx, db.Pool, &billing.Service{})
	if err != nil {
		t.Fatalf("start-up with the migrations applied: %v", err)
	}
	body := `{"order_id": "ord-1", "account_id": "acc-1", "amount_cents": 250}`
	rec := httptest.NewRecorder()
	handler.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/charges", strings.NewReader(body)))
	if rec.Code != http.StatusOK || !bytes.Contains(rec.Body.Bytes(), []byte(`"balance_cents":750`)) {
		t.Fatalf("POST /charges: %d %s", rec.Code, rec.Body)
	}
}

// TestWrappersCheck: every wrapper of the package passes its Check with the
// package's migrations applied, and names its own migration without them.
func TestWrappersCheck(t *testing.T) {
	ctx := context.Background()
	migrated, bare := newDB(t), idemtest.New(t, nil)
	for _, c := range []struct {
		name  string
		check func(idem.DB) error
		want  string
	}{
		{"Charge", func(db idem.DB) error { return billing.NewChargeIdem(db, &billing.Service{}).Check(ctx) }, "apply migrations/00003_idem_billing_charge.sql"},
		{"BookPayment", func(db idem.DB) error { return billing.NewBookPaymentIdem(db, &billing.Service{}).Check(ctx) }, "apply migrations/00005_idem_billing_payment.sql"},
		{"OpenAccount", func(db idem.DB) error { return billing.NewOpenAccountIdem(db).Check(ctx) }, "apply migrations/00004_idem_billing_open_account.sql"},
	} {
		if err := c.check(migrated.Pool); err != nil {
			t.Errorf("%s: Check with the migrations applied: %v", c.name, err)
		}
		if err := c.check(bare.Pool); !errors.Is(err, idem.ErrNotMigrated) || !strings.HasSuffix(err.Error(), c.want) {
			t.Errorf("%s: Check without the migrations: %v; want idem.ErrNotMigrated ending %q", c.name, err, c.want)
		}
	}
}

// upTo returns the migrations of fsys whose names sort before the version
// after last (the five digits of a migration's name).
func upTo(t *testing.T, fsys fs.FS, last string) fs.FS {
	t.Helper()
	names, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		t.Fatal(err)
	}
	sub := fstest.MapFS{}
	for _, name := range names {
		if name[:len(last)] > last {
			continue
		}
		data, err := fs.ReadFile(fsys, name)
		if err != nil {
			t.Fatal(err)
		}
		sub[name] = &fstest.MapFile{Data: data}
	}
	return sub
}
