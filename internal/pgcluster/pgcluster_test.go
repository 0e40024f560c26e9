package pgcluster

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestStartRefusesAMalformedSetting(t *testing.T) {
	for _, s := range []string{"work_mem", "=1", "application_name=it's"} {
		if c, err := Start("idemgen-pgcluster-test.", s); err == nil {
			c.Remove()
			t.Errorf("Start with setting %q: no error", s)
		} else if !strings.Contains(err.Error(), s) {
			t.Errorf("Start with setting %q: the error %q does not name it", s, err)
		}
	}
}

func TestClusterRunsWithItsSettingsAcrossARestart(t *testing.T) {
	c, err := Start("idemgen-pgcluster-test.", "application_name=pgcluster_test", "work_mem=7MB")
	if err != nil {
		t.Fatal(err)
	}
	removed := false
	defer func() {
		if !removed {
			c.Remove()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	check := func(when string) {
		conn, err := pgx.Connect(ctx, c.URL("postgres"))
		if err != nil {
			t.Fatalf("%s: connect: %v", when, err)
		}
		defer conn.Close(ctx)
		var workMem, dir string
		if err := conn.QueryRow(ctx, "SELECT current_setting('work_mem'), current_setting('unix_socket_directories')").Scan(&workMem, &dir); err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		if workMem != "7MB" || dir != c.Dir {
			t.Errorf("%s: work_mem %q, socket directory %q; want 7MB and %q", when, workMem, dir, c.Dir)
		}
	}
	check("started")
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := pgx.Connect(ctx, c.URL("postgres")); err == nil {
		t.Fatal("connected to a stopped cluster")
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	check("started again")
	c.Remove()
	removed = true
	if _, err := os.Stat(c.Dir); !os.IsNotExist(err) {
		t.Errorf("after Remove, %s: %v (want it gone)", c.Dir, err)
	}
}

// run runs sql on a new connection to url.
func run(t *testing.T, ctx context.Context, url, sql string, args ...any) {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect to %s: %v", url, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("%s on %s: %v", sql, url, err)
	}
}

// count returns the rows of table t on url, and the port the session is on.
func count(t *testing.T, ctx context.Context, url string) (rows, port int) {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect to %s: %v", url, err)
	}
	defer conn.Close(ctx)
	if err := conn.QueryRow(ctx, "SELECT count(*), current_setting('port')::int FROM t").Scan(&rows, &port); err != nil {
		t.Fatalf("count on %s: %v", url, err)
	}
	return rows, port
}

// waitRows waits until the standby has replayed want rows of t.
func waitRows(t *testing.T, ctx context.Context, p *Pair, want int) {
	t.Helper()
	for {
		var n int
		conn, err := pgx.Connect(ctx, p.StandbyURL("postgres"))
		if err == nil {
			// The table itself may not be replayed yet.
			err = conn.QueryRow(ctx, "SELECT count(*) FROM t").Scan(&n)
			conn.Close(ctx)
		}
		if err == nil && n == want {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the standby never had %d rows", want)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// TestPairFailsOverBothWays: a row committed on a synchronous pair through
// the multi-host URL is on the standby. After a failover the same URL
// (and its keyword/value form) reaches the promoted standby, which has the
// row and takes writes.
// FirstCommitAfter finds the first commit after the failover. Rebuild makes
// a standby on the old primary's port, and the pair fails over back.
func TestPairFailsOverBothWays(t *testing.T) {
	p, err := StartPair(PairOptions{Prefix: "idemgen-pgcluster-test.", Sync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Remove()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	url := p.URL("postgres")
	run(t, ctx, url, "CREATE TABLE t (id int)")
	run(t, ctx, url, "INSERT INTO t VALUES (1)")
	waitRows(t, ctx, p, 1)

	first := p.Primary().Port
	for round := 1; round <= 2; round++ {
		f, err := p.Failover()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("failover %d: %d → %d; the stop took %v, the promotion %v", round, f.From, f.To, f.Dead.Sub(f.Stopped), f.Promoted.Sub(f.Dead))
		if p.Standby() != nil || p.StandbyURL("postgres") != "" {
			t.Error("a standby right after the failover")
		}
		run(t, ctx, url, "INSERT INTO t VALUES ($1)", round+1)
		for _, conn := range []string{url, p.DSN("postgres")} {
			rows, port := count(t, ctx, conn)
			if rows != round+1 || port != f.To {
				t.Fatalf("after failover %d, through %s: %d rows on port %d; want %d on %d", round, conn, rows, port, round+1, f.To)
			}
		}
		at, ok, err := p.FirstCommitAfter(ctx, "postgres", pgx.Identifier{"t"}, f.Stopped)
		if err != nil || !ok || !at.After(f.Promoted.Add(-time.Millisecond)) {
			t.Fatalf("first commit after failover %d: %v %v %v; want one after the promotion (%v)", round, at, ok, err, f.Promoted)
		}
		if err := p.Rebuild(); err != nil {
			t.Fatal(err)
		}
		if p.Standby().Port != f.From {
			t.Fatalf("rebuilt standby on port %d; want the old primary's %d", p.Standby().Port, f.From)
		}
		waitRows(t, ctx, p, round+1)
	}
	if p.Primary().Port != first {
		t.Errorf("after two failovers the primary is on %d; want %d, where it began", p.Primary().Port, first)
	}
}

// TestPairAsyncFailoverLosesWhatTheStandbyMissed: an asynchronous pair
// whose replication is paused takes 10 commits that never reach the
// standby; the failover loses them, and the new primary has the row
// committed before the pause.
func TestPairAsyncFailoverLosesWhatTheStandbyMissed(t *testing.T) {
	p, err := StartPair(PairOptions{Prefix: "idemgen-pgcluster-test."})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Remove()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	url := p.URL("postgres")
	run(t, ctx, url, "CREATE TABLE t (id int)")
	run(t, ctx, url, "INSERT INTO t VALUES (0)")
	if err := p.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	if n, _ := count(t, ctx, p.StandbyURL("postgres")); n != 1 {
		t.Fatalf("%d rows on the standby after CatchUp; want 1", n)
	}
	if err := p.PauseReplication(); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 10; i++ {
		run(t, ctx, url, "INSERT INTO t VALUES ($1)", i)
	}
	if n, _ := count(t, ctx, url); n != 11 {
		t.Fatalf("%d rows on the primary; want 11", n)
	}
	if _, err := p.Failover(); err != nil {
		t.Fatal(err)
	}
	if n, _ := count(t, ctx, url); n != 1 {
		t.Fatalf("%d rows after the failover; want 1 (the 10 after the pause lost)", n)
	}
}

// TestReapRemovesClustersOfDeadProcesses: a cluster whose owner process is
// gone is stopped and deleted by the next Start; one whose owner lives is
// left alone.
func TestReapRemovesClustersOfDeadProcesses(t *testing.T) {
	orphan, err := Start("idemgen-pgcluster-test.")
	if err != nil {
		t.Fatal(err)
	}
	defer orphan.Remove()
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(orphan.Dir, ownerFile), []byte(strconv.Itoa(dead.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	live, err := Start("idemgen-pgcluster-test.")
	if err != nil {
		t.Fatal(err)
	}
	defer live.Remove()
	if _, err := os.Stat(orphan.Dir); !os.IsNotExist(err) {
		t.Errorf("the orphan's directory %s after the next Start: %v; want it gone", orphan.Dir, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, live.URL("postgres"))
	if err != nil {
		t.Fatalf("the live cluster: %v", err)
	}
	conn.Close(ctx)
}
