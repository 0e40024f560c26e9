package idem_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemimpl"
	"github.com/idemgen/idemgen/idem/idemtest"
	"github.com/idemgen/idemgen/idem/internal/relaytest"
)

// The tests of workers that die: a child process (this test binary run
// again) claims keys, calls the provider over HTTP and kills itself with
// SIGKILL before it can mark anything done. The provider is an
// idemtest.Provider behind a real net/http server on loopback in the
// parent, deduplicating by the Idempotency-Key header.

const (
	envExternalChildURL      = "IDEM_TEST_EXTERNAL_CHILD_URL"
	envExternalChildProvider = "IDEM_TEST_EXTERNAL_CHILD_PROVIDER"
	envExternalChildIDs      = "IDEM_TEST_EXTERNAL_CHILD_IDS"
)

// childLease is the lease of the children's claims.
const childLease = time.Second

// chargeAmount is the amount of every payment of these tests: the child and
// the parent send the provider the same payload for a key.
const chargeAmount = 4200

// chargeOverHTTP is the handler of these tests: it charges through the
// provider served at url, with the delivery's idempotency key in the
// Idempotency-Key header.
func chargeOverHTTP(url string) func(ctx context.Context, msg payment) (charged, error) {
	return func(ctx context.Context, msg payment) (charged, error) {
		key, ok := idem.KeyFrom(ctx)
		if !ok {
			return charged{}, errors.New("no idempotency key in the handler's context")
		}
		id, err := idemtest.PostProvider(ctx, http.DefaultClient, url, key, []byte(fmt.Sprint(msg.Amount)))
		return charged{ChargeID: id}, err
	}
}

// runExternalChild is the child process: it delivers a payment for each id
// at once; each handler charges through the provider and prints its key, and
// once every one of them has charged, the process kills itself.
func runExternalChild(dbURL string) {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "external child:", err)
		os.Exit(3)
	}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		fail(err)
	}
	ids := strings.Split(os.Getenv(envExternalChildIDs), ",")
	call := chargeOverHTTP(os.Getenv(envExternalChildProvider))
	var called sync.WaitGroup
	called.Add(len(ids))
	var mu sync.Mutex
	x := idemimpl.NewExternalInbox(pool, payTable, func(ctx context.Context, msg payment) (charged, error) {
		r, err := call(ctx, msg)
		if err != nil {
			fail(err)
		}
		key, _ := idem.KeyFrom(ctx)
		mu.Lock()
		fmt.Printf("charged %s key %s id %s\n", msg.ID, key, r.ChargeID)
		mu.Unlock()
		called.Done()
		select {} // killed before it returns: the done is never written
	}, idem.WithLease(childLease))
	for _, id := range ids {
		go func() {
			_, _, err := x.Handle(ctx, payment{ID: id, Amount: chargeAmount})
			fail(fmt.Errorf("Handle(%s) returned: %v", id, err))
		}()
	}
	called.Wait()
	_ = os.Stdout.Sync()
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}

// killedWorker runs the child for ids, requires that it died of SIGKILL,
// and returns the keys its handlers printed, by id.
func killedWorker(t *testing.T, test string, db *idemtest.DB, providerURL string, ids ...string) map[string]string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), envExternalChildURL+"="+db.URL, envExternalChildProvider+"="+providerURL,
		envExternalChildIDs+"="+strings.Join(ids, ","))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the worker process ended with %v, want killed by SIGKILL; its output:\n%s%s", err, stdout.String(), stderr.String())
	}
	keys := map[string]string{}
	lines := bufio.NewScanner(&stdout)
	for lines.Scan() {
		var id, key, charge string
		if _, err := fmt.Sscanf(lines.Text(), "charged %s key %s id %s", &id, &key, &charge); err == nil {
			keys[id] = key
		}
	}
	if len(keys) != len(ids) {
		t.Fatalf("the killed worker reported charges for %d of %d ids; its output:\n%s%s", len(keys), len(ids), stdout.String(), stderr.String())
	}
	return keys
}

// httpProvider serves a Provider on loopback for the test.
func httpProvider(t testing.TB) (*idemtest.Provider, string) {
	p := idemtest.NewProvider()
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	return p, srv.URL
}

// TestExternalWorkerKilledAfterCallBeforeDone (must-show 2): a worker killed
// with SIGKILL after its provider call and before done leaves the key
// running; a redelivery while the lease lives is ErrInProgress; once the
// lease has run out the redelivery takes the key over and calls the provider
// again with the same key (computed in another process), the provider
// charges once, and the row ends done with attempts = 2.
func TestExternalWorkerKilledAfterCallBeforeDone(t *testing.T) {
	if url := os.Getenv(envExternalChildURL); url != "" {
		runExternalChild(url) // never returns
	}
	db := payDB(t)
	p, url := httpProvider(t)
	const id = "pay-killed"
	childKeys := killedWorker(t, "TestExternalWorkerKilledAfterCallBeforeDone", db, url, id)
	afterKill := readPayRow(t, db.Pool, id)
	if afterKill.Status != "running" || afterKill.Attempts != 1 || p.Effects() != 1 {
		t.Fatalf("after the kill: row %v, %d effects; want running, attempts 1, charged once", afterKill, p.Effects())
	}

	var parentKey string
	call := chargeOverHTTP(url)
	x := idemimpl.NewExternalInbox(db.Pool, payTable, func(ctx context.Context, msg payment) (charged, error) {
		parentKey, _ = idem.KeyFrom(ctx)
		return call(ctx, msg)
	}, idem.WithLease(childLease))
	msg := payment{ID: id, Amount: chargeAmount}
	_, _, early := x.Handle(context.Background(), msg)
	if !errors.Is(early, idem.ErrInProgress) {
		t.Errorf("redelivery while the dead worker's lease lives: %v; want ErrInProgress", early)
	}
	waitLeaseExpired(t, db.Pool, id, 10*childLease)
	r, o, err := x.Handle(context.Background(), msg)
	row := readPayRow(t, db.Pool, id)
	keys := p.Keys()
	want := idem.ExternalKey(payConsumer, []any{id})
	t.Logf("killed worker: row %v; redelivery during its lease: %v", afterKill, early)
	t.Logf("redelivery after the lease: %v %v %v; row %v; provider calls=%d effects=%d; keys child=%s parent=%s",
		r, o, err, row, p.Calls(), p.Effects(), childKeys[id], parentKey)
	if err != nil || o != idem.Processed || r.ChargeID != "eff_1" {
		t.Errorf("redelivery: %v %v %v; want Processed with the first charge's id eff_1", r, o, err)
	}
	if row.Status != "done" || row.Attempts != 2 || row.Fence != 2 {
		t.Errorf("row %v; want done, attempts 2, fence 2", row)
	}
	if p.Calls() != 2 || p.Effects() != 1 || len(keys) != 2 || keys[0] != want || keys[1] != want || childKeys[id] != want || parentKey != want {
		t.Errorf("provider: %d calls, %d effects, keys %v (child %s, parent %s); want 2 calls with the key %s, charged once",
			p.Calls(), p.Effects(), keys, childKeys[id], parentKey, want)
	}
}

// TestExternalSweeperResetsDeadClaims (must-show 5): workers that die holding
// claims leave them running; once their leases run out the sweeper resets
// them to released with attempts + 1. A handler that dies every time shows
// its attempts climbing in the sweeper's reports (stuck above 3 attempts),
// until a delivery that completes ends it done, charged once; the others
// stay released for their redeliveries.
func TestExternalSweeperResetsDeadClaims(t *testing.T) {
	if url := os.Getenv(envExternalChildURL); url != "" {
		runExternalChild(url) // never returns
	}
	const test = "TestExternalSweeperResetsDeadClaims"
	db := payDB(t)
	p, url := httpProvider(t)
	x := idemimpl.NewExternalInbox(db.Pool, payTable, chargeOverHTTP(url), idem.WithLease(childLease))
	ids := []string{"pay-dies-always", "pay-dead-2", "pay-dead-3", "pay-dead-4", "pay-dead-5"}
	expired := func(n int) {
		t.Helper()
		relaytest.WaitFor(t, 10*childLease, fmt.Sprintf("%d expired claims", n), func() bool {
			return relaytest.QueryInt(t, db.Pool, `SELECT count(*)::int FROM idem_test_pay WHERE status = 'running' AND lease_until < now()`) == n
		})
	}
	sweep := func() idem.SweepReport {
		t.Helper()
		rep, err := x.Sweep(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	stuckText := func(rep idem.SweepReport) string {
		var parts []string
		for _, s := range rep.Stuck {
			parts = append(parts, fmt.Sprintf("%s…:%s:%d", s.Key[:8], s.Status, s.Attempts))
		}
		return "[" + strings.Join(parts, " ") + "]"
	}

	killedWorker(t, test, db, url, ids...)
	expired(len(ids))
	if rep := sweep(); rep.Reset != int64(len(ids)) || len(rep.Stuck) != 0 {
		t.Errorf("first sweep: reset %d, stuck %s; want %d reset, none stuck (attempts 2)", rep.Reset, stuckText(rep), len(ids))
	} else {
		t.Logf("round 1: a worker died holding %d claims; the sweep reset %d, stuck %s", len(ids), rep.Reset, stuckText(rep))
	}
	if n := relaytest.QueryInt(t, db.Pool, `SELECT count(*)::int FROM idem_test_pay WHERE status = 'released' AND attempts = 2 AND fence = 2 AND lease_until IS NULL`); n != len(ids) {
		t.Errorf("%d of %d rows released with attempts 2 and fence 2 after the first sweep", n, len(ids))
	}
	if rep := sweep(); rep.Reset != 0 {
		t.Errorf("a second sweep reset %d claims; want 0: each is reset once", rep.Reset)
	}

	dying := ids[0]
	var climbed []int
	for round := 2; round <= 4; round++ {
		killedWorker(t, test, db, url, dying)
		if r := readPayRow(t, db.Pool, dying); r.Status != "running" || r.Attempts != round {
			t.Errorf("round %d: the claim of a released row: %v; want running, attempts %d kept", round, r, round)
		}
		expired(1)
		rep := sweep()
		row := readPayRow(t, db.Pool, dying)
		climbed = append(climbed, row.Attempts)
		t.Logf("round %d: the worker died again; the sweep reset %d; row %v; stuck %s", round, rep.Reset, row, stuckText(rep))
		wantStuck := 0
		if row.Attempts > idem.DefaultStuckAttempts {
			wantStuck = 1
		}
		if rep.Reset != 1 || row.Status != "released" || row.Attempts != round+1 || len(rep.Stuck) != wantStuck {
			t.Errorf("round %d: reset %d, row %v, stuck %s; want 1 reset, released with attempts %d, %d stuck", round, rep.Reset, row, stuckText(rep), round+1, wantStuck)
		}
		if wantStuck == 1 && (rep.Stuck[0].Key != idem.ExternalKey(payConsumer, []any{dying}) || rep.Stuck[0].Attempts != round+1 || rep.Stuck[0].Status != "released" || rep.Consumer != payConsumer) {
			t.Errorf("round %d: stuck %+v of %s; want the dying key with attempts %d", round, rep.Stuck[0], rep.Consumer, round+1)
		}
	}
	r, o, err := x.Handle(context.Background(), payment{ID: dying, Amount: chargeAmount})
	row := readPayRow(t, db.Pool, dying)
	rep := sweep()
	t.Logf("attempts climbed %v; then a delivery that lives: %v %v %v, row %v; provider calls=%d effects=%d; the last sweep: reset %d, stuck %s",
		climbed, r, o, err, row, p.Calls(), p.Effects(), rep.Reset, stuckText(rep))
	if err != nil || o != idem.Processed || row.Status != "done" || row.Attempts != 5 {
		t.Errorf("the surviving delivery: %v %v, row %v; want Processed, done with attempts 5", o, err, row)
	}
	if p.Effects() != len(ids) || p.Calls() != len(ids)+3+1 {
		t.Errorf("provider: %d calls, %d effects; want %d calls, %d effects (one per key)", p.Calls(), p.Effects(), len(ids)+4, len(ids))
	}
	if rep.Reset != 0 || len(rep.Stuck) != 0 {
		t.Errorf("the last sweep: reset %d, stuck %s; want nothing", rep.Reset, stuckText(rep))
	}
}

// TestExternalTwoSweepersResetOnce: two sweepers at once over 10000
// expired claims reset each of them exactly once (attempts 2, fence 2),
// together 10000.
func TestExternalTwoSweepersResetOnce(t *testing.T) {
	const rows = 10000
	db := payDB(t)
	if _, err := db.Pool.Exec(context.Background(), `INSERT INTO idem_test_pay (idem_key, key_id, fingerprint, status, fence, attempts, lease_until)
		SELECT 'k' || i, 'id-' || i, '\x01', 'running', 1, 1, now() - interval '1 minute' FROM generate_series(1, $1) AS i`, rows); err != nil {
		t.Fatal(err)
	}
	var resets [2]int64
	var took [2]time.Duration
	idemtest.AtOnce(2, func(i int) {
		x := idemimpl.NewExternalInbox(db.Pool, payTable, charge(idemtest.NewProvider()))
		began := time.Now()
		rep, err := x.Sweep(context.Background())
		took[i] = time.Since(began)
		if err != nil {
			t.Error(err)
		}
		resets[i] = rep.Reset
	})
	once := relaytest.QueryInt(t, db.Pool, `SELECT count(*)::int FROM idem_test_pay WHERE status = 'released' AND attempts = 2 AND fence = 2`)
	t.Logf("two sweepers at once over %d expired claims: reset %d (in %v) and %d (in %v); %d rows reset exactly once",
		rows, resets[0], took[0].Round(time.Millisecond), resets[1], took[1].Round(time.Millisecond), once)
	if resets[0]+resets[1] != rows || once != rows {
		t.Errorf("reset %d + %d, %d rows with attempts 2; want %d in all, each once", resets[0], resets[1], once, rows)
	}
}
