package idemtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
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

// The scenarios that kill a process with SIGKILL inside its transaction
// (ScenarioKilledMidTransaction, ScenarioBatchKilledMidBatch) run the same
// test binary again, with this test and scenario only, as the process to
// kill. Its environment tells it so, and what to deliver.
const (
	envKillURL = "IDEMTEST_KILL_URL"
	envKillMsg = "IDEMTEST_KILL_MESSAGE"
)

// runKilledChild runs the child process of the scenario t is running, on
// db's schema, with msg to deliver, and wants it to die of SIGKILL. It
// returns once the server has rolled the child's transaction back (its
// session is gone).
func runKilledChild[M any](t testing.TB, db *DB, msg M) {
	t.Helper()
	encoded, err := json.Marshal(msg)
	if err != nil {
		t.Fatalf("encode the fixture's message for the child process: %v", err)
	}
	parts := strings.Split(t.Name(), "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	cmd := exec.Command(os.Args[0], "-test.run="+strings.Join(parts, "/"), "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), envKillURL+"="+db.URL, envKillMsg+"="+string(encoded))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the child process ended with %v; want killed by SIGKILL inside its transaction. Its output:\n%s", err, out.String())
	}
	// The server notices the dead connection and rolls its transaction
	// back; wait until the session is gone.
	waitGone(t, db.Pool, db.Schema+"_kill")
}

// killedChild is what the child process delivers with: the parent's
// message, a pool on the parent's schema, the fixture's receiver, and the
// Suite's options with a before-commit hook that kills the process.
type killedChild[V, M any] struct {
	msg  M
	recv V
	pool *pgxpool.Pool
	opts []idem.Option
}

// killedChild sets up the child process of a kill scenario: the process
// kills itself in the before-commit hook, given as an option and in the
// returned context. The fixture
// runs once more, on the parent's schema, for the receiver (a fixture that
// seeds with fresh unique values, as fixtures must, tolerates it).
func (s Suite[V, M, R]) killedChild(t testing.TB, url string) (context.Context, killedChild[V, M]) {
	var c killedChild[V, M]
	if err := json.Unmarshal([]byte(os.Getenv(envKillMsg)), &c.msg); err != nil {
		t.Fatalf("child: decode the message: %v", err)
	}
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	schema := cfg.ConnConfig.RuntimeParams["search_path"]
	cfg.ConnConfig.RuntimeParams["application_name"] = schema + "_kill"
	if c.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		t.Fatalf("child: %v", err)
	}
	c.recv = s.fixture(t, &DB{Pool: c.pool, Schema: schema, URL: url}).Receiver
	kill := func(context.Context, pgx.Tx) error {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		time.Sleep(time.Minute)
		return errors.New("idemtest: SIGKILL did not kill the child")
	}
	c.opts = append(append([]idem.Option{WithTestLogger(t)}, s.Options...), idem.WithBeforeCommit(kill))
	// A consumer not built on idemimpl.Inbox reaches the hook through
	// BeforeCommit(ctx, tx).
	return context.WithValue(ctx, hookKey{}, kill), c
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

// killedBefore reads the state before a kill scenario's child process runs,
// for a sampled fixture. A fixture of the user's runs again in the child, on
// this schema, and may seed rows there: then the state is not compared.
func (sc *scenario[V, M, R]) killedBefore() state {
	sc.t.Helper()
	if !sc.fx.sampled {
		sc.check.off = "the child process runs the fixture again in this schema"
		return nil
	}
	return sc.check.before()
}
