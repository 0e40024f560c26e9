package idemtest

import (
	"io/fs"
	"os"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/idem"
)

// ScenarioKilledMidTransaction: the process of a delivery is killed with
// SIGKILL inside its transaction, after the handler's insert and before the
// commit (a child process running the same test binary); nothing is
// recorded, and the redelivery is Processed once, then a Duplicate.
const ScenarioKilledMidTransaction = "killed_mid_transaction"

// EntitySuite runs the scenarios that prove a mode=entity consumer's
// guarantee, whose marker is the row its handler inserts into Table: the
// scenarios of Suite (16 concurrent deliveries give one row, one Processed
// and 15 Duplicates; a reused key is idem.ErrKeyReused; a unique violation
// of another constraint is the handler's error; a failure before the commit
// leaves nothing; a crash after it is a Duplicate), counting the rows of
// Table that carry a fingerprint (idemimpl.FingerprintColumn: the fixture's
// seeded rows have none), and ScenarioKilledMidTransaction. idemgen
// generates one per mode=entity handler. Its fixture is a Fixture, as for
// mode=tx.
type EntitySuite[V, M, R any] struct {
	// Migrations create the entity table and add its fingerprint column.
	Migrations fs.FS
	// Table is the entity table, as the migrations name it.
	Table   string
	New     func(recv V, pool *pgxpool.Pool, opts ...idem.Option) HandleFunc[M, R]
	Fixture func(t testing.TB, db *DB) Fixture[V, M]
	Variant func(msg M) M
	// Deliveries is N of the concurrent scenario; 0 means EnvDeliveries,
	// or else DefaultDeliveries.
	Deliveries int
	Options    []idem.Option
}

func (s EntitySuite[V, M, R]) suite() Suite[V, M, R] {
	return Suite[V, M, R]{Migrations: s.Migrations, Inbox: s.Table, New: s.New, Fixture: s.Fixture, Variant: s.Variant,
		Deliveries: s.Deliveries, Options: s.Options, markers: true}
}

// Run runs the scenarios as subtests of t. In the child process of
// ScenarioKilledMidTransaction it runs only that child's delivery.
func (s EntitySuite[V, M, R]) Run(t *testing.T) {
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

// Scenarios returns the scenarios of the suite, in order.
func (s EntitySuite[V, M, R]) Scenarios() []Scenario { return s.scenarios(&fixtureSeen{}) }

func (s EntitySuite[V, M, R]) scenarios(seen *fixtureSeen) []Scenario {
	su := s.suite()
	scs := su.scenarios(seen)
	return append(scs, Scenario{Name: ScenarioKilledMidTransaction, applies: func() (bool, string) { return true, "" },
		Run: func(t testing.TB) { su.killedMidTransaction(t, seen) }})
}

// killedMidTransaction runs a child process (this test binary, this test,
// this scenario) that delivers the message and kills itself with SIGKILL
// in the before-commit hook, then checks that nothing was recorded and that
// the redelivery is processed once.
func (s Suite[V, M, R]) killedMidTransaction(t testing.TB, seen *fixtureSeen) {
	t.Helper()
	if url := os.Getenv(envKillURL); url != "" {
		ctx, child := s.killedChild(t, url)
		_, o, err := s.New(child.recv, child.pool, child.opts...)(ctx, child.msg)
		t.Fatalf("child: the delivery returned (%v, %v) instead of reaching the before-commit hook, where the process kills itself", o, err)
		return
	}
	s.needEffect(t, seen)
	sc := s.start(t, seen, 2)
	msg := sc.fx.Message
	before := sc.killedBefore()
	runKilledChild(t, sc.db, msg)
	sc.wantInboxRows(0, "after the process was killed inside its transaction")
	sc.wantEffect(msg, 0, "after the process was killed inside its transaction")
	sc.check.wantSame(before, "the delivery killed before its commit", causeOutsideTx)
	first := sc.mustProcess("the redelivery after the killed process", msg)
	sc.wantRuns(1, "the killed run never reached this process's hook; the redelivery ran once")
	sc.wantInboxRows(1, "after the redelivery")
	sc.wantEffect(msg, 1, "after the redelivery")
	sc.check.wantOneDelivery("the killed delivery and its redelivery", causeOutsideTx)
	sc.wantDuplicate("the second redelivery", sc.deliver(sc.handle, msg), first)
	sc.wantRuns(1, "a Duplicate must not run the handler")
}
