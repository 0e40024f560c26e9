package ops_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/examples/payments"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemtest"
	"github.com/idemgen/idemgen/internal/ops"
	"github.com/idemgen/idemgen/internal/ops/opstest"
)

func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func ids(rows []ops.DeadRow) []int64 {
	var out []int64
	for _, r := range rows {
		out = append(out, r.ID)
	}
	return out
}

// outboxState reads id, whether dead, attempts and whether available_at is
// set, of every outbox row.
func outboxState(t *testing.T, db *idemtest.DB) map[int64]string {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), `SELECT id,
		CASE WHEN dead_at IS NULL THEN 'due' ELSE 'dead' END || ' attempts=' || coalesce(attempts::text, 'none')
		|| ' backoff=' || (available_at IS NOT NULL)::text FROM idem_outbox ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int64]string{}
	for rows.Next() {
		var id int64
		var s string
		if err := rows.Scan(&id, &s); err != nil {
			t.Fatal(err)
		}
		out[id] = s
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestDeadAndRevive: Dead lists the dead rows by id. Revive refuses an id
// that is not dead, and a row whose ordering key has an earlier dead row
// left behind; it changes nothing then. It revives rows as new: due now, no
// attempts, no backoff, the same id.
func TestDeadAndRevive(t *testing.T) {
	db := opstest.Seed(t)
	conn := connect(t, db.URL)
	ctx := context.Background()

	dead, err := ops.Dead(ctx, conn, "")
	if err != nil {
		t.Fatal(err)
	}
	if dead.Schema != db.Schema || !slices.Equal(ids(dead.Rows), []int64{1, 3, 4}) {
		t.Fatalf("dead: schema %s, ids %v; want %s, [1 3 4]", dead.Schema, ids(dead.Rows), db.Schema)
	}
	r := dead.Rows[0]
	if r.MessageID != opstest.MessageID(1) || r.Consumer != "billing.charge" || r.Key != "o-1" || r.OrderingKey != "acc-1" ||
		r.Attempts != 10 || !r.DeadAt.Equal(opstest.Now.Add(-72*time.Hour)) || r.LastError != "refused: no route to charges" {
		t.Errorf("row 1: %+v", r)
	}
	if only, err := ops.Dead(ctx, conn, "other.service"); err != nil || !slices.Equal(ids(only.Rows), []int64{4}) {
		t.Errorf("dead of other.service: %v, %v; want [4]", ids(only.Rows), err)
	}

	before := outboxState(t, db)
	for _, tc := range []struct {
		ids  []int64
		want error
		says string
	}{
		{[]int64{3}, ops.ErrOrder, `row 3 (ordering key "acc-1") comes after dead row(s) 1,`},
		{[]int64{3, 4}, ops.ErrOrder, "add -id 1"},
		{[]int64{1, 99}, ops.ErrNotFound, "no dead row with id 99"},
		{[]int64{2}, ops.ErrNotFound, "no dead row with id 2"},
	} {
		_, err := ops.Revive(ctx, conn, ops.Revival{IDs: tc.ids})
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("revive %v: %v; want %v saying %q", tc.ids, err, tc.want, tc.says)
		}
		t.Logf("revive %v: %v", tc.ids, err)
	}
	if after := outboxState(t, db); !mapsEqual(before, after) {
		t.Fatalf("a refused revive changed rows: %v, then %v", before, after)
	}

	rev, err := ops.Revive(ctx, conn, ops.Revival{IDs: []int64{3, 1}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ids(rev.Rows), []int64{1, 3}) || rev.Rows[1].Attempts != 10 {
		t.Errorf("revived %+v; want rows 1 and 3 as they were", rev.Rows)
	}
	want := map[int64]string{
		1: "due attempts=none backoff=false", 2: "due attempts=none backoff=false", 3: "due attempts=none backoff=false",
		4: "dead attempts=3 backoff=true", 5: "due attempts=none backoff=false",
	}
	if got := outboxState(t, db); !mapsEqual(got, want) {
		t.Errorf("after revive: %v; want %v", got, want)
	}

	all, err := ops.Revive(ctx, conn, ops.Revival{All: true, Consumer: "billing.charge"})
	if err != nil || len(all.Rows) != 0 {
		t.Errorf("revive all of billing.charge, none dead: %v, %v", all.Rows, err)
	}
	all, err = ops.Revive(ctx, conn, ops.Revival{All: true})
	if err != nil || !slices.Equal(ids(all.Rows), []int64{4}) {
		t.Errorf("revive all: %v, %v; want [4]", ids(all.Rows), err)
	}
}

func mapsEqual(a, b map[int64]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestReviveNeedsTheOutbox: a search_path without the outbox, and a table
// without the migration 00003 that this release's relay needs, are refused.
func TestReviveNeedsTheOutbox(t *testing.T) {
	empty := idemtest.New(t, nil)
	conn := connect(t, empty.URL)
	if _, err := ops.Dead(context.Background(), conn, ""); !errors.Is(err, ops.ErrNotFound) || !strings.Contains(err.Error(), "no idem_outbox table") {
		t.Errorf("dead without an outbox: %v", err)
	}
	db := opstest.Seed(t)
	if _, err := db.Migrations(t, opstest.Migrations(t)).DownTo(context.Background(), 2); err != nil {
		t.Fatal(err)
	}
	conn = connect(t, db.URL)
	_, err := ops.Revive(context.Background(), conn, ops.Revival{All: true})
	if err == nil || !strings.Contains(err.Error(), "lacks the outbox migration 00003_idem_outbox_compact_claim") {
		t.Errorf("revive on the layout of 00002: %v", err)
	}
}

// TestRunningAndRelease: Running lists the running claims of every claims
// table. Release releases one, by key or idempotency key, as the sweeper
// would: released, attempts + 1, fence + 1, no lease. It refuses what is not
// a running claim.
func TestRunningAndRelease(t *testing.T) {
	db := opstest.Seed(t)
	conn := connect(t, db.URL)
	ctx := context.Background()
	in := ops.Filter{Schema: db.Schema}

	cl, err := ops.Running(ctx, conn, in)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range cl.Running {
		got = append(got, c.Table.Consumer+" "+c.Key)
	}
	want := []string{"payments.charge o-2", "payments.charge o-3", "shipping.label carrier=dhl,parcel_id=42"}
	if !slices.Equal(got, want) || len(cl.Tables) != 2 {
		t.Fatalf("running: %q in %d tables; want %q in 2", got, len(cl.Tables), want)
	}
	c := cl.Running[0]
	if c.IdemKey != opstest.IdemKey("o-2") || c.Attempts != 2 || c.Fence != 2 || !c.LeaseUntil.Equal(opstest.Now.Add(-5*time.Minute)) ||
		c.Table.String() != db.Schema+".idem_payments_charge" {
		t.Errorf("o-2: %+v", c)
	}
	if one, err := ops.Running(ctx, conn, ops.Filter{Schema: db.Schema, Consumer: opstest.Shipments}); err != nil || len(one.Running) != 1 {
		t.Errorf("running of %s: %+v, %v", opstest.Shipments, one.Running, err)
	}

	pay := ops.Filter{Schema: db.Schema, Consumer: opstest.Payments}
	rel, err := ops.Release(ctx, conn, pay, "o-2")
	if err != nil {
		t.Fatal(err)
	}
	if rel.Claim.Key != "o-2" || rel.Claim.Attempts != 2 || rel.Claim.Fence != 2 {
		t.Errorf("released %+v; want o-2 as it was", rel.Claim)
	}
	var status string
	var attempts, fence int
	var lease *time.Time
	if err := db.Pool.QueryRow(ctx, `SELECT status, attempts, fence, lease_until FROM idem_payments_charge WHERE key_order_id = 'o-2'`).
		Scan(&status, &attempts, &fence, &lease); err != nil {
		t.Fatal(err)
	}
	if status != "released" || attempts != 3 || fence != 3 || lease != nil {
		t.Errorf("o-2 after release: %s attempts %d fence %d lease %v; want released 3 3 nil", status, attempts, fence, lease)
	}

	if _, err := ops.Release(ctx, conn, pay, opstest.IdemKey("o-3")); err != nil {
		t.Errorf("release o-3 by its idempotency key: %v", err)
	}
	if _, err := ops.Release(ctx, conn, ops.Filter{Schema: db.Schema, Consumer: opstest.Shipments}, "carrier=dhl,parcel_id=42"); err != nil {
		t.Errorf("release the two-column key: %v", err)
	}
	for _, tc := range []struct {
		f    ops.Filter
		key  string
		says string
	}{
		{pay, "o-2", "no running claim on key o-2"},
		{pay, opstest.IdemKey("o-1"), "is done, not running"},
		{pay, "o-9", "no running claim on key o-9"},
		{ops.Filter{Schema: db.Schema, Consumer: "payments.refund"}, "o-1", "no claims table of consumer payments.refund"},
		{ops.Filter{Schema: "no_such_schema_ops", Consumer: opstest.Payments}, "o-1", `schema "no_such_schema_ops"`},
	} {
		_, err := ops.Release(ctx, conn, tc.f, tc.key)
		if !errors.Is(err, ops.ErrNotFound) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("release %s %s: %v; want ErrNotFound saying %q", tc.f.Consumer, tc.key, err, tc.says)
		}
	}
	if cl, err := ops.Running(ctx, conn, in); err != nil || len(cl.Running) != 0 {
		t.Errorf("running after the releases: %+v, %v", cl.Running, err)
	}
}

// TestReleaseTwoSchemas: a consumer with a claims table in two schemas is
// released only in the schema named.
func TestReleaseTwoSchemas(t *testing.T) {
	a, b := opstest.Seed(t), opstest.Seed(t)
	conn := connect(t, a.URL)
	_, err := ops.Release(context.Background(), conn, ops.Filter{Consumer: opstest.Payments}, "o-2")
	if !errors.Is(err, ops.ErrAmbiguous) || !strings.Contains(err.Error(), a.Schema+".idem_payments_charge") ||
		!strings.Contains(err.Error(), b.Schema+".idem_payments_charge") {
		t.Errorf("release in two schemas: %v", err)
	}
}

// TestReleaseLetsTheNextDeliveryIn: a worker is stuck in its provider call
// with a claim whose lease is live, so a redelivery gets ErrInProgress.
// After the release the next delivery claims the key at once and charges,
// with the same idempotency key. The stuck worker's handler is cancelled at
// its next heartbeat, and its result is never recorded (ErrClaimLost).
func TestReleaseLetsTheNextDeliveryIn(t *testing.T) {
	db := opstest.Empty(t)
	provider, err := payments.StartProvider()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = provider.Close() })
	var calls atomic.Int32
	stuck := make(chan struct{})
	client := &http.Client{Transport: roundTripper(func(req *http.Request) (*http.Response, error) {
		if calls.Add(1) == 1 {
			close(stuck)
			<-req.Context().Done() // the stuck worker: until its context ends
			return nil, context.Cause(req.Context())
		}
		return http.DefaultTransport.RoundTrip(req)
	})}
	w := payments.NewChargeIdem(db.Pool, &payments.Service{ProviderURL: provider.URL(), Client: client}, idem.WithLease(3*time.Second), idemtest.WithTestLogger(t))
	msg := payments.ChargeRequested{OrderID: "o-7", AmountCents: 700, Currency: "EUR"}
	ctx := context.Background()

	first := make(chan error, 1)
	go func() {
		_, _, err := w.Handle(ctx, msg)
		first <- err
	}()
	<-stuck
	if _, _, err := w.Handle(ctx, msg); !errors.Is(err, idem.ErrInProgress) {
		t.Fatalf("a redelivery while the claim is live: %v; want ErrInProgress", err)
	}

	conn := connect(t, db.URL)
	rel, err := ops.Release(ctx, conn, ops.Filter{Schema: db.Schema, Consumer: opstest.Payments}, "o-7")
	if err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	receipt, outcome, err := w.Handle(ctx, msg)
	if err != nil || outcome != idem.Processed || receipt.ChargeID == "" {
		t.Fatalf("the delivery after the release: %v, %v, %v; want Processed with a charge", receipt, outcome, err)
	}
	took := time.Since(released)
	select {
	case err := <-first:
		if !errors.Is(err, idem.ErrClaimLost) {
			t.Errorf("the stuck worker: %v; want ErrClaimLost", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the stuck worker's handler was not cancelled within 30s of the release")
	}
	if provider.Charges() != 1 {
		t.Errorf("provider charges: %d; want 1", provider.Charges())
	}
	t.Logf("released o-7 (attempts %d, fence %d); the next delivery was Processed %v later; the stuck worker got ErrClaimLost",
		rel.Claim.Attempts, rel.Claim.Fence, took.Round(time.Millisecond))
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestRefusesAStandby: every function refuses a server in recovery, and
// changes nothing there.
func TestRefusesAStandby(t *testing.T) {
	conn := connect(t, opstest.Standby(t))
	ctx := context.Background()
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, ops.ErrNotPrimary) || !strings.Contains(err.Error(), "pg_is_in_recovery() is true") {
			t.Errorf("%s on a standby: %v; want ErrNotPrimary", what, err)
		}
	}
	_, err := ops.RequirePrimary(ctx, conn)
	check("RequirePrimary", err)
	_, err = ops.Dead(ctx, conn, "")
	check("Dead", err)
	_, err = ops.Revive(ctx, conn, ops.Revival{All: true})
	check("Revive", err)
	_, err = ops.Running(ctx, conn, ops.Filter{})
	check("Running", err)
	_, err = ops.Release(ctx, conn, ops.Filter{Consumer: opstest.Payments}, "o-1")
	check("Release", err)
}
