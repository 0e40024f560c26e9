package brokertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/consumer"
	"github.com/idemgen/idemgen/idem/idemimpl"
	"github.com/idemgen/idemgen/idem/idemtest"
)

// The claim scenarios: consumers that meet a key in progress, which is a
// wait (idem.RetryAfter), never a failure that counts against
// WithMaxAttempts or ends in the dead-letter destination.

// ClaimAdapter is what the claim scenarios need of one adapter's tests.
type ClaimAdapter struct {
	// Env is what another process needs to consume the same topology (the
	// broker's address, the names), passed through its environment.
	Env map[string]string
	// Publish puts a message with the broker message id id on the
	// topology; copy numbers the copies of one id (for Kafka, spread over
	// the partitions).
	Publish func(t testing.TB, id string, copy int, body []byte)
	// DeadLetters returns how many messages reached the dead-letter
	// destination.
	DeadLetters func(t testing.TB) int
	// Pending returns how many messages wait in the work destination, not
	// acked (or, for Kafka, not committed).
	Pending func(t testing.TB) int
}

// ClaimConsumer returns a consumer of the topology that env describes (a
// ClaimAdapter's Env), delivering to h and retrying a failure after retry.
type ClaimConsumer func(t testing.TB, env map[string]string, h idem.Handler[idem.Message[Order]], retry time.Duration, opts ...consumer.Option) Runner

const (
	envClaimChild    = "IDEM_BROKERTEST_CLAIM_CHILD"
	envClaimDB       = "IDEM_BROKERTEST_CLAIM_DB"
	envClaimProvider = "IDEM_BROKERTEST_CLAIM_PROVIDER"
	envClaimPrefix   = "IDEM_BROKERTEST_CLAIM_ENV_"
)

// The shape of the external-mode kill scenario.
const (
	// KillMessages charges go to a provider that answers after
	// KillProviderDelay; the worker is killed KillAfter after the last
	// call reached it.
	KillMessages      = 8
	KillProviderDelay = 3 * time.Second
	KillAfter         = time.Second
	// KillLease is the claims' lease, KillRetry the consumer's retry delay.
	KillLease = 6 * time.Second
	KillRetry = time.Second
)

// claimCharges is the mode=external consumer of the kill scenario, keyed on
// the broker's message id.
var claimCharges, claimMigration = idemtest.TextKeyExternal[idem.Message[Order]]("test.claims.charge", "idem_test_claims", "ID",
	func(m idem.Message[Order]) string { return m.ID })

// claimInbox charges through the provider at url with the delivery's
// idempotency key.
func claimInbox(pool *pgxpool.Pool, url string) *idemimpl.ExternalInbox[idem.Message[Order], idem.None] {
	return idemimpl.NewExternalInbox(pool, claimCharges, func(ctx context.Context, msg idem.Message[Order]) (idem.None, error) {
		key, _ := idem.KeyFrom(ctx)
		_, err := idemtest.PostProvider(ctx, http.DefaultClient, url, key, []byte(fmt.Sprint(msg.Body.Amount)))
		return idem.None{}, err
	}, idem.WithLease(KillLease))
}

// Claims runs the claim scenarios of one adapter as subtests:
// KilledExternal, SlowCopies and MissingTable. setup makes a fresh topology
// for each.
func Claims(t *testing.T, setup func(t *testing.T) ClaimAdapter, cons ClaimConsumer) {
	t.Run("KilledExternalWaitsForTheLease", func(t *testing.T) { KilledExternal(t, setup, cons) })
	t.Run("SlowCopiesInProgress", func(t *testing.T) { SlowCopies(t, setup(t), cons) })
	t.Run("MissingTableFailsFast", func(t *testing.T) { MissingTable(t, setup(t), cons) })
}

// KilledExternal is the external-mode kill scenario: KillMessages charges
// through the adapter to a provider that answers after KillProviderDelay; a
// worker (this test binary run again as a child process) claims them and is
// killed with SIGKILL KillAfter into the calls; a consumer started then
// (lease KillLease, retry delay KillRetry, consumer.WithMaxAttempts(2))
// finds every key in progress, waits for the leases instead of counting
// attempts, and processes each message once the lease has run out: claim
// attempts 2, nothing dead-lettered, one provider effect per message.
//
// The test calls it first thing: in the child process it runs the worker
// (with cons) and never returns.
func KilledExternal(t *testing.T, setup func(t *testing.T) ClaimAdapter, cons ClaimConsumer) {
	if os.Getenv(envClaimChild) != "" {
		runClaimChild(t, cons)
	}
	a := setup(t)
	fsys := fstest.MapFS{"00100_claims.sql": {Data: []byte(claimMigration)}}
	db := idemtest.New(t, fsys)

	p := idemtest.NewProvider()
	var arrived atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		arrived.Add(1)
		time.Sleep(KillProviderDelay) // the effect happens even when the caller is gone
		r2 := r.Clone(context.WithoutCancel(r.Context()))
		r2.Body = io.NopCloser(bytes.NewReader(body))
		p.ServeHTTP(w, r2)
	}))
	t.Cleanup(srv.Close)

	ids := make([]string, KillMessages)
	for i := range ids {
		ids[i] = fmt.Sprintf("charge-%d", i)
		a.Publish(t, ids[i], i, mustJSON(t, Order{OrderID: ids[i], Amount: 100 + i}))
	}

	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), envClaimChild+"=1", envClaimDB+"="+db.URL, envClaimProvider+"="+srv.URL)
	for k, v := range a.Env {
		cmd.Env = append(cmd.Env, envClaimPrefix+k+"="+v)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for arrived.Load() < KillMessages {
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("the worker made %d of %d provider calls within 60s; its output:\n%s", arrived.Load(), KillMessages, out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(KillAfter)
	_ = cmd.Process.Signal(syscall.SIGKILL)
	err := cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the worker ended with %v; want killed by SIGKILL. Its output:\n%s", err, out.String())
	}
	killedAt := time.Now()
	running := QueryInt(t, db.Pool, `SELECT count(*)::int FROM idem_test_claims WHERE status = 'running' AND attempts = 1`)
	leaseEnd := map[string]time.Time{}
	var states []string
	rows, err := db.Pool.Query(context.Background(), `SELECT key_id, status, attempts, lease_until FROM idem_test_claims ORDER BY key_id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id, status string
		var attempts int
		var end *time.Time // NULL once a claim is no longer held
		if err := rows.Scan(&id, &status, &attempts, &end); err != nil {
			t.Fatal(err)
		}
		states = append(states, fmt.Sprintf("%s %s (attempts %d)", id, status, attempts))
		if end != nil {
			leaseEnd[id] = *end
		}
	}
	rows.Close()
	if running != KillMessages {
		t.Fatalf("after the kill: %d of %d claims running with attempts 1: %s; the worker's output:\n%s", running, KillMessages, strings.Join(states, ", "), out.String())
	}

	logs, log := NewLogs(t)
	rec := &Recorder{}
	h := rec.Wrap(claimInbox(db.Pool, srv.URL), nil)
	stop := Run(t, cons(t, a.Env, h, KillRetry, consumer.WithLogger(log), consumer.WithWorkers(KillMessages), consumer.WithMaxAttempts(2)))
	WaitFor(t, 3*KillLease+60*time.Second, "every message processed", func() bool { return rec.Count(idem.Processed) >= KillMessages })
	stop()

	var inProgress, processedEarly int
	processed := map[string]int{}
	for _, d := range rec.Snapshot() {
		switch {
		case d.Outcome == idem.Processed:
			processed[d.ID]++
			if d.At.Before(leaseEnd[d.ID]) {
				processedEarly++
			}
		case errors.Is(d.Err, idem.ErrInProgress):
			inProgress++
		}
	}
	done := QueryInt(t, db.Pool, `SELECT count(*)::int FROM idem_test_claims WHERE status = 'done' AND attempts = 2`)
	dead := a.DeadLetters(t)
	waits := strings.Count(logs.String(), "the key is in progress")
	t.Logf("external-mode kill: %d charges, worker killed %v into a %v provider call, lease %v, retry delay %v", KillMessages, KillAfter, KillProviderDelay, KillLease, KillRetry)
	t.Logf("restarted consumer: %d Processed (%d before the lease ended), %d ErrInProgress deliveries (%d waits logged), claims done with attempts 2: %d, dead-lettered: %d, provider calls %d, effects %d; all processed %v after the kill",
		len(processed), processedEarly, inProgress, waits, done, dead, p.Calls(), p.Effects(), time.Since(killedAt).Round(time.Millisecond))
	for _, id := range ids {
		if processed[id] != 1 {
			t.Errorf("%s processed %d times; want once", id, processed[id])
		}
	}
	if processedEarly != 0 || inProgress == 0 || done != KillMessages || dead != 0 || p.Effects() != KillMessages {
		t.Errorf("got %d processed before the lease ended, %d ErrInProgress, %d done with attempts 2, %d dead-lettered, %d effects; want 0, some, %d, 0, %d",
			processedEarly, inProgress, done, dead, p.Effects(), KillMessages, KillMessages)
	}
}

// runClaimChild is the worker of KilledExternal: it consumes with the
// provider's delay until the parent kills it.
func runClaimChild(t *testing.T, cons ClaimConsumer) {
	env := map[string]string{}
	for _, kv := range os.Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(k, envClaimPrefix) {
			env[strings.TrimPrefix(k, envClaimPrefix)] = v
		}
	}
	pool, err := pgxpool.New(context.Background(), os.Getenv(envClaimDB))
	if err != nil {
		fmt.Fprintln(os.Stderr, "claim child:", err)
		os.Exit(3)
	}
	c := cons(t, env, claimInbox(pool, os.Getenv(envClaimProvider)), KillRetry, consumer.WithWorkers(KillMessages))
	err = c.Run(context.Background())
	fmt.Fprintln(os.Stderr, "claim child: Run returned before the kill:", err)
	os.Exit(3)
}

// SlowCopies is the tx-mode scenario: n copies of one message (each with
// its own broker message id, one key: the order) at once, to a handler that holds the key for slow
// in its transaction (the claim-first protocol, idem.WithPessimisticClaim),
// with a claim wait of a fifth of that: the copies see
// ErrInProgress (each wait counts no attempt: every delivery is attempt 1),
// and with consumer.WithMaxAttempts(2) none is dead-lettered: one is
// Processed, the others Duplicates.
func SlowCopies(t *testing.T, a ClaimAdapter, cons ClaimConsumer) {
	const (
		n    = 8
		slow = 4 * time.Second
	)
	// The inbox takes the body alone, keyed on the order: its fingerprint
	// is the copies' common payload, not their broker ids.
	table, migration := idemtest.TextKeyInbox("test.claims.slow", "idem_test_slow", "OrderID", func(o Order) string { return o.OrderID })
	db := Charges{migration: migration}.Database(t)
	inbox := idemimpl.NewInbox(db.Pool, table, func(ctx context.Context, tx pgx.Tx, o Order) (ChargeResult, error) {
		time.Sleep(slow)
		_, err := tx.Exec(ctx, `INSERT INTO charged (order_id, n, amount) VALUES ($1, 1, $2)
			ON CONFLICT (order_id) DO UPDATE SET n = charged.n + 1`, o.OrderID, o.Amount)
		return ChargeResult{Charged: o.Amount}, err
	}, idem.WithClaimWait(slow/5), idem.WithPessimisticClaim()) // the claim holds the key while the handler runs
	body := idem.HandlerFunc[idem.Message[Order]](func(ctx context.Context, msg idem.Message[Order]) (idem.Outcome, error) {
		return inbox.Deliver(ctx, msg.Body)
	})
	for i := range n {
		a.Publish(t, fmt.Sprintf("slow-1-copy-%d", i), i, mustJSON(t, Order{OrderID: "slow-1", Amount: 7}))
	}
	logs, log := NewLogs(t)
	rec := &Recorder{}
	stop := Run(t, cons(t, a.Env, rec.Wrap(body, nil), KillRetry,
		consumer.WithLogger(log), consumer.WithWorkers(n), consumer.WithMaxAttempts(2), consumer.WithBatch(1, 0)))
	WaitFor(t, 60*time.Second, "every copy acked", func() bool {
		return rec.Count(idem.Processed)+rec.Count(idem.Duplicate) >= n
	})
	stop()
	inProgress, counted := 0, 0
	perCopy := map[string]int{}
	for _, d := range rec.Snapshot() {
		if d.Attempt != 1 {
			counted++
		}
		if errors.Is(d.Err, idem.ErrInProgress) {
			inProgress++
			perCopy[d.ID]++
			if after, ok := idem.RetryAfter(d.Err); !ok || after != slow/5 {
				t.Errorf("RetryAfter(%v) = %v, %v; want the claim wait %v", d.Err, after, ok, slow/5)
			}
		}
	}
	dead := a.DeadLetters(t)
	charged := QueryInt(t, db.Pool, `SELECT coalesce(sum(n), 0)::int FROM charged`)
	t.Logf("%d copies of a message held %v: %d Processed, %d Duplicates, %d ErrInProgress deliveries (RetryAfter %v; by copy %v), %d waits logged, dead-lettered %d, charged %d",
		n, slow, rec.Count(idem.Processed), rec.Count(idem.Duplicate), inProgress, slow/5, perCopy, strings.Count(logs.String(), "the key is in progress"), dead, charged)
	if rec.Count(idem.Processed) != 1 || rec.Count(idem.Duplicate) != n-1 || inProgress < n-1 || counted != 0 || dead != 0 || charged != 1 {
		t.Errorf("%d deliveries past attempt 1; want 1 Processed, %d Duplicates, at least %d ErrInProgress, every delivery at attempt 1 (a wait is no attempt), nothing dead-lettered, charged once", counted, n-1, n-1)
	}
}

// MissingTableMigration is the migration the inbox of MissingTable names as
// the one that creates its table.
const MissingTableMigration = "migrations/00100_idem_test_missing.sql"

// MissingTable: a consumer whose handler's table is missing (a worker
// started against a database without its migrations) stops at once. Run
// returns the error of the handler's Check within a second:
// idem.ErrNotMigrated, naming the table and the migration to apply. The
// consumer has taken nothing: the message waits where it was, nothing
// dead-lettered or acked, no attempt counted.
func MissingTable(t *testing.T, a ClaimAdapter, cons ClaimConsumer) {
	charges := NewCharges("test.claims.missing", "idem_test_missing")
	charges.Table.Migration = MissingTableMigration
	db := idemtest.New(t, fstest.MapFS{"00101_charge.sql": {Data: []byte(chargeMigration)}}) // no inbox migration
	a.Publish(t, "missing-1", 0, mustJSON(t, Order{OrderID: "missing-1", Amount: 1}))
	rec := &Recorder{}
	_, log := NewLogs(t)
	c := cons(t, a.Env, rec.Wrap(charges.Inbox(db.Pool, nil), nil), KillRetry, consumer.WithLogger(log))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	began := time.Now()
	err := c.Run(ctx)
	took := time.Since(began)
	time.Sleep(200 * time.Millisecond) // let the broker settle what it would
	pending, dead := a.Pending(t), a.DeadLetters(t)
	t.Logf("a consumer without its table: Run returned in %v: %v; deliveries %d, dead-lettered %d, still waiting %d",
		took.Round(time.Millisecond), err, len(rec.Snapshot()), dead, pending)
	want := "table idem_test_missing does not exist: apply " + MissingTableMigration
	if !errors.Is(err, idem.ErrNotMigrated) || !strings.Contains(fmt.Sprint(err), want) {
		t.Errorf("Run = %v; want idem.ErrNotMigrated saying %q", err, want)
	}
	if took > time.Second || len(rec.Snapshot()) != 0 || dead != 0 || pending != 1 {
		t.Errorf("Run took %v, %d deliveries, %d dead-lettered, %d waiting; want under 1s, none, none, the message where it was", took, len(rec.Snapshot()), dead, pending)
	}
}
