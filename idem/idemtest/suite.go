package idemtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemimpl"
	"github.com/idemgen/idemgen/idem/internal/config"
)

// The scenarios of a Suite, in the order Run runs them. Each one is a subtest
// of that name.
const (
	// ScenarioConcurrent: N deliveries of one message at once give exactly
	// one Processed and N-1 Duplicates with equal results, one inbox row and
	// the business effect once. The first delivery is held inside its
	// transaction until every other one waits in PostgreSQL (or has
	// returned), so the deliveries really overlap.
	ScenarioConcurrent = "concurrent_deliveries"
	// ScenarioFailureBeforeCommit: a delivery whose connection dies inside
	// its transaction, after the handler and before the commit, leaves no
	// inbox row and no business effect; the redelivery is Processed once.
	ScenarioFailureBeforeCommit = "failure_before_commit"
	// ScenarioCrashAfterCommit: a worker that committed a delivery dies
	// before its ack; the redelivery, to a new consumer on a new pool, is a
	// Duplicate with the stored result and does not run the handler.
	ScenarioCrashAfterCommit = "crash_after_commit"
	// ScenarioKeyReused: a message with the key of a processed one and
	// another payload gets idem.ErrKeyReused and changes nothing; the
	// original is still a Duplicate with its stored result.
	ScenarioKeyReused = "key_reused"
	// ScenarioSequentialDuplicate: the same message delivered twice, one
	// after the other, is Processed, then a Duplicate with an equal result.
	ScenarioSequentialDuplicate = "sequential_duplicate"
	// ScenarioBusinessUniqueViolation: when the handler's own write violates
	// a unique constraint of a business table (set up by Fixture.Conflict),
	// the delivery fails with the handler's error, is never taken for a
	// Duplicate, and records nothing.
	ScenarioBusinessUniqueViolation = "business_unique_violation"
)

// DefaultDeliveries is the number of concurrent deliveries of
// ScenarioConcurrent when neither Suite.Deliveries nor EnvDeliveries says
// otherwise.
const DefaultDeliveries = 16

// EnvDeliveries, when set to an integer of at least 2, is the number of
// concurrent deliveries of every Suite that does not set Deliveries (the
// generated tests do not): IDEMGEN_TEST_DELIVERIES=64 go test ./...
const EnvDeliveries = "IDEMGEN_TEST_DELIVERIES"

// How long the scenarios wait. The hold is released as soon as the other
// deliveries are observed waiting, so these bound failures, not passes.
const (
	// holdTimeout bounds how long the first concurrent delivery waits for
	// the others to arrive.
	holdTimeout = 30 * time.Second
	// claimWait is the consumers' claim wait in the scenarios: longer than
	// the hold, so that a delivery waiting on the held claim never gives up
	// with ErrInProgress first.
	claimWait = holdTimeout + 30*time.Second
	// scenarioTimeout bounds one scenario.
	scenarioTimeout = 3 * time.Minute
)

// HandleFunc delivers one message to the consumer under test. A generated
// wrapper's Handle method is one; for a handler without a result, adapt it
// with NoResult.
type HandleFunc[M, R any] func(ctx context.Context, msg M) (R, idem.Outcome, error)

// NoResult adapts the Handle method of a wrapper whose handler returns only an
// error.
func NoResult[M any](handle func(ctx context.Context, msg M) (idem.Outcome, error)) HandleFunc[M, idem.None] {
	return func(ctx context.Context, msg M) (idem.None, idem.Outcome, error) {
		o, err := handle(ctx, msg)
		return idem.None{}, o, err
	}
}

// NoReceiver is the receiver type of the fixtures of plain-function handlers,
// which have none.
type NoReceiver struct{}

// Fixture is what a handler's scenarios need from the handler's package. A
// fixture function, named by the directive's fixture= option, returns one for
// each scenario:
//
//	func chargeFixture(t testing.TB, db *idemtest.DB) idemtest.Fixture[*Service, OrderPlaced]
//
// It is called once per scenario with the scenario's fresh schema (its
// migrations applied), so it can seed the rows the handler needs. A handler
// without fixture= gets Sampled's instead.
type Fixture[V, M any] struct {
	// Receiver is the value the handler is a method of; NoReceiver{} for a
	// plain function.
	Receiver V
	// Message is the message the scenario delivers. It must be one the
	// handler processes successfully in the seeded database.
	Message M
	// Variant, optional, returns a message with msg's key and another
	// payload, for ScenarioKeyReused; it must not modify msg. When nil, the
	// Suite's Variant is used, and without either the scenario is not run.
	Variant func(msg M) M
	// Effect, optional, counts the handler's business effect for msg, such
	// as SELECT count(*) FROM charges WHERE order_id = $1. Every scenario
	// then checks that the count is 1 after its deliveries (0 after an
	// abandoned one), which is what proves the effect happened exactly once.
	Effect func(ctx context.Context, db *DB, msg M) (int, error)
	// Conflict, optional, writes by another path a row that makes the
	// handler's business write for msg violate a unique constraint (such as
	// a charge for the same order). With it, ScenarioBusinessUniqueViolation
	// runs.
	Conflict func(ctx context.Context, db *DB, msg M) error

	// sampled: the fixture is Sampled's, for a handler without fixture=.
	sampled bool
}

// Sampled returns the fixture function of a handler without fixture=, which
// the generated test gives its Suite: Sample's message, changed by set (nil
// for no change), such as a nullable key part set to NULL. Its receiver is
// built by the scenario, its fields of database handle types holding the
// scenario's pool (see ScenarioEffect): a handler that writes through its
// service's pool then really writes, and the scenarios see it. Without a
// fixture that counts the effect, the scenarios judge it by the state of the
// test schema, and a first delivery that changes nothing fails the test.
func Sampled[V, M any](set func(msg *M)) func(t testing.TB, db *DB) Fixture[V, M] {
	return func(t testing.TB, db *DB) Fixture[V, M] {
		msg := Sample[M]()
		if set != nil {
			set(&msg)
		}
		return Fixture[V, M]{Message: msg, sampled: true}
	}
}

// Suite runs the scenarios that prove a consumer's guarantee against a real
// PostgreSQL, each in a fresh schema with the migrations applied. idemgen
// generates one per handler in idem_gen_test.go; it works for any consumer
// that New can build on a pool.
//
// Consumers built on idemimpl.Inbox get the scenarios' before-commit hook through
// the idem.Option values New receives (idem.WithBeforeCommit). Any other
// consumer must call BeforeCommit(ctx, tx) inside the transaction that
// records the key, after its business writes and right before the commit.
type Suite[V, M, R any] struct {
	// Migrations are the goose migrations that create the handler's tables
	// and the inbox table.
	Migrations fs.FS
	// Inbox is the inbox table, as its migration names it.
	Inbox string
	// New builds the consumer under test on pool, with the fixture's
	// receiver. It must pass opts on to the wrapper's constructor.
	New func(recv V, pool *pgxpool.Pool, opts ...idem.Option) HandleFunc[M, R]
	// Fixture returns the receiver and the message of a scenario.
	Fixture func(t testing.TB, db *DB) Fixture[V, M]
	// Variant is used by ScenarioKeyReused when the fixture supplies none.
	Variant func(msg M) M
	// Deliveries is N of ScenarioConcurrent; 0 means EnvDeliveries, or else
	// DefaultDeliveries.
	Deliveries int
	// Options are given to New before the scenarios' own (the before-commit
	// hook and a claim wait longer than the hold), such as
	// idem.WithIsolation.
	Options []idem.Option
	// Batch, optional, builds the consumer's batch delivery on pool (a
	// generated wrapper's HandleBatch), with the fixture's receiver; it must
	// pass opts on to the wrapper's constructor. With it, the batch
	// scenarios run (ScenarioBatchKeyTwice and the others).
	Batch func(recv V, pool *pgxpool.Pool, opts ...idem.Option) BatchFunc[M, R]
	// Outbox turns on the outbox checks, for a consumer whose handler
	// publishes through an *idem.Outbox; nil for one that does not.
	Outbox *Outbox[M]
	// Partition, for a consumer whose inbox is partitioned by the
	// message's own time (partition= and time=), makes every scenario keep
	// the partitions first and time its message, and adds the partition
	// scenarios (ScenarioBucketEdge and the others); nil for one that is
	// not partitioned.
	Partition *Partition[V, M]

	// The batch scenarios of a set-based handler (one that takes msgs []M),
	// which need messages of several keys and the handler itself:
	//
	// Rekey returns a copy of msg with fresh values in its key (and in the
	// entity of a stale-message guard), a message of another key the
	// handler processes in the same seeded database; it must not modify
	// msg. With it, ScenarioBatchOverlapping runs.
	Rekey func(msg M) M
	// SetWith builds the consumer's batch delivery as Batch does, with its
	// handler wrapped by wrap (see Wrapped), so that a scenario can see
	// what the handler is given and change what it returns. With it and
	// Rekey, ScenarioBatchFreshMessages, ScenarioBatchEachAlone and
	// ScenarioBatchWrongLength run.
	SetWith func(recv V, pool *pgxpool.Pool, wrap SetWrap[M, R], opts ...idem.Option) BatchFunc[M, R]
	// Handler is the handler's name as its errors name it (the
	// idemimpl.Table's Handler), which ScenarioBatchWrongLength looks for
	// in the error.
	Handler string

	// markers: Inbox is a mode=entity handler's business table, whose
	// markers are its rows with a fingerprint (EntitySuite); rows seeded
	// by the fixture have none and are not counted.
	markers bool
}

// Outbox is what a Suite needs to check the outgoing messages of a handler
// that publishes through an *idem.Outbox. With it, every scenario checks
// the scenario's idem_outbox table (which the Suite's Migrations must
// create): it holds no row while the business change has not committed (after
// the abandoned delivery of ScenarioFailureBeforeCommit, and after the failed
// one of ScenarioBusinessUniqueViolation); once it committed, the rows are
// those of one run, at least one, whose message ids are exactly
// idem.OutgoingMessageID(Consumer, key, 0..n-1), also after a failure before
// the commit and the rerun; and no later delivery (a duplicate, concurrent or
// not, or a reused key) adds a row.
type Outbox[M any] struct {
	// Consumer is the consumer's name, part of every message id.
	Consumer string
	// Key returns the key parts of msg as the consumer's idemimpl.Table does
	// (the wrapper's key function).
	Key func(msg M) ([]any, error)
}

// Scenario is one scenario of a Suite.
type Scenario struct {
	Name string
	// Run runs the scenario and reports to t. It needs nothing of t but the
	// testing.TB methods, so a test can record a scenario's failures instead
	// of failing.
	Run func(t testing.TB)

	// applies reports whether the scenario has what it needs, as far as the
	// fixtures returned to the scenarios before it tell.
	applies func() (bool, string)
}

// Run runs the scenarios as subtests of t, in order. Without a configured
// database it skips t (or fails it, see DatabaseURL). ScenarioKeyReused is
// left out, with a log line, when neither the fixture nor the Suite supplies
// a Variant, and ScenarioBusinessUniqueViolation when the fixture supplies no
// Conflict.
func (s Suite[V, M, R]) Run(t *testing.T) {
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

// Scenarios returns the scenarios of the Suite, in order. The optional ones
// fail when their input is missing; Run leaves them out instead.
func (s Suite[V, M, R]) Scenarios() []Scenario { return s.scenarios(&fixtureSeen{}) }

// scenarios returns the scenarios, which share what the fixtures returned to
// them showed in seen.
func (s Suite[V, M, R]) scenarios(seen *fixtureSeen) []Scenario {
	always := func() (bool, string) { return true, "" }
	return append([]Scenario{
		{Name: ScenarioEffect, Run: func(t testing.TB) { effectScenario(t, &seen.ref, func() { s.learnEffect(t, seen, true) }) }, applies: always},
		{Name: ScenarioConcurrent, Run: func(t testing.TB) { s.concurrent(t, seen) }, applies: always},
		{Name: ScenarioFailureBeforeCommit, Run: func(t testing.TB) { s.failureBeforeCommit(t, seen) }, applies: always},
		{Name: ScenarioCrashAfterCommit, Run: func(t testing.TB) { s.crashAfterCommit(t, seen) }, applies: always},
		{Name: ScenarioKeyReused, Run: func(t testing.TB) { s.keyReused(t, seen) }, applies: func() (bool, string) {
			if s.Variant != nil {
				return true, ""
			}
			return seen.applies(func(p fixtureParts) bool { return p.variant },
				"neither the fixture nor the suite supplies a Variant (a message with the same key and another payload)")
		}},
		{Name: ScenarioSequentialDuplicate, Run: func(t testing.TB) { s.sequentialDuplicate(t, seen) }, applies: always},
		{Name: ScenarioBusinessUniqueViolation, Run: func(t testing.TB) { s.businessUniqueViolation(t, seen) }, applies: func() (bool, string) {
			return seen.applies(func(p fixtureParts) bool { return p.conflict },
				"the fixture supplies no Conflict (a row that makes the handler's write violate a unique constraint)")
		}},
	}, append(append(s.batchScenarios(seen), s.setScenarios(seen)...), s.partitionScenarios(seen)...)...)
}

// fixtureSeen records which optional parts the fixtures returned so far
// supplied, and holds what else the scenarios of one run share: what one
// delivery does, and the test that runs them.
type fixtureSeen struct {
	mu     sync.Mutex
	called bool
	parts  fixtureParts

	ref    reference
	caller caller
}

type fixtureParts struct{ variant, conflict bool }

func (f *fixtureSeen) record(parts fixtureParts) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.called, f.parts = true, parts
}

// applies reports whether has holds for the fixtures seen; before any
// fixture was returned it does not know, and says yes, so that the scenario
// runs and reports whatever keeps the fixture from being returned.
func (f *fixtureSeen) applies(has func(fixtureParts) bool, why string) (bool, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.called || has(f.parts) {
		return true, ""
	}
	return false, why
}

// scenario is one run of a scenario: its schema, fixture, pool and consumer.
type scenario[V, M, R any] struct {
	s      Suite[V, M, R]
	t      testing.TB
	ctx    context.Context
	db     *DB
	fx     Fixture[V, M]
	app    string // application_name of the consumer's pool
	pool   *pgxpool.Pool
	handle HandleFunc[M, R]

	// runs counts the calls of the before-commit hook: the handler's real
	// runs that got as far as their commit.
	runs atomic.Int64
	// atCommit is what the hook does beyond counting; n is the run.
	atCommit func(ctx context.Context, tx pgx.Tx, n int64) error

	// published is the number of outbox rows the committed run wrote, -1
	// before it was seen.
	published int

	// check compares the state of the test schema with what one delivery
	// leaves; advice is the fixture to write, for a sampled message.
	check  stateCheck
	advice string
}

// start prepares a scenario: a fresh schema with the migrations, the
// fixture, and the consumer on a pool of conns connections that carry a name
// of their own, so that pg_stat_activity tells them apart from every other
// session.
func (s Suite[V, M, R]) start(t testing.TB, seen *fixtureSeen, conns int) *scenario[V, M, R] {
	t.Helper()
	return s.startAt(t, seen, conns, time.Time{})
}

// startAt is start, with the message of a partitioned inbox timed at at
// (see scenario.partitioned).
func (s Suite[V, M, R]) startAt(t testing.TB, seen *fixtureSeen, conns int, at time.Time) *scenario[V, M, R] {
	t.Helper()
	if s.New == nil || s.Fixture == nil || s.Inbox == "" {
		t.Fatal("idemtest: a Suite needs New, Fixture and Inbox")
	}
	sc := &scenario[V, M, R]{s: s, t: t, published: -1}
	ctx, cancel := context.WithTimeout(context.Background(), scenarioTimeout)
	t.Cleanup(cancel)
	sc.db = New(t, s.Migrations)
	sc.fx = s.fixture(t, sc.db)
	seen.record(fixtureParts{variant: sc.fx.Variant != nil, conflict: sc.fx.Conflict != nil})
	sc.ctx = context.WithValue(ctx, hookKey{}, sc.beforeCommit)
	sc.check = stateCheck{t: t, ctx: sc.ctx, pool: sc.db.Pool, schema: sc.db.Schema, ref: &seen.ref}
	if !s.markers {
		// A mode=entity consumer's "inbox" is its business table, which is
		// the effect.
		sc.check.skip = []string{s.Inbox}
	}
	if sc.fx.sampled {
		sc.advice = fixtureAdvice[V, M](seen.caller, "Fixture", "db *idemtest.DB")
	}
	if s.Partition != nil {
		sc.partitioned(at)
	}
	sc.app = sc.db.Schema + "_1"
	sc.pool = openPool(t, sc.db, sc.app, conns)
	sc.handle = sc.newConsumer(sc.pool)
	return sc
}

// fixture calls the Suite's Fixture; a sampled fixture's receiver gets db's
// pool (see Sampled).
func (s Suite[V, M, R]) fixture(t testing.TB, db *DB) Fixture[V, M] {
	t.Helper()
	fx := s.Fixture(t, db)
	if fx.sampled {
		fx.Receiver = sampleReceiver[V](t, db, nil)
	}
	return fx
}

// needEffect learns what one delivery does, and stops the scenario when a
// sample message showed nothing.
func (s Suite[V, M, R]) needEffect(t testing.TB, seen *fixtureSeen) {
	t.Helper()
	s.learnEffect(t, seen, false)
	seen.ref.stopIfHalted(t)
}

// learnEffect learns what one delivery does (ScenarioEffect), once per run.
func (s Suite[V, M, R]) learnEffect(t testing.TB, seen *fixtureSeen, first bool) {
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
		if s.Outbox != nil {
			d.published = len(sc.outboxRows())
		}
	})
}

// newConsumer builds the consumer under test on pool.
func (sc *scenario[V, M, R]) newConsumer(pool *pgxpool.Pool) HandleFunc[M, R] {
	opts := append(append([]idem.Option{WithTestLogger(sc.t)}, sc.s.Options...), idem.WithBeforeCommit(sc.beforeCommit))
	if !sc.s.markers { // mode=entity claims nothing, so it has no claim wait
		opts = append(opts, idem.WithClaimWait(claimWait))
	}
	handle := sc.s.New(sc.fx.Receiver, pool, opts...)
	if handle == nil {
		sc.t.Fatal("idemtest: Suite.New returned a nil HandleFunc")
	}
	return handle
}

// beforeCommit is the scenario's hook: it runs inside the delivery's
// transaction after the handler, before the commit.
func (sc *scenario[V, M, R]) beforeCommit(ctx context.Context, tx pgx.Tx) error {
	n := sc.runs.Add(1)
	if sc.atCommit == nil {
		return nil
	}
	return sc.atCommit(ctx, tx, n)
}

type hookKey struct{}

// causeConcurrent is what an effect beyond one delivery's after concurrent
// copies of a message means, where a claim lets only one of them commit.
const causeConcurrent = "the copies that were not processed must leave no trace, yet the effect grew with them: " + causeOutsideTx

// BeforeCommit runs the before-commit hook of the scenario that ctx belongs
// to, and does nothing outside a scenario. A consumer that is not built on
// idemimpl.Inbox calls it inside the transaction that records the message's key,
// after its business writes and right before the commit (where idem calls a
// WithBeforeCommit hook), and rolls back when it returns an error. The
// scenarios count the handler's runs with it, hold a delivery inside its
// transaction, and abandon one.
func BeforeCommit(ctx context.Context, tx pgx.Tx) error {
	hook, _ := ctx.Value(hookKey{}).(func(context.Context, pgx.Tx) error)
	if hook == nil {
		return nil
	}
	return hook(ctx, tx)
}

// delivery is what one Handle call returned.
type delivery[R any] struct {
	r   R
	o   idem.Outcome
	err error
}

func (d delivery[R]) String() string {
	if d.err != nil {
		return "error " + d.err.Error()
	}
	return fmt.Sprintf("%v %s", d.o, resultText(d.r))
}

func (sc *scenario[V, M, R]) deliver(handle HandleFunc[M, R], msg M) delivery[R] {
	r, o, err := handle(sc.ctx, msg)
	return delivery[R]{r, o, err}
}

// mustProcess delivers msg and stops the scenario unless it was Processed.
func (sc *scenario[V, M, R]) mustProcess(what string, msg M) delivery[R] {
	sc.t.Helper()
	d := sc.deliver(sc.handle, msg)
	if d.err != nil || d.o != idem.Processed {
		if sc.fx.sampled {
			sc.t.Fatalf("%s: got %v; want Processed. The sample message was %s.\nIf the handler needs data that is not there, or another message, %s", what, d, encode(msg), sc.advice)
		}
		sc.t.Fatalf("%s: got %v; want Processed (does the fixture's message suit the handler and the seeded data?)", what, d)
	}
	return d
}

// wantDuplicate checks that d is a Duplicate with the result of first.
func (sc *scenario[V, M, R]) wantDuplicate(what string, d, first delivery[R]) {
	sc.t.Helper()
	if d.err != nil || d.o != idem.Duplicate {
		sc.t.Errorf("%s: got %v; want Duplicate with the stored result %s", what, d, resultText(first.r))
		return
	}
	if !sameResult(d.r, first.r) {
		sc.t.Errorf("%s: Duplicate with result %s; want the stored result of the first delivery, %s", what, resultText(d.r), resultText(first.r))
	}
}

// wantRuns checks how often the handler ran to its commit point.
// wantConcurrentRuns checks the handler's runs after n copies at once. The
// claim-first protocol (idem.WithPessimisticClaim) runs it once. The
// default protocol lets copies run it and rolls them back at their
// INSERT: the runs are logged, and the outcomes prove one commit.
func (sc *scenario[V, M, R]) wantConcurrentRuns(n int, why string) {
	sc.t.Helper()
	if pessimistic(sc.s.Options) {
		sc.wantRuns(1, why)
		return
	}
	got := sc.runs.Load()
	if got < 1 || got > int64(n) {
		sc.t.Errorf("the handler ran %d time(s) up to its commit for %d copies; want 1 to %d", got, n, n)
	}
	sc.t.Logf("%d copies: the handler ran %d time(s) up to its commit; all but one rolled back", n, got)
}

// pessimistic reports whether opts hold idem.WithPessimisticClaim.
func pessimistic(opts []idem.Option) bool {
	var o config.Options
	for _, opt := range opts {
		opt(&o)
	}
	return o.Pessimistic
}

func (sc *scenario[V, M, R]) wantRuns(want int64, why string) {
	sc.t.Helper()
	if got := sc.runs.Load(); got != want {
		sc.t.Errorf("the handler ran %d time(s) up to its commit (counted by the before-commit hook); want %d: %s", got, want, why)
	}
}

// wantInboxRows checks the number of rows in the inbox table, which only this
// scenario's deliveries write to.
func (sc *scenario[V, M, R]) wantInboxRows(want int, when string) {
	sc.t.Helper()
	var n int
	table := pgx.Identifier(strings.Split(sc.s.Inbox, ".")).Sanitize()
	query := "SELECT count(*) FROM " + table
	if sc.s.markers {
		query += " WHERE " + idemimpl.FingerprintColumn + " IS NOT NULL"
	}
	if err := sc.db.Pool.QueryRow(sc.ctx, query).Scan(&n); err != nil {
		sc.t.Fatalf("count the rows of the inbox table %s: %v", sc.s.Inbox, err)
	}
	if n != want {
		sc.t.Errorf("%s: %d row(s) in the inbox table %s; want %d", when, n, sc.s.Inbox, want)
	}
}

// wantNoOutbox checks, with Suite.Outbox, that idem_outbox holds no row: the
// business change did not commit.
func (sc *scenario[V, M, R]) wantNoOutbox(when string) {
	sc.t.Helper()
	if sc.s.Outbox == nil {
		return
	}
	if rows := sc.outboxRows(); len(rows) > 0 {
		sc.t.Errorf("%s: %d row(s) in idem_outbox; want none: outgoing messages exist exactly when the change committed", when, len(rows))
	}
}

// wantOutbox checks, with Suite.Outbox, that idem_outbox holds the rows of
// msg's one committed run: ids derived from the consumer, the key and the
// sequence 0..n-1, and as many as the first time it was checked.
func (sc *scenario[V, M, R]) wantOutbox(msg M, when string) {
	sc.t.Helper()
	o := sc.s.Outbox
	if o == nil {
		return
	}
	rows := sc.outboxRows()
	if len(rows) == 0 {
		sc.t.Errorf("%s: no row in idem_outbox; want the messages the handler published (does the fixture's message make it publish?)", when)
		return
	}
	if sc.published < 0 {
		sc.published = len(rows)
	} else if len(rows) != sc.published {
		sc.t.Errorf("%s: %d row(s) in idem_outbox; want the %d the committed run wrote: a later delivery must not publish again", when, len(rows), sc.published)
	}
	key, err := o.Key(msg)
	if err != nil {
		sc.t.Fatalf("the Outbox's Key of the fixture's message: %v", err)
	}
	want := make([]string, len(rows))
	for i := range want {
		want[i] = idem.OutgoingMessageID(o.Consumer, key, i)
	}
	var got []string
	for _, r := range rows {
		got = append(got, r.id)
		if r.consumer != o.Consumer {
			sc.t.Errorf("%s: the outbox row %s has consumer %q; want %q", when, r.id, r.consumer, o.Consumer)
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		sc.t.Errorf("%s: the message ids in idem_outbox are %v; want idem.OutgoingMessageID(%q, %v, 0..%d), %v: the ids a rerun computes",
			when, got, o.Consumer, key, len(rows)-1, want)
	}
}

// outboxRow is a row of idem_outbox, as the checks see it.
type outboxRow struct{ id, consumer string }

// outboxRows returns the rows of the scenario's idem_outbox, which only its
// deliveries write to.
func (sc *scenario[V, M, R]) outboxRows() []outboxRow {
	sc.t.Helper()
	rows, err := sc.db.Pool.Query(sc.ctx, `SELECT message_id::text, consumer FROM idem_outbox ORDER BY id`)
	if err != nil {
		sc.t.Fatalf("read idem_outbox (do the Suite's Migrations include the outbox chain?): %v", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (outboxRow, error) {
		var r outboxRow
		err := row.Scan(&r.id, &r.consumer)
		return r, err
	})
	if err != nil {
		sc.t.Fatalf("read idem_outbox: %v", err)
	}
	return out
}

// effect returns the fixture's count of the business effect of msg, and
// false without an Effect.
func (sc *scenario[V, M, R]) effect(msg M) (int, bool) {
	sc.t.Helper()
	if sc.fx.Effect == nil {
		return 0, false
	}
	n, err := sc.fx.Effect(sc.ctx, sc.db, msg)
	if err != nil {
		sc.t.Fatalf("the fixture's Effect: %v", err)
	}
	return n, true
}

// wantApplied checks that msg was applied n times, 0 or 1, as its
// deliveries so far should leave it: n inbox rows, the effect n times, and
// the outbox rows of its committed run (none when n is 0).
func (sc *scenario[V, M, R]) wantApplied(msg M, n int, when string) {
	sc.t.Helper()
	sc.wantInboxRows(n, when)
	sc.wantEffect(msg, n, when)
	if n == 0 {
		sc.wantNoOutbox(when)
	} else {
		sc.wantOutbox(msg, when)
	}
}

// wantEffect checks the fixture's count of the business effect, if it has
// one.
func (sc *scenario[V, M, R]) wantEffect(msg M, want int, when string) {
	sc.t.Helper()
	if n, ok := sc.effect(msg); ok && n != want {
		sc.t.Errorf("%s: the fixture's Effect counts %d; want %d", when, n, want)
	}
}

// The scenarios.

func (s Suite[V, M, R]) concurrent(t testing.TB, seen *fixtureSeen) {
	t.Helper()
	s.concurrentAt(t, seen, time.Time{})
}

// concurrentAt is ScenarioConcurrent, with the message of a partitioned
// inbox timed at at; it returns the scenario for more checks.
func (s Suite[V, M, R]) concurrentAt(t testing.TB, seen *fixtureSeen, at time.Time) *scenario[V, M, R] {
	t.Helper()
	n := s.deliveries(t)
	s.needEffect(t, seen)
	sc := s.startAt(t, seen, n, at)
	Warm(t, sc.pool, n)

	var returned atomic.Int64
	var held *holdReport
	sc.atCommit = func(ctx context.Context, tx pgx.Tx, run int64) error {
		if run != 1 {
			return nil
		}
		h := sc.holdUntilOthersWait(n-1, &returned)
		held = &h
		return h.err
	}

	results := make([]delivery[R], n)
	AtOnce(n, func(i int) {
		results[i] = sc.deliver(sc.handle, sc.fx.Message)
		returned.Add(1)
	})

	if held != nil && held.err != nil {
		t.Errorf("the deliveries did not overlap: %v", held.err)
	}
	var processed, duplicates []int
	var failed []string
	for i, d := range results {
		switch {
		case d.err != nil:
			failed = append(failed, d.err.Error())
		case d.o == idem.Processed:
			processed = append(processed, i)
		case d.o == idem.Duplicate:
			duplicates = append(duplicates, i)
		default:
			failed = append(failed, fmt.Sprintf("outcome %v with a nil error", d.o))
		}
	}
	if len(failed) > 0 {
		t.Errorf("%d of %d concurrent deliveries failed; want none (a delivery that finds the key claimed waits and returns the stored result):\n%s",
			len(failed), n, summarize(failed))
	}
	if len(processed) != 1 || len(duplicates) != n-1 {
		t.Errorf("of %d concurrent deliveries, %d were Processed and %d Duplicate; want exactly 1 and %d", n, len(processed), len(duplicates), n-1)
	}
	if len(processed) > 0 {
		first := results[processed[0]]
		differ := 0
		for _, i := range duplicates {
			if !sameResult(results[i].r, first.r) {
				differ++
			}
		}
		if differ > 0 {
			t.Errorf("%d Duplicate(s) returned another result than the Processed delivery's %s", differ, resultText(first.r))
		}
	}
	sc.wantConcurrentRuns(n, "the deliveries that found the key claimed must not run it")
	sc.wantInboxRows(1, fmt.Sprintf("after %d concurrent deliveries", n))
	sc.wantEffect(sc.fx.Message, 1, fmt.Sprintf("after %d concurrent deliveries", n))
	sc.wantOutbox(sc.fx.Message, fmt.Sprintf("after %d concurrent deliveries", n))
	if at.IsZero() {
		sc.check.wantOneDelivery(fmt.Sprintf("%d concurrent copies", n), causeConcurrent)
	}
	if held != nil && held.err == nil {
		t.Logf("the first delivery held its transaction until %d other deliveries waited on a lock in PostgreSQL and %d had returned", held.waiting, held.returned)
	}
	return sc
}

func (s Suite[V, M, R]) failureBeforeCommit(t testing.TB, seen *fixtureSeen) {
	t.Helper()
	s.needEffect(t, seen)
	sc := s.start(t, seen, 2)
	before := sc.check.before()
	sc.atCommit = func(ctx context.Context, tx pgx.Tx, run int64) error {
		if run != 1 {
			return nil
		}
		return abandon(ctx, tx)
	}
	msg := sc.fx.Message
	if d := sc.deliver(sc.handle, msg); d.err == nil {
		t.Fatalf("the delivery whose connection died before its commit: got %v; want an error", d)
	}
	sc.wantApplied(msg, 0, "after the delivery abandoned before its commit")
	sc.check.wantSame(before, "the delivery abandoned before its commit", causeOutsideTx)
	sc.mustProcess("the redelivery after the abandoned delivery", msg)
	sc.wantRuns(2, "once abandoned, once redelivered")
	sc.wantApplied(msg, 1, "after the redelivery")
	sc.check.wantOneDelivery("the abandoned delivery and its redelivery", causeOutsideTx)
}

func (s Suite[V, M, R]) crashAfterCommit(t testing.TB, seen *fixtureSeen) {
	t.Helper()
	s.needEffect(t, seen)
	sc := s.start(t, seen, 2)
	msg := sc.fx.Message
	first := sc.mustProcess("the delivery of the worker that crashes before its ack", msg)
	sc.wantOutbox(msg, "after the delivery of the worker that crashes before its ack")

	// The worker dies: its sessions end, and its result is never acked.
	if _, err := sc.db.Pool.Exec(sc.ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1`, sc.app); err != nil {
		t.Fatalf("end the crashed worker's sessions: %v", err)
	}
	sc.pool.Close()

	// The broker redelivers the message to another worker.
	app := sc.app[:len(sc.app)-1] + "2"
	again := sc.deliver(sc.newConsumer(openPool(t, sc.db, app, 2)), msg)
	sc.wantDuplicate("the redelivery after the crash", again, first)
	sc.wantRuns(1, "the redelivery of a committed message must not run the handler")
	sc.wantApplied(msg, 1, "after the redelivery")
	sc.check.wantOneDelivery("the delivery and its redelivery after the crash", causeDuplicate)
}

func (s Suite[V, M, R]) keyReused(t testing.TB, seen *fixtureSeen) {
	t.Helper()
	s.needEffect(t, seen)
	sc := s.start(t, seen, 2)
	variant := sc.fx.Variant
	if variant == nil {
		variant = s.Variant
	}
	if variant == nil {
		t.Fatal("no Variant: give the fixture a Variant that returns a message with the same key and another payload")
	}
	msg := sc.fx.Message
	before := encode(msg)
	other := variant(msg)
	if encode(msg) != before {
		t.Fatal("Variant modified the message it was given; it must return a changed copy")
	}

	first := sc.mustProcess("the first delivery", msg)
	sc.wantOutbox(msg, "after the first delivery")
	d := sc.deliver(sc.handle, other)
	switch {
	case errors.Is(d.err, idem.ErrKeyReused):
	case d.err == nil && d.o == idem.Processed:
		t.Errorf("the message with the same key and another payload: got %v; want idem.ErrKeyReused (does Variant keep the key?)", d)
	case d.err == nil && d.o == idem.Duplicate:
		t.Errorf("the message with the same key and another payload: got %v; want idem.ErrKeyReused (is its payload, or its fingerprint, really different?)", d)
	default:
		t.Errorf("the message with the same key and another payload: got %v; want idem.ErrKeyReused", d)
	}
	sc.wantDuplicate("the original message after the reused key", sc.deliver(sc.handle, msg), first)
	sc.wantRuns(1, "a reused key must not run the handler")
	sc.wantApplied(msg, 1, "after the reused key")
	sc.check.wantOneDelivery("the delivery, its key with another payload and its duplicate", "a reused key and a duplicate must change nothing")
}

func (s Suite[V, M, R]) sequentialDuplicate(t testing.TB, seen *fixtureSeen) {
	t.Helper()
	s.needEffect(t, seen)
	sc := s.start(t, seen, 2)
	msg := sc.fx.Message
	first := sc.mustProcess("the first delivery", msg)
	sc.wantOutbox(msg, "after the first delivery")
	sc.wantDuplicate("the second delivery", sc.deliver(sc.handle, msg), first)
	sc.wantRuns(1, "a Duplicate must not run the handler")
	sc.wantApplied(msg, 1, "after two deliveries")
	sc.check.wantOneDelivery("the delivery and its duplicate", causeDuplicate)
}

func (s Suite[V, M, R]) businessUniqueViolation(t testing.TB, seen *fixtureSeen) {
	t.Helper()
	s.needEffect(t, seen)
	sc := s.start(t, seen, 2)
	if sc.fx.Conflict == nil {
		t.Fatal("no Conflict: give the fixture a Conflict that writes a row the handler's write for the message collides with")
	}
	msg := sc.fx.Message
	if err := sc.fx.Conflict(sc.ctx, sc.db, msg); err != nil {
		t.Fatalf("the fixture's Conflict: %v", err)
	}
	before, _ := sc.effect(msg)
	prior := sc.check.before()
	d := sc.deliver(sc.handle, msg)
	switch {
	case d.err == nil && d.o == idem.Duplicate:
		t.Errorf("the delivery whose business write violates a unique constraint: got %v; want the handler's error: "+
			"only the inbox's own conflict means Duplicate", d)
	case d.err == nil:
		t.Errorf("the delivery whose business write violates a unique constraint: got %v; want the handler's error (does Conflict make the handler's write collide?)", d)
	case errors.Is(d.err, idem.ErrKeyReused), errors.Is(d.err, idem.ErrInProgress), errors.Is(d.err, idem.ErrInvalidKey):
		t.Errorf("the delivery whose business write violates a unique constraint: got %v; want the handler's error, not an inbox outcome", d)
	}
	sc.wantInboxRows(0, "after the failed delivery")
	sc.wantEffect(msg, before, "after the failed delivery (the count before it)")
	sc.wantNoOutbox("after the failed delivery")
	sc.check.wantSame(prior, "the failed delivery", "a delivery that fails must change nothing: "+causeOutsideTx)
}

// deliveries returns N of the concurrent scenario.
func (s Suite[V, M, R]) deliveries(t testing.TB) int {
	t.Helper()
	n := s.Deliveries
	if n == 0 {
		n = DefaultDeliveries
		if v := os.Getenv(EnvDeliveries); v != "" {
			var err error
			if n, err = strconv.Atoi(v); err != nil {
				t.Fatalf("%s=%q is not an integer", EnvDeliveries, v)
			}
		}
	}
	if n < 2 {
		t.Fatalf("idemtest: %d concurrent deliveries prove nothing; want at least 2", n)
	}
	return n
}

// holdReport is what the hold of the first concurrent delivery saw.
type holdReport struct {
	waiting, returned int64
	err               error
}

// holdUntilOthersWait holds the first delivery inside its transaction until
// each of the other deliveries either waits on a lock in PostgreSQL (on the
// claim of the key, for a correct consumer) or has returned. Returned
// deliveries count so that a consumer that does not wait fails on its
// outcomes rather than on this timeout.
func (sc *scenario[V, M, R]) holdUntilOthersWait(others int, returned *atomic.Int64) holdReport {
	deadline := time.Now().Add(holdTimeout)
	for {
		// A delivery that returned between the two loads could be counted
		// both waiting and returned; the loop tries again then.
		r := returned.Load()
		var waiting int64
		err := sc.db.Pool.QueryRow(sc.ctx,
			`SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'`, sc.app).Scan(&waiting)
		if err != nil {
			return holdReport{err: fmt.Errorf("watch the other deliveries in pg_stat_activity: %w", err)}
		}
		if returned.Load() == r && waiting+r >= int64(others) {
			return holdReport{waiting: waiting, returned: r}
		}
		if time.Now().After(deadline) {
			return holdReport{waiting: waiting, returned: r, err: fmt.Errorf(
				"the first delivery held its transaction open for %v, but only %d of the other %d deliveries waited on a lock in PostgreSQL (and %d had returned); "+
					"a delivery of a claimed key must wait for the claim", holdTimeout, waiting, others, r)}
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// abandon ends the transaction the way a crashed worker does: the server
// terminates the connection in the middle of it.
func abandon(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `SELECT pg_terminate_backend(pg_backend_pid())`)
	if err == nil {
		err = errors.New("idemtest: the connection survived pg_terminate_backend")
	}
	return fmt.Errorf("idemtest: abandoned before commit: %w", err)
}

// openPool opens a pool of size connections on the scenario's schema whose
// sessions carry the application_name app.
func openPool(t testing.TB, db *DB, app string, size int) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		t.Fatalf("idemtest: %v", err)
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	cfg.MaxConns = int32(size)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("idemtest: open pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// sameResult reports whether two results are equal as stored: a Duplicate
// returns the JSON round trip of the first delivery's result.
func sameResult[R any](a, b R) bool { return encode(a) == encode(b) }

func resultText[R any](r R) string {
	if _, none := any(r).(idem.None); none {
		return "(no result)"
	}
	return encode(r)
}

func encode(v any) string {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("<%v>", err)
	}
	return string(data)
}

// summarize lists distinct messages with their counts, at most five.
func summarize(msgs []string) string {
	counts := map[string]int{}
	var order []string
	for _, m := range msgs {
		if counts[m] == 0 {
			order = append(order, m)
		}
		counts[m]++
	}
	var b strings.Builder
	for i, m := range order {
		if i == 5 {
			fmt.Fprintf(&b, "\t... and %d more\n", len(order)-5)
			break
		}
		fmt.Fprintf(&b, "\t%d× %s\n", counts[m], m)
	}
	return strings.TrimRight(b.String(), "\n")
}
