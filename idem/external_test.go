package idem_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemtest"
)

// The mode=external tests: a payment consumer whose handler charges through
// a provider double (idemtest.Provider) with the key idem.KeyFrom gives it,
// on the hand-written table of idemtest.TextKeyExternal.

type payment struct {
	ID     string `json:"id"`
	Amount int64  `json:"amount"`
}

type charged struct {
	ChargeID string `json:"charge_id"`
}

const payConsumer = "test.pay"

var payTable, payMigration = idemtest.TextKeyExternal(payConsumer, "idem_test_pay", "ID",
	func(msg payment) string { return msg.ID })

// payDB is a fresh schema with the payment consumer's table.
func payDB(t testing.TB) *idemtest.DB {
	t.Helper()
	return idemtest.New(t, fstest.MapFS{"00001_pay.sql": &fstest.MapFile{Data: []byte(payMigration)}})
}

// charge is the handler: it charges the amount through the provider with the
// delivery's idempotency key.
func charge(p *idemtest.Provider) func(ctx context.Context, msg payment) (charged, error) {
	return func(ctx context.Context, msg payment) (charged, error) {
		key, ok := idem.KeyFrom(ctx)
		if !ok {
			return charged{}, errors.New("no idempotency key in the handler's context")
		}
		id, err := p.Call(ctx, key, []byte(fmt.Sprint(msg.Amount)))
		return charged{ChargeID: id}, err
	}
}

// payRow is the payment consumer's row of a key.
type payRow struct {
	Status   string
	Fence    int64
	Attempts int
	Result   *string
}

func readPayRow(t testing.TB, pool *pgxpool.Pool, id string) payRow {
	t.Helper()
	var r payRow
	if err := pool.QueryRow(context.Background(), `SELECT status, fence, attempts, result::text FROM idem_test_pay WHERE key_id = $1`, id).
		Scan(&r.Status, &r.Fence, &r.Attempts, &r.Result); err != nil {
		t.Fatalf("read the row of %s: %v", id, err)
	}
	return r
}

func (r payRow) String() string {
	res := "NULL"
	if r.Result != nil {
		res = *r.Result
	}
	return fmt.Sprintf("status=%s fence=%d attempts=%d result=%s", r.Status, r.Fence, r.Attempts, res)
}

// TestExternalProcessedThenDuplicate: a first delivery calls the provider
// with the key of ExternalKey and stores the result done; the redelivery is a
// Duplicate with that result and does not call the handler.
func TestExternalProcessedThenDuplicate(t *testing.T) {
	db := payDB(t)
	p := idemtest.NewProvider()
	x := idem.NewExternalInbox(db.Pool, payTable, charge(p))
	ctx := context.Background()
	msg := payment{ID: "pay-1", Amount: 500}

	r, o, err := x.Handle(ctx, msg)
	if err != nil || o != idem.Processed || r.ChargeID == "" {
		t.Fatalf("first delivery: %v %v %v; want Processed with a charge", r, o, err)
	}
	r2, o2, err := x.Handle(ctx, msg)
	if err != nil || o2 != idem.Duplicate || r2 != r {
		t.Fatalf("second delivery: %v %v %v; want Duplicate with %v", r2, o2, err, r)
	}
	row := readPayRow(t, db.Pool, msg.ID)
	want := idem.ExternalKey(payConsumer, []any{msg.ID})
	keys := p.Keys()
	t.Logf("row %v; provider calls=%d effects=%d keys=%v", row, p.Calls(), p.Effects(), keys)
	if row.Status != "done" || row.Attempts != 1 || row.Fence != 1 || row.Result == nil || !strings.Contains(*row.Result, r.ChargeID) {
		t.Errorf("row %v; want done, attempts 1, fence 1, the result stored", row)
	}
	if p.Calls() != 1 || p.Effects() != 1 || len(keys) != 1 || keys[0] != want {
		t.Errorf("provider saw %d calls, %d effects, keys %v; want 1 call of key %s", p.Calls(), p.Effects(), keys, want)
	}
	var live *bool
	if err := db.Pool.QueryRow(ctx, `SELECT lease_until IS NOT NULL FROM idem_test_pay WHERE key_id = $1`, msg.ID).Scan(&live); err != nil || *live {
		t.Errorf("lease_until of a done row: set=%v (err %v); want NULL", *live, err)
	}
	if _, _, err := x.Handle(ctx, payment{ID: msg.ID, Amount: 999}); !errors.Is(err, idem.ErrKeyReused) || idem.ActionFor(err) != idem.DeadLetter {
		t.Errorf("same key, other amount: %v; want ErrKeyReused (dead-letter)", err)
	}
	if _, _, err := x.Handle(ctx, payment{Amount: 1}); !errors.Is(err, idem.ErrInvalidKey) {
		t.Errorf("no key: %v; want ErrInvalidKey", err)
	}
	if p.Calls() != 1 {
		t.Errorf("the provider saw %d calls after the reused and the invalid key; want still 1", p.Calls())
	}
}

// resultJSON renders a result for logs.
func resultJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// within fails the test when d is longer than limit.
func within(t testing.TB, what string, d, limit time.Duration) {
	t.Helper()
	if d > limit {
		t.Errorf("%s took %v; want at most %v", what, d, limit)
	}
}
