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

// The scenarios of a NaturalSuite, in the order Run runs them.
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
	// Snapshot is a query whose rows are the state the handler owns, in a
	// stable order, such as SELECT * FROM prices ORDER BY sku: the
	// scenarios compare its rows after each delivery. Leave out what is
	// not the handler's effect and changes by itself (an updated_at set to
	// now()). Required.
	Snapshot string
}

// NaturalSuite runs the scenarios that prove a mode=natural handler
// idempotent by construction: nothing records its messages, so every
// redelivery runs it again, and the state it owns (NaturalFixture.Snapshot)
// must be the same after one delivery as after two, after N concurrent
// ones, and after a redelivery that follows another message. A handler
// that says balance = balance + $1 fails, with a message naming the rows
// and columns that differ. idemgen generates one per mode=natural handler.
type NaturalSuite[V, M, R any] struct {
	Migrations fs.FS
	New        func(recv V, pool *pgxpool.Pool, opts ...idem.Option) HandleFunc[M, R]
	Fixture    func(t testing.TB, db *DB) NaturalFixture[V, M]
	// Deliveries is N of ScenarioConcurrentRedeliveries; 0 means
	// EnvDeliveries, or else DefaultDeliveries.
	Deliveries int
	Options    []idem.Option
}

// Run runs the scenarios as subtests of t.
func (s NaturalSuite[V, M, R]) Run(t *testing.T) {
	t.Helper()
	DatabaseURL(t)
	for _, sc := range s.Scenarios() {
		if ok, why := sc.applies(); !ok {
			t.Logf("%s: not run: %s", sc.Name, why)
			continue
		}
		t.Run(sc.Name, func(t *testing.T) { sc.Run(t) })
	}
}

// Scenarios returns the scenarios of the suite, in order.
func (s NaturalSuite[V, M, R]) Scenarios() []Scenario {
	var called, second atomic.Bool
	always := func() (bool, string) { return true, "" }
	return []Scenario{
		{Name: ScenarioRedelivery, Run: func(t testing.TB) { s.redelivery(t, &called, &second) }, applies: always},
		{Name: ScenarioConcurrentRedeliveries, Run: func(t testing.TB) { s.concurrent(t, &called, &second) }, applies: always},
		{Name: ScenarioInterleaved, Run: func(t testing.TB) { s.interleaved(t, &called, &second) }, applies: func() (bool, string) {
			if called.Load() && !second.Load() {
				return false, "the fixture supplies no Second message"
			}
			return true, ""
		}},
	}
}

type naturalScenario[V, M, R any] struct {
	t      testing.TB
	ctx    context.Context
	db     *DB
	fx     NaturalFixture[V, M]
	handle HandleFunc[M, R]
}

func (s NaturalSuite[V, M, R]) start(t testing.TB, called, second *atomic.Bool, conns int) *naturalScenario[V, M, R] {
	t.Helper()
	if s.New == nil || s.Fixture == nil {
		t.Fatal("idemtest: a NaturalSuite needs New and Fixture")
	}
	ctx, cancel := context.WithTimeout(context.Background(), scenarioTimeout)
	t.Cleanup(cancel)
	sc := &naturalScenario[V, M, R]{t: t, ctx: ctx, db: New(t, s.Migrations)}
	sc.fx = s.Fixture(t, sc.db)
	called.Store(true)
	second.Store(sc.fx.Second != nil)
	if strings.TrimSpace(sc.fx.Snapshot) == "" {
		t.Fatal("the fixture's NaturalFixture has no Snapshot: give it a query whose rows are the state the handler owns, such as SELECT * FROM prices ORDER BY sku; without it nothing proves the handler idempotent")
	}
	pool := openPool(t, sc.db, sc.db.Schema+"_1", conns)
	sc.handle = s.New(sc.fx.Receiver, pool, append([]idem.Option{WithTestLogger(t)}, s.Options...)...)
	return sc
}

func (sc *naturalScenario[V, M, R]) mustDeliver(what string, msg M) {
	sc.t.Helper()
	if _, o, err := sc.handle(sc.ctx, msg); err != nil || o != idem.Processed {
		sc.t.Fatalf("%s: got (%v, %v); want Processed (does the fixture's message suit the handler and the seeded data?)", what, o, err)
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

// wantSame reports how got differs from want, naming the rows and columns.
func (sc *naturalScenario[V, M, R]) wantSame(got, want snapshot, wantWhen, gotWhen string) {
	sc.t.Helper()
	if diff := diffSnapshots(want, got, wantWhen, gotWhen); diff != "" {
		sc.t.Errorf("the handler is not idempotent: the state (%s) %s differs from the state %s:\n%s\n"+
			"a mode=natural handler must set absolute values or upsert on the natural key (INSERT ... ON CONFLICT DO UPDATE SET col = EXCLUDED.col), never add to what is there; "+
			"if it cannot, use mode=tx or mode=entity, which record the message", sc.fx.Snapshot, gotWhen, wantWhen, diff)
	}
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

func (s NaturalSuite[V, M, R]) redelivery(t testing.TB, called, second *atomic.Bool) {
	t.Helper()
	sc := s.start(t, called, second, 2)
	sc.mustDeliver("the first delivery", sc.fx.Message)
	first := sc.snapshot("after the first delivery")
	sc.mustDeliver("the second delivery", sc.fx.Message)
	sc.wantSame(sc.snapshot("after the second delivery"), first, "after the first delivery", "after the second delivery")
}

func (s NaturalSuite[V, M, R]) concurrent(t testing.TB, called, second *atomic.Bool) {
	t.Helper()
	n := Suite[V, M, R]{Deliveries: s.Deliveries}.deliveries(t)
	sc := s.start(t, called, second, n)
	sc.mustDeliver("the first delivery", sc.fx.Message)
	first := sc.snapshot("after the first delivery")
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
	when := fmt.Sprintf("after %d concurrent redeliveries", n)
	sc.wantSame(sc.snapshot(when), first, "after the first delivery", when)
}

func (s NaturalSuite[V, M, R]) interleaved(t testing.TB, called, second *atomic.Bool) {
	t.Helper()
	sc := s.start(t, called, second, 2)
	if sc.fx.Second == nil {
		t.Fatal("no Second: give the fixture a Second message, with another key")
	}
	sc.mustDeliver("the first delivery", sc.fx.Message)
	sc.mustDeliver("the second message", *sc.fx.Second)
	after := sc.snapshot("after the second message")
	sc.mustDeliver("the redelivery of the first message after the second", sc.fx.Message)
	sc.wantSame(sc.snapshot("after the redelivery of the first message"), after, "after the second message", "after the redelivery of the first message")
}
