package idemtest

import (
	"context"
	"fmt"
	"io/fs"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
	"unicode"

	"github.com/jackc/pgx/v5/pgxpool"
)

// ScenarioEffect: one delivery of the message, in each of two fresh
// schemas, changes the state of the test schema (its tables but idemgen's
// own): without a fixture that is what shows the handler did something, and
// the test fails when it changed nothing. The columns whose values differ
// between the two (a clock, a random id) and identity columns are left out
// of the comparisons of the later scenarios, which judge the state after
// their deliveries against the state after this one delivery.
const ScenarioEffect = "effect"

// Causes the scenarios name when the state is not what the rules say.
const (
	causeOutsideTx = "the handler writes outside its transaction (through a pool?): only writes through its tx are undone with the delivery"
	causeDuplicate = "a duplicate must change nothing"
)

// reference is what one delivery of a scenario's message does to the test
// schema, learnt once per test by ScenarioEffect (or by the first scenario
// that needs it) from two deliveries, each in a fresh schema.
type reference struct {
	mu      sync.Mutex
	learnt  bool
	usable  bool   // the scenarios compare states with it
	why     string // why not, for their log line
	failure string // what ScenarioEffect reports
	note    string // what ScenarioEffect logs
	// halt, for a sample message that failed or changed nothing, says why
	// the other scenarios stop at once: without an effect to judge they
	// would pass having shown nothing.
	halt  string
	after state // after the delivery, in the first schema
	judge judge
}

// delivered is one delivery in a fresh schema, as the reference learns it.
type delivered struct {
	before, after state
	volatile      map[string]map[string]bool
	sampled       bool
	message       string // the message, as JSON
	advice        string // the fixture to write, when sampled
	provider      int    // the effects the scenario's Provider applied
	published     int    // the rows the delivery wrote to idem_outbox
}

// learn runs one twice, once; a scenario that needs the reference calls it,
// and first says it is ScenarioEffect. one fills in what it delivered. A
// failure in one ends the calling scenario and leaves the reference
// unusable.
//
// Migrations that create tables in a named schema (NamedSchemas) allow one
// schema at a time in a test: then only ScenarioEffect learns, from one
// delivery, whether the handler changed anything, and the other scenarios
// compare no state.
func (r *reference) learn(migrations fs.FS, first bool, one func(d *delivered)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.learnt {
		return
	}
	named, err := NamedSchemas(migrations)
	if err != nil {
		named = []string{"?"}
	}
	if len(named) > 0 && !first {
		r.learnt, r.why = true, "the migrations create tables in schema "+strings.Join(named, ", ")+", and "+ScenarioEffect+" did not run first"
		return
	}
	r.learnt, r.why = true, "the first delivery did not go through ("+ScenarioEffect+" failed)"
	var a delivered
	done := false
	defer func() {
		if !done && a.sampled {
			r.halt = "the first delivery of the sample message failed"
		}
	}()
	one(&a)
	done = true
	if len(diffAll(a.after, a.before)) == 0 {
		r.why = "the first delivery changed no table of the test schema (" + a.after.tables() + ")"
		switch {
		case a.provider > 0:
			r.note = r.why + "; it called the scenario's Provider, whose effects and keys the scenarios check"
		case a.published > 0:
			r.note = r.why + "; it published through the outbox, whose rows the scenarios check"
		case a.sampled:
			r.halt = "the first delivery of the sample message changed nothing"
			r.failure = "the first delivery of the sample message changed no table of the test schema (" + a.after.tables() + "): " +
				"nothing shows what the handler did. The sample message was " + a.message + ".\nIf the handler needs data that is not there, or another message, " + a.advice
		default:
			r.note = r.why + "; the scenarios rely on the fixture's Effect, if it has one"
		}
		return
	}
	if len(named) > 0 {
		r.why = "the migrations create tables in schema " + strings.Join(named, ", ") + ", outside the test's own, " +
			"so a test cannot open the second schema that shows which columns vary from one run to the next"
		r.note = "one delivery changed: " + strings.Join(diffAll(a.after, a.before), "; ")
		return
	}
	var b delivered
	one(&b)
	for t, cols := range b.volatile {
		for c := range cols {
			if a.volatile[t] == nil {
				a.volatile[t] = map[string]bool{}
			}
			a.volatile[t][c] = true
		}
	}
	r.judge = learnJudge(a.volatile, [2]state{a.before, b.before}, [2]state{a.after, b.after})
	r.after, r.usable, r.why = a.after, true, ""
	r.note = "one delivery changed: " + strings.Join(diffAll(a.after, a.before), "; ")
	if cols := r.judge.ignoredColumns(a.after); cols != "" {
		r.note += "; not compared, since they differ from one run to the next: " + cols
	}
	if tables := r.judge.ignored(); tables != "" {
		r.note += "; not judged, since two single deliveries leave them with different numbers of rows: " + tables
	}
}

// diffAll is judge.diff comparing every column of every table.
func diffAll(got, want state) []string {
	return judge{}.diff(got, want, "the state before it had")
}

// stopIfHalted ends a scenario whose sample message showed no effect
// (reference.halt); it fails, since nothing was proven.
func (r *reference) stopIfHalted(t testing.TB) {
	t.Helper()
	r.mu.Lock()
	halt := r.halt
	r.mu.Unlock()
	if halt != "" {
		t.Fatalf("not run: %s (see %s)", halt, ScenarioEffect)
	}
}

// effectScenario is ScenarioEffect, for any suite: learn is its
// reference.learn call.
func effectScenario(t testing.TB, r *reference, learn func()) {
	t.Helper()
	learn()
	r.mu.Lock()
	failure, note := r.failure, r.note
	r.mu.Unlock()
	if failure != "" {
		t.Fatal(failure)
	}
	if note != "" {
		t.Log(note)
	}
}

// stateCheck compares a scenario's states with the reference.
type stateCheck struct {
	t      testing.TB
	ctx    context.Context
	pool   *pgxpool.Pool
	schema string
	skip   []string // the inbox of a mode=tx or mode=external consumer
	ref    *reference
	// off says why the scenario compares no state ("" when it does).
	off string
}

// read reads the scenario's state.
func (c *stateCheck) read(when string) state {
	c.t.Helper()
	s, err := readState(c.ctx, c.pool, c.schema, c.skip...)
	if err != nil {
		c.t.Fatalf("read the state of the test schema %s: %v", when, err)
	}
	return s
}

// usable reports whether the scenario compares states, logging why not
// the first time it does not.
func (c *stateCheck) usable() bool {
	c.t.Helper()
	if c.off != "" {
		return false
	}
	c.ref.mu.Lock()
	usable, why := c.ref.usable, c.ref.why
	c.ref.mu.Unlock()
	if !usable {
		c.off = why
		c.t.Logf("the state of the test schema is not compared: %s", why)
	}
	return usable
}

// before reads the state before the scenario's deliveries, for wantSame;
// nil when states are not compared.
func (c *stateCheck) before() state {
	c.t.Helper()
	if !c.usable() {
		return nil
	}
	return c.read("before the first delivery")
}

// wantOneDelivery checks that the state is the one a single delivery
// leaves; what names the deliveries so far, cause says what a difference
// means.
func (c *stateCheck) wantOneDelivery(what, cause string) {
	c.t.Helper()
	if !c.usable() {
		return
	}
	if d := c.ref.judge.diff(c.read("after "+what), c.ref.after, "one delivery leaves"); len(d) > 0 {
		c.t.Errorf("%s left %s: %s", what, strings.Join(d, "; "), cause)
	}
}

// wantSame checks that the state is still before, read before what
// happened.
func (c *stateCheck) wantSame(before state, what, cause string) {
	c.t.Helper()
	if before == nil || !c.usable() {
		return
	}
	if d := c.ref.judge.diff(c.read("after "+what), before, "the state before it had"); len(d) > 0 {
		c.t.Errorf("%s left %s: %s", what, strings.Join(d, "; "), cause)
	}
}

// caller is the generated test that runs a suite: its package and name,
// which the advice to write a fixture spells out.
type caller struct {
	pkgPath string
	test    string
}

// callerOf returns the function skip frames above callerOf's caller.
func callerOf(skip int) caller {
	pc, _, _, ok := runtime.Caller(skip + 1)
	if !ok {
		return caller{}
	}
	fn := runtime.FuncForPC(pc)
	if fn == nil {
		return caller{}
	}
	name := fn.Name() // example.com/app/billing.TestChargeIdem
	slash := strings.LastIndexByte(name, '/')
	dot := strings.IndexByte(name[slash+1:], '.')
	if dot < 0 {
		return caller{}
	}
	return caller{pkgPath: name[:slash+1+dot], test: name[slash+2+dot:]}
}

// fixtureAdvice says which fixture to write for the handler a suite of
// fixture type kind (Fixture, ExternalFixture, NaturalFixture) tests, whose
// fixture function takes param: its exact signature, where it goes, and
// the option that names it.
func fixtureAdvice[V, M any](c caller, kind, param string) string {
	handler := "Handler"
	if h, ok := strings.CutPrefix(c.test, "Test"); ok {
		if h, ok := strings.CutSuffix(h, "Idem"); ok && h != "" {
			handler = h
		}
	}
	name := strings.ToLower(handler[:1]) + handler[1:] + "Fixture"
	pkg := c.pkgPath
	if pkg == "" {
		pkg = typePkg(reflect.TypeFor[V]())
	}
	sig := fmt.Sprintf("func %s(t testing.TB, %s) idemtest.%s[%s, %s]", name, param, kind,
		typeText(reflect.TypeFor[V](), pkg), typeText(reflect.TypeFor[M](), pkg))
	where := ""
	if pkg != "" {
		where = "in a _test.go file of package " + pkg[strings.LastIndexByte(pkg, '/')+1:] + ", "
	}
	return fmt.Sprintf("write a fixture (see idemtest.%s) that seeds what the handler needs and chooses its message,\n\t%s\n%sand add fixture=%s to the //idem:handler directive of %s",
		kind, sig, where, name, handler)
}

// typePkg returns the import path of t's package, through pointers.
func typePkg(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.PkgPath()
}

// typeText spells t as code in the package pkg spells it: its own types
// bare, the others qualified by their package's name.
func typeText(t reflect.Type, pkg string) string {
	switch {
	case t.Name() == "":
		switch t.Kind() {
		case reflect.Pointer:
			return "*" + typeText(t.Elem(), pkg)
		case reflect.Slice:
			return "[]" + typeText(t.Elem(), pkg)
		case reflect.Map:
			return "map[" + typeText(t.Key(), pkg) + "]" + typeText(t.Elem(), pkg)
		}
		return t.String()
	case t.PkgPath() == "":
		return t.Name()
	}
	// A generic type's name spells its type arguments with import paths:
	// Message[example.com/app/events.Paid].
	name := qualifyArgs(t.Name(), pkg)
	if t.PkgPath() == pkg {
		return name
	}
	qual, _, _ := strings.Cut(t.String(), ".")
	return qual + "." + name
}

// qualifyArgs rewrites the import paths in the type arguments of a generic
// type's name into package names, or nothing for pkg's own types.
func qualifyArgs(name, pkg string) string {
	if !strings.Contains(name, "[") {
		return name
	}
	var b, token strings.Builder
	flush := func() {
		s := token.String()
		token.Reset()
		if dot := strings.LastIndexByte(s, '.'); dot > 0 {
			path, ident := s[:dot], s[dot+1:]
			if path == pkg {
				s = ident
			} else {
				s = path[strings.LastIndexByte(path, '/')+1:] + "." + ident
			}
		}
		b.WriteString(s)
	}
	for _, r := range name {
		if unicode.IsLetter(r) || unicode.IsDigit(r) || strings.ContainsRune("_./-~", r) {
			token.WriteRune(r)
			continue
		}
		flush()
		b.WriteRune(r)
	}
	flush()
	return b.String()
}
