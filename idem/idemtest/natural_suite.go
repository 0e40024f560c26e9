package idemtest

import (
	"context"
	"fmt"
	"io/fs"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/idem"
)

// The scenarios of a NaturalSuite, in the order Run runs them, after
// ScenarioEffect.
const (
	// ScenarioRedelivery: the message delivered once, then again: the
	// state after the second delivery equals the state after the first.
	ScenarioRedelivery = "redelivery"
	// ScenarioConcurrentRedeliveries: the message delivered once, then N
	// times at once: every delivery succeeds and the state equals the state
	// after the first.
	ScenarioConcurrentRedeliveries = "concurrent_redeliveries"
	// ScenarioInterleaved: the message, then the fixture's Second message,
	// then the message again: the state after that redelivery equals the
	// state after the second message (a redelivery that comes after
	// another message's change must not undo or redo anything).
	ScenarioInterleaved = "interleaved"
)

// NaturalFixture is what a mode=natural handler's scenarios need: a fixture
// function named by the directive's fixture= option returns one for each
// scenario:
//
//	func priceFixture(t testing.TB, db *idemtest.DB) idemtest.NaturalFixture[*Catalog, PriceSet]
type NaturalFixture[V, M any] struct {
	// Receiver is the value the handler is a method of; NoReceiver{} for a
	// plain function.
	Receiver V
	// Message is the message the scenarios deliver again and again.
	Message M
	// Second, optional, is another message (another key) for
	// ScenarioInterleaved; without one that scenario is not run.
	Second *M
	// Snapshot, optional, is a query whose rows are the state the handler
	// owns, in a stable order, such as SELECT * FROM prices ORDER BY sku:
	// the scenarios compare its rows after each delivery. Leave out what
	// is not the handler's effect and changes by itself (an updated_at set
	// to now()). Without it they compare every table of the test schema, on
	// the columns that one delivery sets the same way every time
	// (ScenarioEffect).
	Snapshot string

	// sampled: the fixture is SampledNatural's, for a handler without
	// fixture=.
	sampled bool
}

// SampledNatural is Sampled for a mode=natural handler: the fixture function
// of a handler without fixture=, whose scenarios compare every table of the
// test schema.
func SampledNatural[V, M any](set func(msg *M)) func(t testing.TB, db *DB) NaturalFixture[V, M] {
	return func(t testing.TB, db *DB) NaturalFixture[V, M] {
		msg := Sample[M]()
		if set != nil {
			set(&msg)
		}
		return NaturalFixture[V, M]{Message: msg, sampled: true}
	}
}

// NaturalSuite runs the scenarios that prove a mode=natural handler
// idempotent by construction: nothing records its messages, so every
// redelivery runs it again, and the state it owns (NaturalFixture.Snapshot,
// else every table of the test schema) must be the same after one delivery
// as after two, after N concurrent ones, and after a redelivery that follows
// another message. ScenarioFailureBeforeCommit runs last: a delivery whose
// connection dies before its commit leaves the state as it was. A handler
// that says balance = balance + $1 fails, with a message naming the rows and
// columns that differ. idemgen generates one per mode=natural handler.
type NaturalSuite[V, M, R any] struct {
	Migrations fs.FS
	// New builds the consumer on pool; it must pass opts on to the
	// wrapper's constructor.
	New     func(recv V, pool *pgxpool.Pool, opts ...idem.Option) HandleFunc[M, R]
	Fixture func(t testing.TB, db *DB) NaturalFixture[V, M]
	// Rekey, optional, returns a copy of msg with fresh values in its key:
	// ScenarioInterleaved's second message when the fixture has no Second.
	Rekey func(msg M) M
	// Deliveries is N of ScenarioConcurrentRedeliveries; 0 means
	// EnvDeliveries, or else DefaultDeliveries.
	Deliveries int
	Options    []idem.Option
}

// Run runs the scenarios as subtests of t.
func (s NaturalSuite[V, M, R]) Run(t *testing.T) {
	t.Helper()
	DatabaseURL(t)
	for _, sc := range s.scenarios(&naturalShared{caller: callerOf(1)}) {
		if ok, why := sc.applies(); !ok {
			t.Logf("%s: not run: %s", sc.Name, why)
			continue
		}
		t.Run(sc.Name, func(t *testing.T) { sc.Run(t) })
	}
}

// Scenarios returns the scenarios of the suite, in order.
func (s NaturalSuite[V, M, R]) Scenarios() []Scenario { return s.scenarios(&naturalShared{}) }

// naturalShared is what the scenarios of one run share.
type naturalShared struct {
	called, second atomic.Bool
	ref            reference
	caller         caller
}

func (s NaturalSuite[V, M, R]) scenarios(sh *naturalShared) []Scenario {
	always := func() (bool, string) { return true, "" }
	return []Scenario{
		{Name: ScenarioEffect, Run: func(t testing.TB) { effectScenario(t, &sh.ref, func() { s.learnEffect(t, sh, true) }) }, applies: always},
		{Name: ScenarioRedelivery, Run: func(t testing.TB) { s.redelivery(t, sh) }, applies: always},
		{Name: ScenarioConcurrentRedeliveries, Run: func(t testing.TB) { s.concurrent(t, sh) }, applies: always},
		{Name: ScenarioInterleaved, Run: func(t testing.TB) { s.interleaved(t, sh) }, applies: func() (bool, string) {
			if s.Rekey == nil && sh.called.Load() && !sh.second.Load() {
				return false, "the fixture supplies no Second message"
			}
			return true, ""
		}},
		{Name: ScenarioFailureBeforeCommit, Run: func(t testing.TB) { s.failureBeforeCommit(t, sh) }, applies: always},
	}
}

type naturalScenario[V, M, R any] struct {
	t      testing.TB
	ctx    context.Context
	db     *DB
	fx     NaturalFixture[V, M]
	pool   *pgxpool.Pool
	handle HandleFunc[M, R]
	check  stateCheck
	advice string
	// atCommit, when set, runs in the before-commit hook of each delivery.
	atCommit func(ctx context.Context, tx pgx.Tx) error
}

func (s NaturalSuite[V, M, R]) start(t testing.TB, sh *naturalShared, conns int) *naturalScenario[V, M, R] {
	t.Helper()
	if s.New == nil || s.Fixture == nil {
		t.Fatal("idemtest: a NaturalSuite needs New and Fixture")
	}
	ctx, cancel := context.WithTimeout(context.Background(), scenarioTimeout)
	t.Cleanup(cancel)
	sc := &naturalScenario[V, M, R]{t: t, ctx: ctx, db: New(t, s.Migrations)}
	sc.fx = s.Fixture(t, sc.db)
	if sc.fx.sampled {
		sc.fx.Receiver = sampleReceiver[V](t, sc.db, nil)
		sc.advice = fixtureAdvice[V, M](sh.caller, "NaturalFixture", "db *idemtest.DB")
	}
	sh.called.Store(true)
	sh.second.Store(sc.fx.Second != nil)
	sc.check = stateCheck{t: t, ctx: ctx, pool: sc.db.Pool, schema: sc.db.Schema, ref: &sh.ref}
	sc.pool = openPool(t, sc.db, sc.db.Schema+"_1", conns)
	hook := idem.WithBeforeCommit(func(ctx context.Context, tx pgx.Tx) error {
		if sc.atCommit == nil {
			return nil
		}
		return sc.atCommit(ctx, tx)
	})
	sc.handle = s.New(sc.fx.Receiver, sc.pool, append(append([]idem.Option{WithTestLogger(t)}, s.Options...), hook)...)
	return sc
}

// needEffect learns what one delivery does, and stops the scenario when a
// sample message showed nothing.
func (s NaturalSuite[V, M, R]) needEffect(t testing.TB, sh *naturalShared) {
	t.Helper()
	s.learnEffect(t, sh, false)
	sh.ref.stopIfHalted(t)
}

// learnEffect learns what one delivery does (ScenarioEffect), once per run.
func (s NaturalSuite[V, M, R]) learnEffect(t testing.TB, sh *naturalShared, first bool) {
	t.Helper()
	sh.ref.learn(s.Migrations, first, func(d *delivered) {
		sc := s.start(t, sh, 2)
		d.sampled, d.advice, d.message = sc.fx.sampled, sc.advice, encode(sc.fx.Message)
		d.before = sc.check.read("before the first delivery")
		sc.mustDeliver("the first delivery", sc.fx.Message)
		d.after = sc.check.read("after the first delivery")
		var err error
		if d.volatile, err = volatileByDefinition(sc.ctx, sc.db.Pool, sc.db.Schema); err != nil {
			t.Fatal(err)
		}
	})
}

func (sc *naturalScenario[V, M, R]) mustDeliver(what string, msg M) {
	sc.t.Helper()
	if _, o, err := sc.handle(sc.ctx, msg); err != nil || o != idem.Processed {
		if sc.fx.sampled {
			sc.t.Fatalf("%s: got (%v, %v); want Processed. The sample message was %s.\nIf the handler needs data that is not there, or another message, %s", what, o, err, encode(msg), sc.advice)
		}
		sc.t.Fatalf("%s: got (%v, %v); want Processed (does the fixture's message suit the handler and the seeded data?)", what, o, err)
	}
}

// view is the state a natural scenario compares: the rows of the fixture's
// Snapshot query, or else the state of the test schema.
type view struct {
	query snapshot
	state state
}

// view reads the view; when says when, such as "after the first delivery".
func (sc *naturalScenario[V, M, R]) view(when string) view {
	sc.t.Helper()
	if sc.fx.Snapshot != "" {
		return view{query: sc.snapshot(when)}
	}
	if !sc.check.usable() {
		return view{}
	}
	return view{state: sc.check.read(when)}
}

// notIdempotent is what a redelivery that changed the state means.
const notIdempotent = "a mode=natural handler must set absolute values or upsert on the natural key (INSERT ... ON CONFLICT DO UPDATE SET col = EXCLUDED.col), never add to what is there; " +
	"if it cannot, use mode=tx or mode=entity, which record the message"

// wantView checks that got, read after what, equals want, read wantWhen;
// ref says what want is, as judge.diff takes it ("one delivery leaves").
func (sc *naturalScenario[V, M, R]) wantView(got, want view, what, wantWhen, ref, cause string) {
	sc.t.Helper()
	if sc.fx.Snapshot != "" {
		if diff := diffSnapshots(want.query, got.query, wantWhen, "after "+what); diff != "" {
			sc.t.Errorf("the handler is not idempotent: the state (%s) after %s differs from the state %s:\n%s\n%s",
				sc.fx.Snapshot, what, wantWhen, diff, cause)
		}
		return
	}
	if got.state == nil || want.state == nil {
		return
	}
	if d := sc.check.ref.judge.diff(got.state, want.state, ref); len(d) > 0 {
		sc.t.Errorf("%s left %s: %s", what, strings.Join(d, "; "), cause)
	}
}

// snapshot is the state as the fixture's Snapshot query returns it.
type snapshot struct {
	columns []string
	rows    [][]string
}

func (sc *naturalScenario[V, M, R]) snapshot(when string) snapshot {
	sc.t.Helper()
	rows, err := sc.db.Pool.Query(sc.ctx, sc.fx.Snapshot, pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		sc.t.Fatalf("the fixture's Snapshot %q %s: %v", sc.fx.Snapshot, when, err)
	}
	defer rows.Close()
	var snap snapshot
	for _, f := range rows.FieldDescriptions() {
		snap.columns = append(snap.columns, f.Name)
	}
	for rows.Next() {
		// The simple protocol returns every value as text, as psql shows
		// it.
		raw := rows.RawValues()
		row := make([]string, len(raw))
		for i, v := range raw {
			if v == nil {
				row[i] = "NULL"
			} else {
				row[i] = string(v)
			}
		}
		snap.rows = append(snap.rows, row)
	}
	if err := rows.Err(); err != nil {
		sc.t.Fatalf("the fixture's Snapshot %s: %v", when, err)
	}
	return snap
}

// diffSnapshots describes the differences between two snapshots, at most
// ten lines; "" when they are equal.
func diffSnapshots(a, b snapshot, aWhen, bWhen string) string {
	var lines []string
	add := func(format string, args ...any) { lines = append(lines, "\t"+fmt.Sprintf(format, args...)) }
	label := func(s snapshot, row []string) string {
		var parts []string
		for i, v := range row {
			if i == 3 {
				parts = append(parts, "...")
				break
			}
			parts = append(parts, s.columns[i]+"="+v)
		}
		return "(" + strings.Join(parts, ", ") + ")"
	}
	if len(a.rows) != len(b.rows) {
		add("%d row(s) %s, %d %s", len(a.rows), aWhen, len(b.rows), bWhen)
	}
	for i := range min(len(a.rows), len(b.rows)) {
		ra, rb := a.rows[i], b.rows[i]
		for j := range min(len(ra), len(rb)) {
			if ra[j] != rb[j] {
				add("row %d %s: %s is %s %s, %s %s", i+1, label(a, ra), a.columns[j], ra[j], aWhen, rb[j], bWhen)
			}
		}
	}
	for i := len(a.rows); i < len(b.rows); i++ {
		add("row %d %s only %s", i+1, label(b, b.rows[i]), bWhen)
	}
	for i := len(b.rows); i < len(a.rows); i++ {
		add("row %d %s only %s", i+1, label(a, a.rows[i]), aWhen)
	}
	if len(lines) > 10 {
		lines = append(lines[:10], fmt.Sprintf("\t... and %d more", len(lines)-10))
	}
	return strings.Join(lines, "\n")
}

func (s NaturalSuite[V, M, R]) redelivery(t testing.TB, sh *naturalShared) {
	t.Helper()
	s.needEffect(t, sh)
	sc := s.start(t, sh, 2)
	sc.mustDeliver("the first delivery", sc.fx.Message)
	first := sc.view("after the first delivery")
	sc.mustDeliver("the second delivery", sc.fx.Message)
	sc.wantView(sc.view("after the second delivery"), first, "the second delivery", "after the first delivery", "one delivery leaves", notIdempotent)
}

func (s NaturalSuite[V, M, R]) concurrent(t testing.TB, sh *naturalShared) {
	t.Helper()
	n := Suite[V, M, R]{Deliveries: s.Deliveries}.deliveries(t)
	s.needEffect(t, sh)
	sc := s.start(t, sh, n)
	sc.mustDeliver("the first delivery", sc.fx.Message)
	first := sc.view("after the first delivery")
	errs := make([]error, n)
	AtOnce(n, func(i int) {
		_, _, errs[i] = sc.handle(sc.ctx, sc.fx.Message)
	})
	var failed []string
	for _, err := range errs {
		if err != nil {
			failed = append(failed, err.Error())
		}
	}
	if len(failed) > 0 {
		t.Errorf("%d of %d concurrent redeliveries failed; want none (serialization failures are retried by the wrapper):\n%s", len(failed), n, summarize(failed))
	}
	what := fmt.Sprintf("%d concurrent redeliveries", n)
	sc.wantView(sc.view("after "+what), first, what, "after the first delivery", "one delivery leaves", notIdempotent)
}

func (s NaturalSuite[V, M, R]) interleaved(t testing.TB, sh *naturalShared) {
	t.Helper()
	s.needEffect(t, sh)
	sc := s.start(t, sh, 2)
	var second M
	switch {
	case sc.fx.Second != nil:
		second = *sc.fx.Second
	case s.Rekey != nil:
		second = s.Rekey(sc.fx.Message)
	default:
		t.Fatal("no Second: give the fixture a Second message, with another key")
	}
	sc.mustDeliver("the first delivery", sc.fx.Message)
	sc.mustDeliver("the second message", second)
	after := sc.view("after the second message")
	const what = "the redelivery of the first message"
	sc.mustDeliver(what, sc.fx.Message)
	sc.wantView(sc.view("after "+what), after, what, "after the second message", "the second message leaves", notIdempotent)
}

func (s NaturalSuite[V, M, R]) failureBeforeCommit(t testing.TB, sh *naturalShared) {
	t.Helper()
	s.needEffect(t, sh)
	sc := s.start(t, sh, 2)
	before := sc.view("before the delivery")
	var abandoned atomic.Bool
	sc.atCommit = func(ctx context.Context, tx pgx.Tx) error {
		if abandoned.Swap(true) {
			return nil
		}
		return abandon(ctx, tx)
	}
	if _, o, err := sc.handle(sc.ctx, sc.fx.Message); err == nil {
		t.Fatalf("the delivery whose connection died before its commit: got %v; want an error", o)
	}
	const what = "the delivery abandoned before its commit"
	sc.wantView(sc.view("after "+what), before, what, "before it", "the state before it had", causeOutsideTx)
	sc.mustDeliver("the redelivery after the abandoned delivery", sc.fx.Message)
	if sc.fx.Snapshot == "" && sc.check.usable() {
		sc.check.wantOneDelivery("the abandoned delivery and its redelivery", causeOutsideTx)
	}
}
