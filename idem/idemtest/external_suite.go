package idemtest

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/idem"
)

// The scenarios of an ExternalSuite, in the order Run runs them. Each one is
// a subtest of that name.
const (
	// ScenarioExternalConcurrent: N deliveries of one message at once while
	// the first run is held between its handler and its done: one run, the
	// N-1 others idem.ErrInProgress at once (while the run is still held);
	// after done, N redeliveries at once are Duplicates with the stored
	// result and run nothing.
	ScenarioExternalConcurrent = "concurrent_during_run"
	// ScenarioExternalTakeover: a worker dies after its handler (its
	// provider call) and before its done; once its lease has run out, the
	// redelivery takes the key over once: a second run, attempts = 2, done,
	// and the provider, given the same key, applies no second effect.
	ScenarioExternalTakeover = "lease_takeover"
	// ScenarioExternalHeartbeat: a run held for three leases keeps its claim
	// through heartbeats: every duplicate meanwhile is idem.ErrInProgress,
	// the run ends Processed with attempts = 1.
	ScenarioExternalHeartbeat = "heartbeat_keeps_claim"
	// ScenarioExternalClaimLost: a claim whose fence is bumped by hand while
	// its run is held (as a takeover does) cancels the run's context with
	// cause idem.ErrClaimLost, and the worker cannot write done: its
	// delivery fails with idem.ErrClaimLost, the row is not done.
	ScenarioExternalClaimLost = "claim_lost"
	// ScenarioExternalKeyReused: a message with the key of a processed one
	// and another payload gets idem.ErrKeyReused and runs nothing; the
	// original is still a Duplicate.
	ScenarioExternalKeyReused = "key_reused"
	// ScenarioExternalHandlerError: a run that fails releases the claim
	// (released, attempts = 2) and returns the error; the retry is
	// Processed, done with attempts = 2.
	ScenarioExternalHandlerError = "handler_error_retry"
)

// ExternalLease is the lease of the consumers under test in an
// ExternalSuite's scenarios (idem.WithLease), whatever the directive's: it
// keeps the takeovers quick, and leaves the heartbeats (every third of it)
// room on a loaded machine: at a second, a test binary starved of CPU for
// two thirds of a second (go test runs the other packages beside it) let a
// held run's lease lapse, and the run was rightly cancelled.
const ExternalLease = 2 * time.Second

// How long the external scenarios wait for what must happen; they bound
// failures, not passes.
const (
	externalHoldTimeout = 10 * time.Second
	externalLeaseWait   = 10 * ExternalLease
)

// ExternalFixture is what a mode=external handler's scenarios need from the
// handler's package. A fixture function, named by the directive's fixture=,
// returns one for each scenario with the scenario's Provider, which it wires
// into the receiver, so that the handler makes its external call to it
// with idem.KeyFrom(ctx):
//
//	func payoutFixture(t testing.TB, p *idemtest.Provider) idemtest.ExternalFixture[*Service, PayoutRequested]
type ExternalFixture[V, M any] struct {
	// Receiver is the value the handler is a method of; NoReceiver{} for a
	// plain function.
	Receiver V
	// Message is the message the scenario delivers; the handler must
	// process it successfully.
	Message M
	// Variant, optional, is a message with Message's key and another
	// payload, for ScenarioExternalKeyReused; without it the Suite's Variant
	// is used, and without either the scenario is not run.
	Variant *M

	// sampled: the fixture is SampledExternal's, for a handler without
	// fixture=.
	sampled bool
}

// SampledExternal is Sampled for a mode=external handler: the fixture
// function of a handler without fixture=. The scenario builds the receiver:
// its fields of database handle types hold the scenario's pool, and its
// fields of an interface *Provider satisfies hold the scenario's Provider.
// The handler runs with no transaction open, so its writes through that
// pool are its effect, as a provider call is; it must key them by
// idem.KeyFrom(ctx), since a takeover or a retry runs it again.
func SampledExternal[V, M any](set func(msg *M)) func(t testing.TB, p *Provider) ExternalFixture[V, M] {
	return func(t testing.TB, p *Provider) ExternalFixture[V, M] {
		msg := Sample[M]()
		if set != nil {
			set(&msg)
		}
		return ExternalFixture[V, M]{Message: msg, sampled: true}
	}
}

// causeRerun is what an effect beyond one delivery's after a run that
// repeats (a takeover, a retry) means.
const causeRerun = "a mode=external handler runs again after a takeover or a failed run, so its effect must be keyed by idem.KeyFrom(ctx) " +
	"(INSERT ... ON CONFLICT DO NOTHING on that key, or the provider's idempotency key)"

// ExternalSuite runs the scenarios that prove a mode=external consumer's
// guarantee against a real PostgreSQL, each in a fresh schema with the
// migrations applied and with a fresh Provider. idemgen generates one per
// mode=external handler in idem_gen_test.go.
//
// The scenarios count the runs of the handler, hold a run between its
// handler and its done and fail one, through the idem.WithBeforeComplete
// hook among the options New receives. A consumer that is not built on
// idemimpl.ExternalInbox must call BeforeComplete(ctx) with the handler's
// context after its handler returned and before it marks the key done. When
// the handler calls the scenario's Provider, the scenarios also check that a
// rerun gives it the same key (no second effect); a handler without a
// fixture does not, and those checks are left out.
type ExternalSuite[V, M, R any] struct {
	// Migrations are the goose migrations that create the handler's tables
	// and its mode=external table.
	Migrations fs.FS
	// Inbox is the mode=external table, as its migration names it.
	Inbox string
	// Lease is the directive's lease; the scenarios run with ExternalLease
	// instead, and report the directive's in their messages.
	Lease time.Duration
	// New builds the consumer under test on pool, with the fixture's
	// receiver. It must pass opts on to the wrapper's constructor.
	New func(recv V, pool *pgxpool.Pool, opts ...idem.Option) HandleFunc[M, R]
	// Fixture returns the receiver and the message of a scenario, wired to
	// the scenario's provider.
	Fixture func(t testing.TB, p *Provider) ExternalFixture[V, M]
	// Variant is used by ScenarioExternalKeyReused when the fixture supplies
	// none.
	Variant func(msg M) M
	// Deliveries is N of ScenarioExternalConcurrent; 0 means EnvDeliveries,
	// or else DefaultDeliveries.
	Deliveries int
	// Options are given to New before the scenarios' own (the lease and the
	// before-complete hook).
	Options []idem.Option
}

// Run runs the scenarios as subtests of t, in order. Without a configured
// database it skips t (or fails it, see DatabaseURL). ScenarioExternalKeyReused
// is left out, with a log line, when neither the fixture nor the Suite
// supplies a Variant.
func (s ExternalSuite[V, M, R]) Run(t *testing.T) {
	t.Helper()
	DatabaseURL(t)
	for _, sc := range s.scenarios(&fixtureSeen{caller: callerOf(1)}) {
		if ok, why := sc.applies(); !ok {
			t.Logf("%s: not run: %s", sc.Name, why)
			continue
		}
		t.Run(sc.Name, func(t *testing.T) { sc.Run(t) })
	}
}

// Scenarios returns the scenarios of the ExternalSuite, in order.
// ScenarioExternalKeyReused fails when no Variant is supplied; Run leaves it
// out instead.
func (s ExternalSuite[V, M, R]) Scenarios() []Scenario { return s.scenarios(&fixtureSeen{}) }

func (s ExternalSuite[V, M, R]) scenarios(seen *fixtureSeen) []Scenario {
	always := func() (bool, string) { return true, "" }
	return []Scenario{
		{Name: ScenarioEffect, Run: func(t testing.TB) { effectScenario(t, &seen.ref, func() { s.learnEffect(t, seen, true) }) }, applies: always},
		{Name: ScenarioExternalConcurrent, Run: func(t testing.TB) { s.concurrent(t, seen) }, applies: always},
		{Name: ScenarioExternalTakeover, Run: func(t testing.TB) { s.takeover(t, seen) }, applies: always},
		{Name: ScenarioExternalHeartbeat, Run: func(t testing.TB) { s.heartbeat(t, seen) }, applies: always},
		{Name: ScenarioExternalClaimLost, Run: func(t testing.TB) { s.claimLost(t, seen) }, applies: always},
		{Name: ScenarioExternalKeyReused, Run: func(t testing.TB) { s.keyReused(t, seen) }, applies: func() (bool, string) {
			if s.Variant != nil {
				return true, ""
			}
			return seen.applies(func(p fixtureParts) bool { return p.variant },
				"neither the fixture nor the suite supplies a Variant (a message with the same key and another payload)")
		}},
		{Name: ScenarioExternalHandlerError, Run: func(t testing.TB) { s.handlerError(t, seen) }, applies: always},
	}
}

type completeHookKey struct{}

// BeforeComplete runs the before-complete hook of the ExternalSuite scenario
// that ctx belongs to, and does nothing outside a scenario. A mode=external
// consumer that is not built on idemimpl.ExternalInbox calls it with the
// handler's context after the handler returned successfully and before it
// marks the key done (where idem calls a WithBeforeComplete hook), and
// handles an error from it like an error of the handler.
func BeforeComplete(ctx context.Context) error {
	hook, _ := ctx.Value(completeHookKey{}).(func(context.Context) error)
	if hook == nil {
		return nil
	}
	return hook(ctx)
}

// externalScenario is one run of a scenario: its schema, provider, fixture,
// pool and consumer.
type externalScenario[V, M, R any] struct {
	s      ExternalSuite[V, M, R]
	t      testing.TB
	ctx    context.Context
	db     *DB
	p      *Provider
	fx     ExternalFixture[V, M]
	app    string
	pool   *pgxpool.Pool
	handle HandleFunc[M, R]

	// runs counts the calls of the before-complete hook: the handler's
	// successful runs.
	runs atomic.Int64
	// atComplete is what the hook does beyond counting; n is the run.
	atComplete func(ctx context.Context, n int64) error

	check  stateCheck
	advice string
}

func (s ExternalSuite[V, M, R]) start(t testing.TB, seen *fixtureSeen, conns int) *externalScenario[V, M, R] {
	t.Helper()
	if s.New == nil || s.Fixture == nil || s.Inbox == "" {
		t.Fatal("idemtest: an ExternalSuite needs New, Fixture and Inbox")
	}
	sc := &externalScenario[V, M, R]{s: s, t: t, p: NewProvider()}
	ctx, cancel := context.WithTimeout(context.Background(), scenarioTimeout)
	t.Cleanup(cancel)
	sc.db = New(t, s.Migrations)
	sc.fx = s.Fixture(t, sc.p)
	seen.record(fixtureParts{variant: sc.fx.Variant != nil})
	sc.ctx = context.WithValue(ctx, completeHookKey{}, sc.beforeComplete)
	sc.check = stateCheck{t: t, ctx: sc.ctx, pool: sc.db.Pool, schema: sc.db.Schema, skip: []string{s.Inbox}, ref: &seen.ref}
	if sc.fx.sampled {
		sc.fx.Receiver = sampleReceiver[V](t, sc.db, sc.p)
		sc.advice = fixtureAdvice[V, M](seen.caller, "ExternalFixture", "p *idemtest.Provider")
	}
	sc.app = sc.db.Schema + "_1"
	sc.pool = openPool(t, sc.db, sc.app, conns)
	sc.handle = sc.newConsumer(sc.pool)
	return sc
}

func (sc *externalScenario[V, M, R]) newConsumer(pool *pgxpool.Pool) HandleFunc[M, R] {
	opts := append(append([]idem.Option{WithTestLogger(sc.t)}, sc.s.Options...),
		idem.WithLease(ExternalLease), idem.WithBeforeComplete(sc.beforeComplete))
	handle := sc.s.New(sc.fx.Receiver, pool, opts...)
	if handle == nil {
		sc.t.Fatal("idemtest: ExternalSuite.New returned a nil HandleFunc")
	}
	return handle
}

func (sc *externalScenario[V, M, R]) beforeComplete(ctx context.Context) error {
	n := sc.runs.Add(1)
	if sc.atComplete == nil {
		return nil
	}
	return sc.atComplete(ctx, n)
}

func (sc *externalScenario[V, M, R]) deliver(handle HandleFunc[M, R], msg M) delivery[R] {
	r, o, err := handle(sc.ctx, msg)
	return delivery[R]{r, o, err}
}

func (sc *externalScenario[V, M, R]) mustProcess(what string, msg M) delivery[R] {
	sc.t.Helper()
	d := sc.deliver(sc.handle, msg)
	if d.err != nil || d.o != idem.Processed {
		if sc.fx.sampled {
			sc.t.Fatalf("%s: got %v; want Processed. The sample message was %s.\nIf the handler needs data that is not there, or another message, %s", what, d, encode(msg), sc.advice)
		}
		sc.t.Fatalf("%s: got %v; want Processed (does the fixture's message suit the handler?)", what, d)
	}
	return d
}

// needEffect learns what one delivery does, and stops the scenario when a
// sample message showed nothing.
func (s ExternalSuite[V, M, R]) needEffect(t testing.TB, seen *fixtureSeen) {
	t.Helper()
	s.learnEffect(t, seen, false)
	seen.ref.stopIfHalted(t)
}

// learnEffect learns what one delivery does (ScenarioEffect), once per run:
// the state of the test schema, or else the provider's effects.
func (s ExternalSuite[V, M, R]) learnEffect(t testing.TB, seen *fixtureSeen, first bool) {
	t.Helper()
	seen.ref.learn(s.Migrations, first, func(d *delivered) {
		sc := s.start(t, seen, 2)
		d.sampled, d.advice, d.message = sc.fx.sampled, sc.advice, encode(sc.fx.Message)
		d.before = sc.check.read("before the first delivery")
		sc.mustProcess("the first delivery", sc.fx.Message)
		d.after = sc.check.read("after the first delivery")
		var err error
		if d.volatile, err = volatileByDefinition(sc.ctx, sc.db.Pool, sc.db.Schema); err != nil {
			t.Fatal(err)
		}
		d.provider = sc.p.Effects()
	})
}

func (sc *externalScenario[V, M, R]) wantDuplicate(what string, d, first delivery[R]) {
	sc.t.Helper()
	if d.err != nil || d.o != idem.Duplicate {
		sc.t.Errorf("%s: got %v; want Duplicate with the stored result %s", what, d, resultText(first.r))
		return
	}
	if !sameResult(d.r, first.r) {
		sc.t.Errorf("%s: Duplicate with result %s; want the stored result of the first delivery, %s", what, resultText(d.r), resultText(first.r))
	}
}

func (sc *externalScenario[V, M, R]) wantRuns(want int64, why string) {
	sc.t.Helper()
	if got := sc.runs.Load(); got != want {
		sc.t.Errorf("the handler ran %d time(s) to its end (counted by the before-complete hook); want %d: %s", got, want, why)
	}
}

// externalRow is the one row of the scenario's table.
type externalRow struct {
	key      string
	status   string
	fence    int64
	attempts int
	result   bool
}

func (r externalRow) String() string {
	return fmt.Sprintf("status %s, fence %d, attempts %d, result stored: %v", r.status, r.fence, r.attempts, r.result)
}

func (sc *externalScenario[V, M, R]) table() string {
	return pgx.Identifier(strings.Split(sc.s.Inbox, ".")).Sanitize()
}

// row reads the table's one row, failing the scenario unless there is
// exactly one.
func (sc *externalScenario[V, M, R]) row(when string) externalRow {
	sc.t.Helper()
	rows, err := sc.db.Pool.Query(sc.ctx, "SELECT idem_key, status, fence, attempts, result IS NOT NULL FROM "+sc.table())
	if err != nil {
		sc.t.Fatalf("read the table %s: %v", sc.s.Inbox, err)
	}
	defer rows.Close()
	var all []externalRow
	for rows.Next() {
		var r externalRow
		if err := rows.Scan(&r.key, &r.status, &r.fence, &r.attempts, &r.result); err != nil {
			sc.t.Fatalf("read the table %s: %v", sc.s.Inbox, err)
		}
		all = append(all, r)
	}
	if err := rows.Err(); err != nil {
		sc.t.Fatalf("read the table %s: %v", sc.s.Inbox, err)
	}
	if len(all) != 1 {
		sc.t.Fatalf("%s: %d row(s) in the table %s; want 1", when, len(all), sc.s.Inbox)
	}
	return all[0]
}

// wantRow checks the row's status and attempts.
func (sc *externalScenario[V, M, R]) wantRow(when, status string, attempts int) externalRow {
	sc.t.Helper()
	r := sc.row(when)
	if r.status != status || r.attempts != attempts {
		sc.t.Errorf("%s: the row has %v; want status %s with attempts %d", when, r, status, attempts)
	}
	return r
}

// providerState is what the provider had seen at a point of a scenario.
type providerState struct{ calls, effects int }

func (sc *externalScenario[V, M, R]) provider() providerState {
	return providerState{sc.p.Calls(), sc.p.Effects()}
}

// wantSameKeys checks, when the handler calls the provider, that the runs
// since before called it again and applied no new effect: they gave it the
// same idempotency keys.
func (sc *externalScenario[V, M, R]) wantSameKeys(before providerState, why string) {
	sc.t.Helper()
	if before.calls == 0 {
		sc.t.Logf("the handler did not call the scenario's Provider (a fixture wires it into the receiver): the provider checks are not run")
		return
	}
	now := sc.provider()
	switch {
	case now.calls <= before.calls:
		sc.t.Errorf("%s: the provider received no call in the rerun (calls %d before, %d after); want the rerun to call it again with the same key", why, before.calls, now.calls)
	case now.effects != before.effects:
		sc.t.Errorf("%s: the provider applied %d effect(s) after the rerun, %d before it: the rerun gave it other idempotency keys (it received %v); use idem.KeyFrom(ctx)",
			why, now.effects, before.effects, sc.p.Keys())
	}
}

// wantNoNewEffects checks that nothing since before reached the provider.
func (sc *externalScenario[V, M, R]) wantNoNewCalls(before providerState, why string) {
	sc.t.Helper()
	if now := sc.provider(); now.calls != before.calls {
		sc.t.Errorf("%s: the provider received %d more call(s); want none", why, now.calls-before.calls)
	}
}

// waitExpired waits until the row's lease has run out in the database.
func (sc *externalScenario[V, M, R]) waitExpired(what string) {
	sc.t.Helper()
	deadline := time.Now().Add(externalLeaseWait)
	for {
		var n int
		if err := sc.db.Pool.QueryRow(sc.ctx, "SELECT count(*) FROM "+sc.table()+" WHERE status = 'running' AND lease_until < now()").Scan(&n); err != nil {
			sc.t.Fatalf("watch the lease in %s: %v", sc.s.Inbox, err)
		}
		if n == 1 {
			return
		}
		if time.Now().After(deadline) {
			sc.t.Fatalf("%s: the lease did not run out within %v (the lease is %v): %v", what, externalLeaseWait, ExternalLease, sc.row(what))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// hold is a run held in the before-complete hook.
type hold struct {
	arrived  chan struct{}
	released chan struct{}
	// cause is context.Cause of the run's context when it was cancelled
	// while held.
	cause atomic.Value
}

func newHold() *hold { return &hold{arrived: make(chan struct{}), released: make(chan struct{})} }

// wait holds the run until release, recording a cancellation of its
// context.
func (h *hold) wait(ctx context.Context) {
	close(h.arrived)
	select {
	case <-h.released:
		return
	case <-ctx.Done():
		h.cause.Store(causeOf(ctx))
	}
	<-h.released
}

type boxedErr struct{ err error }

func causeOf(ctx context.Context) boxedErr { return boxedErr{context.Cause(ctx)} }

func (h *hold) cancelled() (error, bool) {
	b, ok := h.cause.Load().(boxedErr)
	return b.err, ok
}

func (h *hold) waitArrived(t testing.TB, what string) {
	t.Helper()
	select {
	case <-h.arrived:
	case <-time.After(externalHoldTimeout):
		t.Fatalf("%s: the run did not reach its end within %v", what, externalHoldTimeout)
	}
}

// The scenarios.

func (s ExternalSuite[V, M, R]) concurrent(t testing.TB, seen *fixtureSeen) {
	t.Helper()
	n := Suite[V, M, R]{Deliveries: s.Deliveries}.deliveries(t)
	s.needEffect(t, seen)
	sc := s.start(t, seen, n+2)
	Warm(t, sc.pool, n)

	var returned atomic.Int64
	var heldErr error
	sc.atComplete = func(ctx context.Context, run int64) error {
		if run != 1 {
			return nil
		}
		deadline := time.Now().Add(externalHoldTimeout)
		for returned.Load() < int64(n-1) {
			if time.Now().After(deadline) {
				heldErr = fmt.Errorf("the first run was held %v, but only %d of the other %d deliveries returned meanwhile: a delivery of a key whose claim is live must return idem.ErrInProgress at once",
					externalHoldTimeout, returned.Load(), n-1)
				return nil
			}
			time.Sleep(2 * time.Millisecond)
		}
		return nil
	}
	results := make([]delivery[R], n)
	took := make([]time.Duration, n)
	AtOnce(n, func(i int) {
		began := time.Now()
		results[i] = sc.deliver(sc.handle, sc.fx.Message)
		took[i] = time.Since(began)
		returned.Add(1)
	})
	if heldErr != nil {
		t.Error(heldErr)
	}
	var processed, inProgress int
	var first delivery[R]
	var slowest time.Duration
	var other []string
	for i, d := range results {
		switch {
		case d.err == nil && d.o == idem.Processed:
			processed++
			first = d
		case errors.Is(d.err, idem.ErrInProgress):
			inProgress++
			slowest = max(slowest, took[i])
		default:
			other = append(other, d.String())
		}
	}
	if len(other) > 0 {
		t.Errorf("%d of %d deliveries during the run were neither Processed nor ErrInProgress:\n%s", len(other), n, summarize(other))
	}
	if processed != 1 || inProgress != n-1 {
		t.Fatalf("of %d deliveries at once, %d were Processed and %d ErrInProgress; want 1 and %d", n, processed, inProgress, n-1)
	}
	sc.wantRuns(1, "the deliveries that found the key claimed must not run it")
	sc.wantRow(fmt.Sprintf("after %d deliveries at once", n), "done", 1)
	calls := sc.provider()
	t.Logf("%d deliveries at once: 1 Processed, %d ErrInProgress (the slowest in %v) while the run was held", n, inProgress, slowest.Round(time.Microsecond))

	dups := make([]delivery[R], n)
	AtOnce(n, func(i int) { dups[i] = sc.deliver(sc.handle, sc.fx.Message) })
	for _, d := range dups {
		sc.wantDuplicate("a redelivery after done", d, first)
	}
	sc.wantRuns(1, "a redelivery after done must not run the handler")
	sc.wantNoNewCalls(calls, "the redeliveries after done")
	if calls.effects > 1 {
		t.Errorf("the provider applied %d effects after one run; want 1", calls.effects)
	}
	sc.check.wantOneDelivery(fmt.Sprintf("%d concurrent copies and %d redeliveries after done", n, n), "the copies that found the key claimed must not run it")
}

func (s ExternalSuite[V, M, R]) takeover(t testing.TB, seen *fixtureSeen) {
	t.Helper()
	s.needEffect(t, seen)
	sc := s.start(t, seen, 4)
	poolA := openPool(t, sc.db, sc.db.Schema+"_dying", 2)
	dying := sc.newConsumer(poolA)
	h := newHold()
	sc.atComplete = func(ctx context.Context, run int64) error {
		if run == 1 {
			h.wait(ctx)
		}
		return nil
	}
	aDone := make(chan delivery[R], 1)
	go func() { aDone <- sc.deliver(dying, sc.fx.Message) }()
	h.waitArrived(t, "the worker that dies")
	afterFirst := sc.provider()
	// The worker dies: its heartbeats and its done find no database any more.
	poolA.Close()
	sc.waitExpired("after the worker died")

	d := sc.deliver(sc.handle, sc.fx.Message)
	close(h.released)
	a := <-aDone
	if d.err != nil || d.o != idem.Processed {
		t.Errorf("the redelivery after the dead worker's lease ran out: got %v; want Processed (it takes the expired claim over)", d)
	}
	if a.err == nil && a.o == idem.Processed {
		t.Errorf("the dead worker's delivery was Processed too; want it to fail: its claim was taken over")
	}
	sc.wantRuns(2, "the dead worker's run and the takeover")
	sc.wantRow("after the takeover", "done", 2)
	sc.wantSameKeys(afterFirst, "the takeover after the dead worker's call")
	sc.check.wantOneDelivery("the run of the worker that died and the takeover's rerun", causeRerun)
	t.Logf("the worker died after its run; after the lease of %v (the directive's: %v) the redelivery took over: %v; the dead worker got %v", ExternalLease, s.Lease, d, a)
}

func (s ExternalSuite[V, M, R]) heartbeat(t testing.TB, seen *fixtureSeen) {
	t.Helper()
	s.needEffect(t, seen)
	sc := s.start(t, seen, 4)
	const heldFor = 3 * ExternalLease
	h := newHold()
	sc.atComplete = func(ctx context.Context, run int64) error {
		if run != 1 {
			return nil
		}
		close(h.arrived)
		select {
		case <-time.After(heldFor):
		case <-ctx.Done():
			h.cause.Store(causeOf(ctx))
		}
		return nil
	}
	done := make(chan delivery[R], 1)
	began := time.Now()
	go func() { done <- sc.deliver(sc.handle, sc.fx.Message) }()
	h.waitArrived(t, "the long run")
	var dups int
	var bad []string
	for time.Since(began) < heldFor-ExternalLease/4 {
		d := sc.deliver(sc.handle, sc.fx.Message)
		dups++
		if !errors.Is(d.err, idem.ErrInProgress) {
			bad = append(bad, fmt.Sprintf("%v into the run: %v", time.Since(began).Round(10*time.Millisecond), d))
		}
		time.Sleep(ExternalLease / 4)
	}
	d := <-done
	if len(bad) > 0 {
		t.Errorf("%d of %d duplicates during a run of %v (lease %v) were not ErrInProgress; the heartbeats must keep the claim:\n%s", len(bad), dups, heldFor, ExternalLease, summarize(bad))
	}
	if cause, ok := h.cancelled(); ok {
		t.Errorf("the long run's context was cancelled (cause %v); want its claim kept by the heartbeats", cause)
	}
	if d.err != nil || d.o != idem.Processed {
		t.Errorf("the run held for %v: got %v; want Processed", heldFor, d)
	}
	sc.wantRuns(1, "the claim was never lost")
	sc.wantRow("after the long run", "done", 1)
	sc.check.wantOneDelivery("the long run and its duplicates", "a duplicate during the run must change nothing")
	t.Logf("a run held %v with a lease of %v: %v; %d duplicates meanwhile", heldFor, ExternalLease, d, dups)
}

func (s ExternalSuite[V, M, R]) claimLost(t testing.TB, seen *fixtureSeen) {
	t.Helper()
	s.needEffect(t, seen)
	sc := s.start(t, seen, 4)
	h := newHold()
	sc.atComplete = func(ctx context.Context, run int64) error {
		if run == 1 {
			h.wait(ctx)
		}
		return nil
	}
	done := make(chan delivery[R], 1)
	go func() { done <- sc.deliver(sc.handle, sc.fx.Message) }()
	h.waitArrived(t, "the run whose claim is stolen")
	if _, err := sc.db.Pool.Exec(sc.ctx, "UPDATE "+sc.table()+" SET fence = fence + 1"); err != nil {
		t.Fatalf("bump the fence: %v", err)
	}
	stole := time.Now()
	deadline := stole.Add(2 * ExternalLease)
	for {
		if _, ok := h.cancelled(); ok || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	took := time.Since(stole)
	close(h.released)
	d := <-done
	cause, cancelled := h.cancelled()
	switch {
	case !cancelled:
		t.Errorf("the run's context was not cancelled within %v after its fence was bumped (lease %v); want the heartbeat to find the claim lost and cancel it", 2*ExternalLease, ExternalLease)
	case !errors.Is(cause, idem.ErrClaimLost):
		t.Errorf("the run's context was cancelled with cause %v; want idem.ErrClaimLost", cause)
	}
	if !errors.Is(d.err, idem.ErrClaimLost) {
		t.Errorf("the delivery whose claim was stolen: got %v; want idem.ErrClaimLost (it must not write done)", d)
	}
	r := sc.row("after the stolen claim")
	if r.status == "done" || r.result {
		t.Errorf("after the stolen claim the row has %v; want it not done by the robbed worker", r)
	}
	t.Logf("fence bumped while the run was held: context cancelled after %v (cause %v); the delivery got %v", took.Round(time.Millisecond), cause, d)
}

func (s ExternalSuite[V, M, R]) keyReused(t testing.TB, seen *fixtureSeen) {
	t.Helper()
	s.needEffect(t, seen)
	sc := s.start(t, seen, 4)
	var variant M
	switch {
	case sc.fx.Variant != nil:
		variant = *sc.fx.Variant
	case s.Variant != nil:
		variant = s.Variant(sc.fx.Message)
	default:
		t.Fatal("idemtest: key_reused needs a Variant (ExternalFixture.Variant or ExternalSuite.Variant)")
	}
	first := sc.mustProcess("the first delivery", sc.fx.Message)
	calls := sc.provider()
	d := sc.deliver(sc.handle, variant)
	if !errors.Is(d.err, idem.ErrKeyReused) {
		t.Errorf("a message with the same key and another payload: got %v; want idem.ErrKeyReused", d)
	}
	sc.wantRuns(1, "a reused key must not run the handler")
	sc.wantNoNewCalls(calls, "the reused key")
	sc.wantDuplicate("the original message after the reused key", sc.deliver(sc.handle, sc.fx.Message), first)
	sc.wantRow("after the reused key", "done", 1)
	sc.check.wantOneDelivery("the delivery, its key with another payload and its duplicate", "a reused key and a duplicate must change nothing")
}

// errFirstRun is the error of the failing run of ScenarioExternalHandlerError.
var errFirstRun = errors.New("idemtest: the first run fails (handler_error_retry)")

func (s ExternalSuite[V, M, R]) handlerError(t testing.TB, seen *fixtureSeen) {
	t.Helper()
	s.needEffect(t, seen)
	sc := s.start(t, seen, 4)
	sc.atComplete = func(ctx context.Context, run int64) error {
		if run == 1 {
			return errFirstRun
		}
		return nil
	}
	d := sc.deliver(sc.handle, sc.fx.Message)
	if !errors.Is(d.err, errFirstRun) {
		t.Errorf("the failing run: got %v; want its error", d)
	}
	sc.wantRow("after the failing run", "released", 2)
	afterFirst := sc.provider()
	retry := sc.deliver(sc.handle, sc.fx.Message)
	if retry.err != nil || retry.o != idem.Processed {
		t.Errorf("the retry after the failing run: got %v; want Processed (the claim was released)", retry)
	}
	sc.wantRuns(2, "the failing run and the retry")
	sc.wantRow("after the retry", "done", 2)
	sc.wantSameKeys(afterFirst, "the retry after the failing run")
	sc.check.wantOneDelivery("the failed run and its retry", causeRerun)
}
