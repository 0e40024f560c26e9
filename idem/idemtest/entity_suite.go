package idemtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/idem"
)

// ScenarioKilledMidTransaction: the process of a delivery is killed with
// SIGKILL inside its transaction, after the handler's insert and before the
// commit (a child process running the same test binary); nothing is
// recorded, and the redelivery is Processed once, then a Duplicate.
const ScenarioKilledMidTransaction = "killed_mid_transaction"

// The environment of the child process of ScenarioKilledMidTransaction.
const (
	envKillURL = "IDEMTEST_KILL_URL"
	envKillMsg = "IDEMTEST_KILL_MESSAGE"
)

// EntitySuite runs the scenarios that prove a mode=entity consumer's
// guarantee, whose marker is the row its handler inserts into Table: the
// scenarios of Suite (16 concurrent deliveries give one row, one Processed
// and 15 Duplicates; a reused key is idem.ErrKeyReused; a unique violation
// of another constraint is the handler's error; a failure before the commit
// leaves nothing; a crash after it is a Duplicate), counting the rows of
// Table that carry a fingerprint (idem.FingerprintColumn: the fixture's
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
	for _, sc := range s.Scenarios() {
		if ok, why := sc.applies(); !ok {
			t.Logf("%s: not run: %s", sc.Name, why)
			continue
		}
		t.Run(sc.Name, func(t *testing.T) { sc.Run(t) })
	}
}

// Scenarios returns the scenarios of the suite, in order.
func (s EntitySuite[V, M, R]) Scenarios() []Scenario {
	seen := &fixtureSeen{}
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
		s.killedChild(t, url)
		return
	}
	sc := s.start(t, seen, 2)
	msg := sc.fx.Message
	encoded, err := json.Marshal(msg)
	if err != nil {
		t.Fatalf("encode the fixture's message for the child process: %v", err)
	}
	parts := strings.Split(t.Name(), "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	cmd := exec.Command(os.Args[0], "-test.run="+strings.Join(parts, "/"), "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), envKillURL+"="+sc.db.URL, envKillMsg+"="+string(encoded))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the child process ended with %v; want killed by SIGKILL inside its transaction. Its output:\n%s", err, out.String())
	}
	// The server notices the dead connection and rolls its transaction
	// back; wait until the session is gone.
	waitGone(t, sc.db.Pool, sc.db.Schema+"_kill")
	sc.wantInboxRows(0, "after the process was killed inside its transaction")
	sc.wantEffect(msg, 0, "after the process was killed inside its transaction")
	first := sc.mustProcess("the redelivery after the killed process", msg)
	sc.wantRuns(1, "the killed run never reached this process's hook; the redelivery ran once")
	sc.wantInboxRows(1, "after the redelivery")
	sc.wantEffect(msg, 1, "after the redelivery")
	sc.wantDuplicate("the second redelivery", sc.deliver(sc.handle, msg), first)
	sc.wantRuns(1, "a Duplicate must not run the handler")
}

// killedChild is the child process: it delivers the parent's message on the
// parent's schema and dies of SIGKILL in the before-commit hook, after the
// handler's insert.
func (s Suite[V, M, R]) killedChild(t testing.TB, url string) {
	var msg M
	if err := json.Unmarshal([]byte(os.Getenv(envKillMsg)), &msg); err != nil {
		t.Fatalf("child: decode the message: %v", err)
	}
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	schema := cfg.ConnConfig.RuntimeParams["search_path"]
	cfg.ConnConfig.RuntimeParams["application_name"] = schema + "_kill"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	// The fixture gives the receiver; it runs once more, on the parent's
	// schema (a fixture that seeds with fresh unique values tolerates it).
	fx := s.Fixture(t, &DB{Pool: pool, Schema: schema, URL: url})
	opts := append(append([]idem.Option(nil), s.Options...), idem.WithBeforeCommit(func(context.Context, pgx.Tx) error {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		time.Sleep(time.Minute)
		return errors.New("idemtest: SIGKILL did not kill the child")
	}))
	_, o, err := s.New(fx.Receiver, pool, opts...)(ctx, msg)
	t.Fatalf("child: the delivery returned (%v, %v) instead of reaching the before-commit hook, where the process kills itself", o, err)
}

// waitGone waits until no session of application_name app is left.
func waitGone(t testing.TB, pool *pgxpool.Pool, app string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int
		if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&n); err != nil {
			t.Fatalf("watch the killed process's session: %v", err)
		}
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the killed process's session (%s) is still in pg_stat_activity after 30s", app)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
