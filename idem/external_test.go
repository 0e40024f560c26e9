package idem_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemimpl"
	"github.com/idemgen/idemgen/idem/idemtest"
	"github.com/idemgen/idemgen/idem/internal/relaytest"
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
	x := idemimpl.NewExternalInbox(db.Pool, payTable, charge(p))
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

// cutDB is a worker's database that can be cut off, as a network partition
// cuts a stalled worker off: while cut, every Acquire fails.
type cutDB struct {
	pool *pgxpool.Pool
	cut  atomic.Bool
}

func (d *cutDB) Acquire(ctx context.Context) (*pgxpool.Conn, error) {
	if d.cut.Load() {
		return nil, errors.New("test: this worker is cut off from the database")
	}
	return d.pool.Acquire(ctx)
}

// waitLeaseExpired waits until the lease of id's row has run out in the
// database's clock.
func waitLeaseExpired(t testing.TB, pool *pgxpool.Pool, id string, timeout time.Duration) {
	t.Helper()
	relaytest.WaitFor(t, timeout, "the lease of "+id+" to run out", func() bool {
		return relaytest.QueryInt(t, pool, `SELECT count(*)::int FROM idem_test_pay WHERE key_id = $1 AND status = 'running' AND lease_until < now()`, id) == 1
	})
}

// TestExternalConcurrentDuringLiveClaim (must-show 1): 16 deliveries of one
// message at once while the winner's provider call is held: one handler
// call, the 15 others ErrInProgress at once (in milliseconds, while the claim
// is still held); after done, 16 redeliveries at once are Duplicates with the
// stored result, and the handler is not called again.
func TestExternalConcurrentDuringLiveClaim(t *testing.T) {
	const n = 16
	db := payDB(t)
	idemtest.Warm(t, db.Pool, n)
	p := idemtest.NewProvider()
	var calls atomic.Int64
	handler := charge(p)
	x := idemimpl.NewExternalInbox(db.Pool, payTable, func(ctx context.Context, msg payment) (charged, error) {
		calls.Add(1)
		return handler(ctx, msg)
	}, idem.WithLease(30*time.Second))
	msg := payment{ID: "pay-concurrent", Amount: 1200}
	hold := p.Hold()

	type result struct {
		r   charged
		o   idem.Outcome
		err error
		d   time.Duration
	}
	results := make([]result, n)
	var returned atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		idemtest.AtOnce(n, func(i int) {
			began := time.Now()
			r, o, err := x.Handle(context.Background(), msg)
			results[i] = result{r, o, err, time.Since(began)}
			returned.Add(1)
		})
	}()
	select {
	case <-hold.Arrived():
	case <-time.After(10 * time.Second):
		t.Fatal("no delivery reached the provider within 10s")
	}
	relaytest.WaitFor(t, 10*time.Second, "the 15 losing deliveries to return while the winner's call is held", func() bool { return returned.Load() == n-1 })
	hold.Release()
	<-done

	var processed, inProgress int
	var winner charged
	var slowest time.Duration
	for _, r := range results {
		switch {
		case r.err == nil && r.o == idem.Processed:
			processed++
			winner = r.r
		case errors.Is(r.err, idem.ErrInProgress) && idem.ActionFor(r.err) == idem.Retry:
			inProgress++
			slowest = max(slowest, r.d)
			// RetryAfter is what is left of the winner's 30s lease.
			if after, ok := idem.RetryAfter(r.err); !ok || after < 25*time.Second || after > 30*time.Second {
				t.Errorf("RetryAfter(%v) = %v, %v; want what is left of the 30s lease", r.err, after, ok)
			}
		default:
			t.Errorf("delivery: %v %v %v; want Processed or ErrInProgress", r.r, r.o, r.err)
		}
	}
	t.Logf("%d deliveries during a live claim: %d Processed, %d ErrInProgress (the slowest returned in %v), %d handler call(s), provider calls=%d effects=%d",
		n, processed, inProgress, slowest.Round(time.Microsecond), calls.Load(), p.Calls(), p.Effects())
	if processed != 1 || inProgress != n-1 || calls.Load() != 1 || p.Effects() != 1 {
		t.Fatalf("got %d Processed, %d ErrInProgress, %d handler calls, %d effects; want 1, %d, 1, 1", processed, inProgress, calls.Load(), p.Effects(), n-1)
	}
	within(t, "the slowest ErrInProgress", slowest, time.Second)

	var dups atomic.Int64
	idemtest.AtOnce(n, func(int) {
		r, o, err := x.Handle(context.Background(), msg)
		if err != nil || o != idem.Duplicate || r != winner {
			t.Errorf("redelivery after done: %v %v %v; want Duplicate with %v", r, o, err, winner)
			return
		}
		dups.Add(1)
	})
	row := readPayRow(t, db.Pool, msg.ID)
	t.Logf("%d redeliveries after done: %d Duplicate with %s; handler calls still %d; row %v", n, dups.Load(), resultJSON(winner), calls.Load(), row)
	if calls.Load() != 1 || row.Status != "done" || row.Attempts != 1 || row.Fence != 1 {
		t.Errorf("after the redeliveries: %d handler calls, row %v; want 1 call, done, attempts 1, fence 1", calls.Load(), row)
	}
}

// TestExternalTakeoverByOneOfEight (must-show 3): worker A claims the key,
// calls the provider and is then cut off from the database with its handler
// held past its lease. Its heartbeats fail, so its context is cancelled with
// ErrClaimLost when the lease runs out; then 8 workers race for the key and
// exactly one takes it over (fence 2, attempts 2), the 7 others get
// ErrInProgress. When A's handler finally returns a result, A cannot write
// done: ErrClaimLost, its result discarded, and the row keeps the winner's.
func TestExternalTakeoverByOneOfEight(t *testing.T) {
	const racers = 8
	const lease = time.Second
	db := payDB(t)
	idemtest.Warm(t, db.Pool, racers+2)
	p := idemtest.NewProvider()
	msg := payment{ID: "pay-takeover", Amount: 700}

	cut := &cutDB{pool: db.Pool}
	started, finish := make(chan struct{}), make(chan struct{})
	var aCause atomic.Value
	var aCancelledAfter atomic.Int64
	a := idemimpl.NewExternalInbox(cut, payTable, func(ctx context.Context, msg payment) (charged, error) {
		key, _ := idem.KeyFrom(ctx)
		if _, err := p.Call(ctx, key, []byte(fmt.Sprint(msg.Amount))); err != nil {
			return charged{}, err
		}
		began := time.Now()
		close(started)
		select { // the handler does not stop on its context: a call in flight
		case <-ctx.Done():
			aCancelledAfter.Store(int64(time.Since(began)))
			aCause.Store(context.Cause(ctx))
		case <-finish:
		}
		<-finish
		return charged{ChargeID: "from-stale-worker-A"}, nil
	}, idem.WithLease(lease))
	aDone := make(chan error, 1)
	go func() {
		_, _, err := a.Handle(context.Background(), msg)
		aDone <- err
	}()
	<-started
	cut.cut.Store(true)
	waitLeaseExpired(t, db.Pool, msg.ID, 10*lease)
	relaytest.WaitFor(t, 5*lease, "worker A's context to be cancelled", func() bool { return aCause.Load() != nil })
	cause := aCause.Load().(error)
	if !errors.Is(cause, idem.ErrClaimLost) {
		t.Errorf("worker A's context cause: %v; want ErrClaimLost", cause)
	}

	var handlerRuns atomic.Int64
	type outcome struct {
		r   charged
		o   idem.Outcome
		err error
	}
	outs := make([]outcome, racers)
	idemtest.AtOnce(racers, func(i int) {
		w := idemimpl.NewExternalInbox(db.Pool, payTable, func(ctx context.Context, msg payment) (charged, error) {
			handlerRuns.Add(1)
			time.Sleep(200 * time.Millisecond) // the others race while this claim is live
			return charge(p)(ctx, msg)
		}, idem.WithLease(lease))
		r, o, err := w.Handle(context.Background(), msg)
		outs[i] = outcome{r, o, err}
	})
	var won, inProgress int
	var winner charged
	for _, o := range outs {
		switch {
		case o.err == nil && o.o == idem.Processed:
			won++
			winner = o.r
		case errors.Is(o.err, idem.ErrInProgress):
			inProgress++
		default:
			t.Errorf("racer: %v %v %v; want Processed or ErrInProgress", o.r, o.o, o.err)
		}
	}
	rowAfterRace := readPayRow(t, db.Pool, msg.ID)

	cut.cut.Store(false)
	close(finish)
	aErr := <-aDone
	row := readPayRow(t, db.Pool, msg.ID)
	t.Logf("worker A's context cancelled %v after its call (lease %v), cause: %v", time.Duration(aCancelledAfter.Load()).Round(time.Millisecond), lease, cause)
	t.Logf("%d racers: %d took over (Processed %s), %d ErrInProgress; handler runs %d; provider calls=%d effects=%d keys=%d distinct=%d",
		racers, won, resultJSON(winner), inProgress, handlerRuns.Load(), p.Calls(), p.Effects(), len(p.Keys()), len(distinct(p.Keys())))
	t.Logf("worker A returned: %v (action %v); row after the race %v; row at the end %v", aErr, idem.ActionFor(aErr), rowAfterRace, row)
	if won != 1 || inProgress != racers-1 || handlerRuns.Load() != 1 {
		t.Errorf("%d took over, %d ErrInProgress, %d handler runs; want 1, %d, 1", won, inProgress, handlerRuns.Load(), racers-1)
	}
	if !errors.Is(aErr, idem.ErrClaimLost) || idem.ActionFor(aErr) != idem.Retry {
		t.Errorf("worker A: %v; want ErrClaimLost (retry)", aErr)
	}
	if row.Status != "done" || row.Fence != 2 || row.Attempts != 2 || row.Result == nil || !strings.Contains(*row.Result, winner.ChargeID) || strings.Contains(*row.Result, "stale") {
		t.Errorf("row %v; want done by the winner (fence 2, attempts 2, its result %s)", row, resultJSON(winner))
	}
	if p.Effects() != 1 || p.Calls() != 2 || len(distinct(p.Keys())) != 1 {
		t.Errorf("provider: %d calls, %d effects, keys %v; want 2 calls of one key, 1 effect", p.Calls(), p.Effects(), p.Keys())
	}
}

func distinct(keys []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, k := range keys {
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out
}

// TestExternalHeartbeatKeepsClaim (must-show 4a): a handler that runs three
// times its lease keeps its claim through heartbeats: duplicates during the
// whole run get ErrInProgress, the lease is renewed again and again, and the
// run ends Processed with fence 1 and attempts 1.
func TestExternalHeartbeatKeepsClaim(t *testing.T) {
	// Renewed every 667ms: a lease of a second left a test binary starved of
	// CPU on a loaded machine too little room, and the run was cancelled.
	const lease = 2 * time.Second
	db := payDB(t)
	p := idemtest.NewProvider()
	msg := payment{ID: "pay-long", Amount: 300}
	started := make(chan struct{})
	var cancelled atomic.Bool
	x := idemimpl.NewExternalInbox(db.Pool, payTable, func(ctx context.Context, msg payment) (charged, error) {
		close(started)
		select {
		case <-ctx.Done():
			cancelled.Store(true)
			return charged{}, context.Cause(ctx)
		case <-time.After(3 * lease):
		}
		return charge(p)(ctx, msg)
	}, idem.WithLease(lease))
	done := make(chan error, 1)
	var r charged
	var o idem.Outcome
	began := time.Now()
	go func() {
		var err error
		r, o, err = x.Handle(context.Background(), msg)
		done <- err
	}()
	<-started

	other := idemimpl.NewExternalInbox(db.Pool, payTable, charge(p), idem.WithLease(lease))
	leases := map[time.Time]bool{}
	var dupInProgress, dupOther int
	for time.Since(began) < 3*lease-100*time.Millisecond {
		var until time.Time
		if err := db.Pool.QueryRow(context.Background(), `SELECT lease_until FROM idem_test_pay WHERE key_id = $1`, msg.ID).Scan(&until); err != nil {
			t.Fatal(err)
		}
		leases[until] = true
		if _, _, err := other.Handle(context.Background(), msg); errors.Is(err, idem.ErrInProgress) {
			dupInProgress++
		} else {
			dupOther++
			t.Errorf("duplicate %v into the run: %v; want ErrInProgress", time.Since(began).Round(time.Millisecond), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	err := <-done
	row := readPayRow(t, db.Pool, msg.ID)
	t.Logf("handler ran %v with a lease of %v: %v %v; %d duplicates during the run got ErrInProgress, %d something else; lease_until took %d values; row %v",
		time.Since(began).Round(time.Millisecond), lease, o, err, dupInProgress, dupOther, len(leases), row)
	if err != nil || o != idem.Processed || r.ChargeID == "" || cancelled.Load() {
		t.Errorf("the long run: %v %v %v (context cancelled: %v); want Processed", r, o, err, cancelled.Load())
	}
	if len(leases) < 5 {
		t.Errorf("lease_until took %d values in a run of 3 leases; want it renewed every third of the lease (at least 5)", len(leases))
	}
	if row.Status != "done" || row.Fence != 1 || row.Attempts != 1 {
		t.Errorf("row %v; want done, fence 1, attempts 1: the claim was never lost", row)
	}
}

// TestExternalStolenClaimCancelsContext (must-show 4b): a claim whose fence
// is bumped by hand while its handler runs cancels the handler's context at
// the next heartbeat, with context.Cause ErrClaimLost; the delivery fails
// with ErrClaimLost. A handler that returns a result after the theft anyway
// cannot write done: ErrClaimLost, the result discarded.
func TestExternalStolenClaimCancelsContext(t *testing.T) {
	const lease = 1500 * time.Millisecond
	for _, c := range []struct {
		name          string
		stopsOnCancel bool
	}{{"handler_stops_on_cancel", true}, {"handler_ignores_cancel", false}} {
		t.Run(c.name, func(t *testing.T) {
			db := payDB(t)
			msg := payment{ID: "pay-stolen-" + c.name, Amount: 100}
			started := make(chan struct{})
			var cause error
			var cancelledAfter time.Duration
			var stole time.Time
			stolen := make(chan struct{})
			x := idemimpl.NewExternalInbox(db.Pool, payTable, func(ctx context.Context, msg payment) (charged, error) {
				close(started)
				<-stolen
				select {
				case <-ctx.Done():
					cancelledAfter, cause = time.Since(stole), context.Cause(ctx)
				case <-time.After(5 * lease):
					return charged{}, errors.New("test: the context was not cancelled within 5 leases of the theft")
				}
				if c.stopsOnCancel {
					return charged{}, ctx.Err()
				}
				return charged{ChargeID: "after-the-theft"}, nil
			}, idem.WithLease(lease))
			done := make(chan error, 1)
			go func() {
				_, _, err := x.Handle(context.Background(), msg)
				done <- err
			}()
			<-started
			if _, err := db.Pool.Exec(context.Background(), `UPDATE idem_test_pay SET fence = fence + 1 WHERE key_id = $1`, msg.ID); err != nil {
				t.Fatal(err)
			}
			stole = time.Now()
			close(stolen)
			err := <-done
			row := readPayRow(t, db.Pool, msg.ID)
			t.Logf("context cancelled %v after the fence was bumped (heartbeat every %v), cause %v; Handle: %v; row %v",
				cancelledAfter.Round(time.Millisecond), lease/3, cause, err, row)
			if cause != idem.ErrClaimLost {
				t.Errorf("context.Cause = %v; want idem.ErrClaimLost", cause)
			}
			within(t, "the cancellation after the theft", cancelledAfter, lease/3+500*time.Millisecond)
			if !errors.Is(err, idem.ErrClaimLost) || idem.ActionFor(err) != idem.Retry {
				t.Errorf("Handle: %v; want an error wrapping ErrClaimLost (retry)", err)
			}
			if row.Status != "running" || row.Fence != 2 || row.Result != nil {
				t.Errorf("row %v; want the thief's: running, fence 2, no result (never done by the robbed worker)", row)
			}
		})
	}
}

// TestExternalHandlerErrorReleases: a handler error releases the claim
// (released, attempts 2, no lease) and is returned as the handler's error
// (retry); the retry claims the key at once and is Processed with fence 2,
// attempts 2 kept. A panic releases the claim too.
func TestExternalHandlerErrorReleases(t *testing.T) {
	db := payDB(t)
	p := idemtest.NewProvider()
	msg := payment{ID: "pay-fails-once", Amount: 50}
	errDeclined := errors.New("test: card declined, try again")
	var runs atomic.Int64
	x := idemimpl.NewExternalInbox(db.Pool, payTable, func(ctx context.Context, msg payment) (charged, error) {
		switch runs.Add(1) {
		case 1:
			return charged{}, errDeclined
		case 2:
			panic("test: the handler panics")
		}
		return charge(p)(ctx, msg)
	}, idem.WithLease(time.Minute))
	ctx := context.Background()
	_, o, failed := x.Handle(ctx, msg)
	first := readPayRow(t, db.Pool, msg.ID)
	var leaseSet bool
	if err := db.Pool.QueryRow(ctx, `SELECT lease_until IS NOT NULL FROM idem_test_pay WHERE key_id = $1`, msg.ID).Scan(&leaseSet); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(failed, errDeclined) || o != 0 || idem.ActionFor(failed) != idem.Retry {
		t.Errorf("failing delivery: %v %v; want the handler's error (retry), no outcome", o, failed)
	}
	if first.Status != "released" || first.Attempts != 2 || first.Fence != 1 || leaseSet {
		t.Errorf("after the handler error: row %v, lease set %v; want released, attempts 2, fence 1, no lease", first, leaseSet)
	}
	var panicked any
	func() {
		defer func() { panicked = recover() }()
		_, _, _ = x.Handle(ctx, msg)
	}()
	second := readPayRow(t, db.Pool, msg.ID)
	if panicked == nil || second.Status != "released" || second.Attempts != 3 || second.Fence != 2 {
		t.Errorf("after the panic (%v): row %v; want the panic re-raised, released, attempts 3, fence 2", panicked, second)
	}
	r, o, err := x.Handle(ctx, msg)
	row := readPayRow(t, db.Pool, msg.ID)
	t.Logf("handler error: %v → row %v; panic → row %v; retry: %v %v %v → row %v", failed, first, second, r, o, err, row)
	if err != nil || o != idem.Processed || row.Status != "done" || row.Attempts != 3 || row.Fence != 3 {
		t.Errorf("retry: %v %v, row %v; want Processed, done, attempts 3, fence 3", o, err, row)
	}
	if p.Effects() != 1 || runs.Load() != 3 {
		t.Errorf("%d runs, %d effects; want 3 runs and 1 effect", runs.Load(), p.Effects())
	}
}

// TestExternalKeyFrom: the idempotency key is 64 lowercase hex characters,
// pinned across versions (a value computed once and written here: a change
// of the encoding would make every provider see new keys for old messages),
// different per consumer and per key, NULL distinct from "", integers by
// value whatever their type, UUIDs by value whatever their type, and part
// boundaries unambiguous. KeyFrom is false outside a handler and inside
// one equals ExternalKey.
func TestExternalKeyFrom(t *testing.T) {
	u := [16]byte{0x6b, 0xa7, 0xb8, 0x10, 0x9d, 0xad, 0x11, 0xd1, 0x80, 0xb4, 0x00, 0xc0, 0x4f, 0xd4, 0x30, 0xc8}
	type myUUID [16]byte
	type myString string
	k := idem.ExternalKey("billing.payout", []any{"order-1", int64(7)})
	t.Logf("ExternalKey(billing.payout, [order-1 7]) = %s", k)
	if len(k) != 64 || strings.Trim(k, "0123456789abcdef") != "" {
		t.Fatalf("key %q: want 64 lowercase hex characters", k)
	}
	if k != pinnedExternalKey {
		t.Errorf("ExternalKey(billing.payout, [order-1 7]) = %s; want the pinned %s: the encoding changed, and every provider would see new keys for old messages", k, pinnedExternalKey)
	}
	same := [][2][]any{
		{{int64(7)}, {uint64(7)}},
		{{int64(7)}, {int32(7)}},
		{{u}, {myUUID(u)}},
		{{u}, {pgtype.UUID{Bytes: u, Valid: true}}},
		{{"a"}, {myString("a")}},
		{{nil}, {pgtype.UUID{}}},
	}
	for _, c := range same {
		if a, b := idem.ExternalKey("c", c[0]), idem.ExternalKey("c", c[1]); a != b {
			t.Errorf("ExternalKey(%#v) != ExternalKey(%#v); want the same key for the same value", c[0], c[1])
		}
	}
	different := [][2][]any{
		{{nil}, {""}},
		{{"7"}, {int64(7)}},
		{{"a", "bc"}, {"ab", "c"}},
		{{"a"}, {"a", nil}},
		{{"order-1"}, {"order-2"}},
		{{int64(1)}, {int64(-1)}},
	}
	for _, c := range different {
		if a, b := idem.ExternalKey("c", c[0]), idem.ExternalKey("c", c[1]); a == b {
			t.Errorf("ExternalKey(%#v) == ExternalKey(%#v); want different keys", c[0], c[1])
		}
	}
	if idem.ExternalKey("billing.a", []any{"x"}) == idem.ExternalKey("billing.b", []any{"x"}) {
		t.Error("two consumers share a key")
	}
	if idem.ExternalKey("ab", []any{"c"}) == idem.ExternalKey("a", []any{"bc"}) {
		t.Error("the consumer and the first part are ambiguous")
	}
	if _, ok := idem.KeyFrom(context.Background()); ok {
		t.Error("KeyFrom outside a handler: ok; want false")
	}
	db := payDB(t)
	var inHandler string
	x := idemimpl.NewExternalInbox(db.Pool, payTable, idemimpl.NoResultExternal(func(ctx context.Context, msg payment) error {
		inHandler, _ = idem.KeyFrom(ctx)
		return nil
	}))
	if _, err := x.Deliver(context.Background(), payment{ID: "order-1", Amount: 1}); err != nil {
		t.Fatal(err)
	}
	var stored string
	if err := db.Pool.QueryRow(context.Background(), `SELECT idem_key FROM idem_test_pay WHERE key_id = 'order-1'`).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if want := idem.ExternalKey(payConsumer, []any{"order-1"}); inHandler != want || stored != want {
		t.Errorf("KeyFrom in the handler %q, idem_key %q; want ExternalKey %q", inHandler, stored, want)
	}
}

// pinnedExternalKey is ExternalKey("billing.payout", []any{"order-1",
// int64(7)}), computed once.
const pinnedExternalKey = "d19da53672507b18b173f5fcae08d55656399e81b6cb86c47a1926fccee0fc96"

// TestExternalPurgeSparesRunningClaims: Purge deletes the rows older than
// the retention that are not running (done, released) and keeps a running
// claim however old, and the younger rows.
func TestExternalPurgeSparesRunningClaims(t *testing.T) {
	db := payDB(t)
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `INSERT INTO idem_test_pay (idem_key, key_id, fingerprint, status, fence, attempts, lease_until, created_at, updated_at, done_at) VALUES
		('k-done-old', 'done-old', '\x01', 'done', 1, 1, NULL, now() - interval '2 hours', now() - interval '2 hours', now() - interval '2 hours'),
		('k-released-old', 'released-old', '\x01', 'released', 1, 2, NULL, now() - interval '2 hours', now() - interval '2 hours', NULL),
		('k-running-old', 'running-old', '\x01', 'running', 1, 1, now() - interval '1 minute', now() - interval '2 hours', now() - interval '2 hours', NULL),
		('k-done-new', 'done-new', '\x01', 'done', 1, 1, NULL, now(), now(), now())`); err != nil {
		t.Fatal(err)
	}
	table := payTable
	table.Retain = time.Hour
	x := idemimpl.NewExternalInbox(db.Pool, table, charge(idemtest.NewProvider()))
	n, err := x.Purge(ctx)
	left := relaytest.QueryInt(t, db.Pool, `SELECT count(*)::int FROM idem_test_pay WHERE key_id IN ('running-old', 'done-new')`)
	all := relaytest.QueryInt(t, db.Pool, `SELECT count(*)::int FROM idem_test_pay`)
	t.Logf("purge with a retention of 1h: deleted %d (%v); %d rows left, the old running claim and the young row among them: %d", n, err, all, left)
	if err != nil || n != 2 || all != 2 || left != 2 {
		t.Errorf("purge deleted %d (%v), left %d rows (%d of the two to keep); want 2 deleted, the running claim and the young row kept", n, err, all, left)
	}
}

// TestExternalUndecodableStoredResult: a done row whose stored result no
// longer decodes into the result type is ErrUndecodableResult
// (dead-letter), without a call of the handler.
func TestExternalUndecodableStoredResult(t *testing.T) {
	db := payDB(t)
	p := idemtest.NewProvider()
	x := idemimpl.NewExternalInbox(db.Pool, payTable, charge(p))
	ctx := context.Background()
	msg := payment{ID: "pay-undecodable", Amount: 10}
	if _, _, err := x.Handle(ctx, msg); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `UPDATE idem_test_pay SET result = '{"charge_id": 17}' WHERE key_id = $1`, msg.ID); err != nil {
		t.Fatal(err)
	}
	_, o, err := x.Handle(ctx, msg)
	t.Logf("a stored result of another type: %v %v (action %v); provider calls %d", o, err, idem.ActionFor(err), p.Calls())
	if !errors.Is(err, idem.ErrUndecodableResult) || idem.ActionFor(err) != idem.DeadLetter || p.Calls() != 1 {
		t.Errorf("got %v %v, %d provider calls; want ErrUndecodableResult (dead-letter) and no second call", o, err, p.Calls())
	}
}

// TestExternalOptionsValidated: NewExternalInbox panics on a lease that is
// not positive and a stuck threshold below 1, naming the consumer, and not
// on a table without a lease (it runs with DefaultLease).
func TestExternalOptionsValidated(t *testing.T) {
	for _, c := range []struct {
		name string
		opts []idem.Option
		want string
	}{
		{"negative lease", []idem.Option{idem.WithLease(-time.Second)}, "the lease is -1s"},
		{"stuck threshold 0", []idem.Option{idem.WithStuckAttempts(0)}, "WithStuckAttempts(0)"},
	} {
		func() {
			defer func() {
				p := recover()
				if s, _ := p.(string); !strings.Contains(s, c.want) || !strings.Contains(s, payConsumer) {
					t.Errorf("%s: panic %v; want one naming the consumer and %q", c.name, p, c.want)
				}
			}()
			idemimpl.NewExternalInbox(nil, payTable, charge(nil), c.opts...)
		}()
	}
	table := payTable
	table.Lease = 0
	idemimpl.NewExternalInbox(nil, table, charge(nil)) // no panic: DefaultLease
}

// TestExternalCallerCancelledDuringRun: a caller that cancels its context
// while the handler runs (a consumer stopping) cancels the handler's
// context; a result the handler still returns is recorded done (Processed),
// since its effect happened.
func TestExternalCallerCancelledDuringRun(t *testing.T) {
	db := payDB(t)
	p := idemtest.NewProvider()
	started := make(chan struct{})
	var handlerCause error
	x := idemimpl.NewExternalInbox(db.Pool, payTable, func(ctx context.Context, msg payment) (charged, error) {
		r, err := charge(p)(ctx, msg)
		close(started)
		<-ctx.Done()
		handlerCause = context.Cause(ctx)
		return r, err
	}, idem.WithLease(time.Minute))
	ctx, cancel := context.WithCancel(context.Background())
	msg := payment{ID: "pay-stopping", Amount: 30}
	done := make(chan error, 1)
	var o idem.Outcome
	go func() {
		var err error
		_, o, err = x.Handle(ctx, msg)
		done <- err
	}()
	<-started
	cancel()
	err := <-done
	row := readPayRow(t, db.Pool, msg.ID)
	t.Logf("caller cancelled during the run: handler's cause %v; Handle %v %v; row %v", handlerCause, o, err, row)
	if !errors.Is(handlerCause, context.Canceled) || err != nil || o != idem.Processed || row.Status != "done" {
		t.Errorf("got cause %v, %v %v, row %v; want the handler cancelled, Processed, done", handlerCause, o, err, row)
	}
}

// TestExternalHeartbeatSurvivesShortOutage: heartbeats that fail for less
// than the lease (the worker cut off from the database for 1.4s from the
// claim, with a lease of 3s renewed every second: the first renewal fails,
// the second, a second before the lease would run out, succeeds) are
// retried, and the claim is kept: the run ends Processed, its context never
// cancelled.
func TestExternalHeartbeatSurvivesShortOutage(t *testing.T) {
	const lease = 3 * time.Second
	const outage = 1400 * time.Millisecond
	db := payDB(t)
	cut := &cutDB{pool: db.Pool}
	p := idemtest.NewProvider()
	var cancelled atomic.Bool
	started := make(chan struct{})
	x := idemimpl.NewExternalInbox(cut, payTable, func(ctx context.Context, msg payment) (charged, error) {
		close(started)
		select {
		case <-ctx.Done():
			cancelled.Store(true)
		case <-time.After(2 * lease):
		}
		return charge(p)(ctx, msg)
	}, idem.WithLease(lease))
	done := make(chan error, 1)
	var o idem.Outcome
	msg := payment{ID: "pay-outage", Amount: 5}
	go func() {
		var err error
		_, o, err = x.Handle(context.Background(), msg)
		done <- err
	}()
	<-started
	cut.cut.Store(true)
	time.Sleep(outage)
	cut.cut.Store(false)
	err := <-done
	row := readPayRow(t, db.Pool, msg.ID)
	t.Logf("an outage of %v during a run of %v (lease %v): context cancelled %v; Handle %v %v; row %v", outage, 2*lease, lease, cancelled.Load(), o, err, row)
	if cancelled.Load() || err != nil || o != idem.Processed || row.Status != "done" || row.Fence != 1 {
		t.Errorf("got cancelled=%v, %v %v, row %v; want the claim kept: Processed, done, fence 1", cancelled.Load(), o, err, row)
	}
}
