package relay_test

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/idem/idemtest"
	"github.com/idemgen/idemgen/idem/idemtest/brokertest"
	"github.com/idemgen/idemgen/idem/internal/relaytest"
	"github.com/idemgen/idemgen/idem/relay"
	"github.com/idemgen/idemgen/internal/pgcluster"
)

// These tests run the relay on a throwaway primary with an asynchronous
// standby (pgcluster.Pair), through the pair's multi-host URL.

func startAsyncPair(t *testing.T) *pgcluster.Pair {
	t.Helper()
	p, err := pgcluster.StartPair(pgcluster.PairOptions{Prefix: "idemgen-relay-test.", Settings: []string{"fsync=off"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Remove)
	return p
}

// onStandby waits until the standby has replayed db's outbox table.
func onStandby(t *testing.T, p *pgcluster.Pair, db *idemtest.DB) {
	t.Helper()
	relaytest.WaitFor(t, 30*time.Second, "the outbox table on the standby", func() bool {
		conn, err := pgx.Connect(context.Background(), p.StandbyURL("postgres"))
		if err != nil {
			return false
		}
		defer conn.Close(context.Background())
		var ok bool
		err = conn.QueryRow(context.Background(), `SELECT to_regclass($1) IS NOT NULL`, db.Schema+".idem_outbox").Scan(&ok)
		return err == nil && ok
	})
}

// TestRelayReplicatedWaitsForAStandby: under WithReplicated, rows committed
// while the standby is cut off are not published, and the relay says why
// (no standby streams); once the standby streams again they are published,
// each once. A relay whose role cannot read the standbys' flush position
// says that it lacks pg_read_all_stats, and publishes once granted it.
func TestRelayReplicatedWaitsForAStandby(t *testing.T) {
	pair := startAsyncPair(t)
	t.Run("no standby", func(t *testing.T) {
		db := idemtest.NewAt(t, pair.URL("postgres"), relaytest.OutboxFS(t, nil))
		onStandby(t, pair, db)
		if err := pair.PauseReplication(); err != nil {
			t.Fatal(err)
		}
		rows := relaytest.MakeRows("held", 5)
		relaytest.Commit(t, db.Pool, rows)
		logs, log := brokertest.NewLogs(t)
		rec := &relaytest.Recorder{}
		relaytest.Run(t, relay.New(db.Pool, rec.Publisher("replicated", 0, nil), relay.WithReplicated(), relay.WithID("replicated"),
			relay.WithPollInterval(50*time.Millisecond), relay.WithLogger(log)))
		relaytest.WaitFor(t, 10*time.Second, "the wait logged", func() bool { return strings.Contains(logs.String(), "no standby streams") })
		if n := rec.Len(); n != 0 {
			t.Fatalf("%d messages published with no standby streaming; want none", n)
		}
		if err := pair.ResumeReplication(); err != nil {
			t.Fatal(err)
		}
		resumed := time.Now()
		relaytest.WaitFor(t, 10*time.Second, "every row published", func() bool { return relaytest.Pending(t, db) == 0 })
		t.Logf("published %v after the standby streamed again; %d publications of %d rows", time.Since(resumed).Round(time.Millisecond), rec.Len(), len(rows))
		if rec.Len() != len(rows) {
			t.Errorf("%d publications of %d rows; want each once", rec.Len(), len(rows))
		}
	})
	t.Run("no pg_read_all_stats", func(t *testing.T) {
		db := idemtest.NewAt(t, pair.URL("postgres"), relaytest.OutboxFS(t, nil))
		role := "relay_" + db.Schema
		for _, sql := range []string{
			"CREATE ROLE " + role + " LOGIN",
			"GRANT USAGE ON SCHEMA " + db.Schema + " TO " + role,
			"GRANT SELECT, UPDATE, DELETE ON " + db.Schema + ".idem_outbox TO " + role,
		} {
			if _, err := db.Pool.Exec(context.Background(), sql); err != nil {
				t.Fatal(err)
			}
		}
		t.Cleanup(func() {
			_, _ = db.Pool.Exec(context.Background(), "DROP OWNED BY "+role)
			_, _ = db.Pool.Exec(context.Background(), "DROP ROLE "+role)
		})
		u, err := url.Parse(db.URL)
		if err != nil {
			t.Fatal(err)
		}
		u.User = url.User(role)
		pool := relayPool(t, u.String())
		relaytest.Commit(t, db.Pool, relaytest.MakeRows("stats", 3))
		logs, log := brokertest.NewLogs(t)
		rec := &relaytest.Recorder{}
		relaytest.Run(t, relay.New(pool, rec.Publisher("nostats", 0, nil), relay.WithReplicated(), relay.WithID("nostats"),
			relay.WithPollInterval(50*time.Millisecond), relay.WithLogger(log)))
		relaytest.WaitFor(t, 10*time.Second, "the missing privilege logged", func() bool { return strings.Contains(logs.String(), "pg_read_all_stats") })
		if n := rec.Len(); n != 0 {
			t.Fatalf("%d messages published while no flush position could be read; want none", n)
		}
		if _, err := db.Pool.Exec(context.Background(), "GRANT pg_read_all_stats TO "+role); err != nil {
			t.Fatal(err)
		}
		relaytest.WaitFor(t, 10*time.Second, "every row published once granted pg_read_all_stats", func() bool { return relaytest.Pending(t, db) == 0 })
		if rec.Len() != 3 {
			t.Errorf("%d publications of 3 rows; want each once", rec.Len())
		}
	})
}

// TestRelayReplicatedPublishesNothingAFailoverTakesBack: the standby of an
// asynchronous pair is cut off, and two relays each see 5 rows committed
// in their schema: the plain relay publishes them, the one WithReplicated
// waits. The failover loses the 10 commits. The plain relay's 5 messages
// have no row behind them any more; the WithReplicated relay published
// nothing, and, the new primary given a standby, goes on publishing what
// is committed there, without a restart.
func TestRelayReplicatedPublishesNothingAFailoverTakesBack(t *testing.T) {
	pair := startAsyncPair(t)
	held := idemtest.NewAt(t, pair.URL("postgres"), relaytest.OutboxFS(t, nil))
	plain := idemtest.NewAt(t, pair.URL("postgres"), relaytest.OutboxFS(t, nil))
	onStandby(t, pair, held)
	onStandby(t, pair, plain)
	if err := pair.PauseReplication(); err != nil {
		t.Fatal(err)
	}
	relaytest.Commit(t, held.Pool, relaytest.MakeRows("lost", 5))
	relaytest.Commit(t, plain.Pool, relaytest.MakeRows("lost", 5))
	heldRec, plainRec := &relaytest.Recorder{}, &relaytest.Recorder{}
	opts := []relay.Option{relay.WithPollInterval(50 * time.Millisecond), relay.WithBackoff(50*time.Millisecond, 200*time.Millisecond),
		relay.WithLogger(relaytest.Logger(t))}
	relaytest.Run(t, relay.New(held.Pool, heldRec.Publisher("held", 0, nil), append(opts, relay.WithReplicated(), relay.WithID("held"))...))
	relaytest.Run(t, relay.New(plain.Pool, plainRec.Publisher("plain", 0, nil), append(opts, relay.WithID("plain"))...))
	relaytest.WaitFor(t, 10*time.Second, "the plain relay to publish its rows", func() bool { return relaytest.Pending(t, plain) == 0 })
	time.Sleep(300 * time.Millisecond)
	if n := heldRec.Len(); n != 0 {
		t.Fatalf("the WithReplicated relay published %d messages of commits no standby had; want none", n)
	}

	f, err := pair.Failover()
	if err != nil {
		t.Fatal(err)
	}
	lost := func(db *idemtest.DB) int {
		var n int
		relaytest.WaitFor(t, 10*time.Second, "the new primary", func() bool {
			return db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM idem_outbox`).Scan(&n) == nil
		})
		return 5 - n
	}
	t.Logf("failover %d → %d: %d of 5 commits lost in each schema; the plain relay had published %d messages of them, the WithReplicated relay %d",
		f.From, f.To, lost(plain), plainRec.Len(), heldRec.Len())
	if lost(plain) != 5 || lost(held) != 5 || plainRec.Len() != 5 {
		t.Fatalf("lost %d and %d commits, the plain relay published %d; want the 5 commits after the cut lost in each, and published by the plain relay",
			lost(plain), lost(held), plainRec.Len())
	}

	if err := pair.Rebuild(); err != nil {
		t.Fatal(err)
	}
	after := relaytest.MakeRows("after", 3)
	relaytest.Commit(t, held.Pool, after)
	relaytest.WaitFor(t, 20*time.Second, "the rows committed on the new primary published", func() bool { return relaytest.Pending(t, held) == 0 })
	got := map[string]bool{}
	for _, p := range heldRec.Snapshot() {
		got[p.Payload] = true
	}
	if len(heldRec.Snapshot()) != len(after) || !got["after-0"] || !got["after-1"] || !got["after-2"] {
		t.Errorf("the WithReplicated relay published %v; want only the 3 rows committed after the failover", heldRec.Snapshot())
	}
}

// relayPool opens a pool on url for the test.
func relayPool(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(fmt.Errorf("open a pool: %w", err))
	}
	t.Cleanup(pool.Close)
	return pool
}
