package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/bench/ledger"
	"github.com/idemgen/idemgen/internal/pgcluster"
)

// The statements part: what each statement of a delivery costs the server,
// read from pg_stat_statements, for the scenarios of the message delivery
// table one message at a time on one connection.

// stmtWarmup is how many messages each scenario delivers before the
// measurement: pgx prepares its statements, the server caches their plans.
const stmtWarmup = 200

// stmtSettings are the throwaway cluster's settings on top of initdb's
// defaults (fsync and synchronous_commit on, as on a real server):
// pg_stat_statements preloaded, planning timed too, and no autovacuum, so
// that the WAL between two positions is the deliveries' own.
var stmtSettings = []string{
	"shared_preload_libraries=pg_stat_statements",
	"pg_stat_statements.track_planning=on",
	"pg_stat_statements.max=10000",
	"autovacuum=off",
}

// stmtResults are what the statements part measured.
type stmtResults struct {
	// where says which server ran the statements; own, whether it is the
	// part's throwaway cluster (then the WAL positions are the run's
	// alone).
	where     string
	own       bool
	cluster   *pgcluster.Cluster // the throwaway cluster, when own
	version   string
	planning  bool // pg_stat_statements.track_planning
	msgs      int  // messages of each scenario in each round
	rounds    int
	workers   []int
	scenarios []*stmtScenario // every scenario at each of workers
}

// stmtScenario is one scenario's statements, pooled over the rounds.
type stmtScenario struct {
	name, what string
	workers    int // concurrent workers, on a pool of as many connections
	msgs       int64
	trips      int64
	serverCPU  time.Duration // -1 when unknown
	wal        int64         // WAL bytes between the positions; -1 when not the run's alone
	stmts      map[string]*stmtCost
}

// stmtCost is one statement's counters of pg_stat_statements: over a
// measurement, the difference of two reads.
type stmtCost struct {
	query                       string
	calls, plans, rows          int64
	execMs, planMs              float64
	hit, read, dirtied, written int64
	walRecords, walFPI          int64
	walBytes                    float64
}

func (c *stmtCost) sub(o *stmtCost) {
	c.calls -= o.calls
	c.plans -= o.plans
	c.rows -= o.rows
	c.execMs -= o.execMs
	c.planMs -= o.planMs
	c.hit -= o.hit
	c.read -= o.read
	c.dirtied -= o.dirtied
	c.written -= o.written
	c.walRecords -= o.walRecords
	c.walFPI -= o.walFPI
	c.walBytes -= o.walBytes
}

func (c *stmtCost) add(o *stmtCost) {
	c.calls += o.calls
	c.plans += o.plans
	c.rows += o.rows
	c.execMs += o.execMs
	c.planMs += o.planMs
	c.hit += o.hit
	c.read += o.read
	c.dirtied += o.dirtied
	c.written += o.written
	c.walRecords += o.walRecords
	c.walFPI += o.walFPI
	c.walBytes += o.walBytes
}

// stmtScenarioDef is a scenario of the part: one of the message delivery
// table's, or one of its own, and the query exec mode of its pool ("": pgx's
// default, the statement cache).
type stmtScenarioDef struct {
	sc   scenario
	mode string
}

// Scenario names of this part only.
const (
	scHandDuplicate = "hand-written, duplicates"
	scGenSimple     = "generated, simple protocol"
)

func stmtScenarios() []stmtScenarioDef {
	byName := map[string]scenario{}
	for _, sc := range goScenarios() {
		byName[sc.name] = sc
	}
	simple := byName[scGenerated]
	simple.name = scGenSimple
	simple.what = "the generated wrapper's first deliveries on a pool in `QueryExecModeSimpleProtocol` (what PgBouncer's transaction mode needs): every statement parsed and planned each time"
	return []stmtScenarioDef{
		{sc: byName[scBare]},
		{sc: byName[scHand]},
		{sc: handDuplicates()},
		{sc: byName[scGenerated]},
		{sc: byName[scPessimistic]},
		{sc: byName[scDuplicate]},
		{sc: simple, mode: "simple_protocol"},
	}
}

// handDuplicates is the hand-written inbox fed only messages it has
// processed.
func handDuplicates() scenario {
	return scenario{
		name: scHandDuplicate,
		what: fmt.Sprintf("`ledger.HandWritten` fed only messages it has processed (%d, processed before the warm-up): BEGIN, the claim that finds the key, ROLLBACK, the read of the stored row", duplicateKeys),
		prepare: func(ctx context.Context, pool *pgxpool.Pool, accounts int) (deliverFunc, error) {
			hand := ledger.NewHandWritten(pool)
			msgs := make([]ledger.Deposit, duplicateKeys)
			for i := range msgs {
				msgs[i] = ledger.Deposit{MessageID: "d-" + strconv.Itoa(i), Account: int64(i%accounts) + 1, Amount: 1}
				if _, _, err := hand.Handle(ctx, msgs[i]); err != nil {
					return nil, err
				}
			}
			return func(ctx context.Context, w *worker) error {
				w.seq++
				_, dup, err := hand.Handle(ctx, msgs[(w.id*7919+w.seq)%len(msgs)])
				if err == nil && !dup {
					err = errors.New("a processed message was taken for a new one")
				}
				return err
			}, nil
		},
	}
}

// runStatements measures the statements of every scenario, cfg.rounds times
// in turn, cfg.stmtMsgs messages each, on a server with pg_stat_statements:
// the target server if it preloads it, else a throwaway cluster of the
// part's own.
func runStatements(ctx context.Context, cfg *config) (*stmtResults, error) {
	res := &stmtResults{msgs: cfg.stmtMsgs, rounds: cfg.rounds, workers: cfg.stmtWorkers}
	base, err := statementsServer(ctx, cfg, res)
	if err != nil {
		return nil, err
	}
	if res.own {
		defer res.cluster.Remove()
	}
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		return nil, err
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"); err != nil {
		return nil, fmt.Errorf("pg_stat_statements: %w", err)
	}
	var planning string
	if err := admin.QueryRow(ctx, "SELECT version(), current_setting('pg_stat_statements.track_planning')").Scan(&res.version, &planning); err != nil {
		return nil, err
	}
	res.planning = planning == "on"

	defs := stmtScenarios()
	for _, n := range res.workers {
		for _, d := range defs {
			res.scenarios = append(res.scenarios, &stmtScenario{name: d.sc.name, what: d.sc.what, workers: n, stmts: map[string]*stmtCost{}})
		}
	}
	for round := range cfg.rounds {
		for wi, n := range res.workers {
			for i := range defs {
				j := (i + round) % len(defs)
				d, into := defs[j], res.scenarios[wi*len(defs)+j]
				logf("statements: round %d, %d worker(s), %s", round+1, n, d.sc.name)
				if err := measureStatements(ctx, cfg, base, admin, d, into, res.own); err != nil {
					return nil, fmt.Errorf("statements: round %d, %d worker(s), %s: %w", round+1, n, d.sc.name, err)
				}
			}
		}
	}
	return res, nil
}

// statementsServer returns the URL of the server the part measures on: the
// target server when it preloads pg_stat_statements (nothing of it is
// reconfigured), else a throwaway cluster started for the part.
func statementsServer(ctx context.Context, cfg *config, res *stmtResults) (string, error) {
	conn, err := pgx.Connect(ctx, cfg.db)
	if err != nil {
		return "", err
	}
	var preload string
	err = conn.QueryRow(ctx, "SELECT current_setting('shared_preload_libraries')").Scan(&preload)
	conn.Close(ctx)
	if err != nil {
		return "", err
	}
	for _, lib := range strings.Split(preload, ",") {
		if strings.TrimSpace(lib) == "pg_stat_statements" {
			res.where = "the target server (`-db`), which preloads pg_stat_statements"
			return cfg.db, nil
		}
	}
	logf("statements: the target server does not preload pg_stat_statements; starting a throwaway cluster")
	c, err := pgcluster.Start("idemgen-bench-statements.", stmtSettings...)
	if err != nil {
		return "", err
	}
	res.cluster, res.own = c, true
	res.where = fmt.Sprintf("a throwaway cluster of the part's own (`%s/initdb`, on a Unix socket of its own; the target server does not preload pg_stat_statements), started with `%s`, the other settings initdb's defaults (fsync and synchronous_commit on)",
		c.Bin, strings.Join(stmtSettings, " "))
	return c.URL("postgres"), nil
}

// measureStatements runs one scenario once in a fresh schema, into.workers
// workers on a pool of as many connections: the warm-up, then cfg.stmtMsgs
// messages between two reads of pg_stat_statements (and of the WAL position
// and the backends' CPU), and adds the difference to into.
func measureStatements(ctx context.Context, cfg *config, base string, admin *pgx.Conn, d stmtScenarioDef, into *stmtScenario, own bool) error {
	url := base
	if d.mode != "" {
		url = withParam(base, "default_query_exec_mode", d.mode)
	}
	s, err := newSchema(ctx, url, cfg.accounts)
	if err != nil {
		return err
	}
	defer s.drop()
	pool, counter, err := s.pool(ctx, into.workers)
	if err != nil {
		return err
	}
	defer pool.Close()
	deliver, err := d.sc.prepare(ctx, pool, cfg.accounts)
	if err != nil {
		return fmt.Errorf("prepare: %w", err)
	}
	ws := make([]*worker, into.workers)
	for i := range ws {
		ws[i] = &worker{id: i, rng: rand.New(rand.NewPCG(uint64(i), uint64(time.Now().UnixNano()))), accounts: cfg.accounts}
	}
	// Every connection of the pool prepares its statements in the warm-up.
	if err := deliverEach(ctx, ws, deliver, max(stmtWarmup, 20*into.workers)); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}

	before, err := readStatements(ctx, admin)
	if err != nil {
		return err
	}
	lsn0, err := walInsertBytes(ctx, admin)
	if err != nil {
		return err
	}
	counter.reset()
	cpu0, cpuOK := counter.serverCPU()
	if err := deliverEach(ctx, ws, deliver, cfg.stmtMsgs); err != nil {
		return err
	}
	cpu1, cpuOK1 := counter.serverCPU()
	trips := counter.load()
	lsn1, err := walInsertBytes(ctx, admin)
	if err != nil {
		return err
	}
	after, err := readStatements(ctx, admin)
	if err != nil {
		return err
	}

	into.msgs += int64(cfg.stmtMsgs)
	into.trips += trips
	if cpuOK && cpuOK1 && into.serverCPU >= 0 {
		into.serverCPU += cpu1 - cpu0
	} else {
		into.serverCPU = -1
	}
	if own && into.wal >= 0 {
		into.wal += lsn1 - lsn0
	} else {
		into.wal = -1
	}
	for text, a := range after {
		if b, ok := before[text]; ok {
			a.sub(b)
		}
		if a.calls <= 0 {
			continue
		}
		if c, ok := into.stmts[text]; ok {
			c.add(a)
		} else {
			into.stmts[text] = a
		}
	}
	return nil
}

// deliverEach delivers n messages in all, shared among the workers, each
// on a goroutine of its own.
func deliverEach(ctx context.Context, ws []*worker, deliver deliverFunc, n int) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for i, w := range ws {
		share := n / len(ws)
		if i < n%len(ws) {
			share++
		}
		wg.Go(func() {
			for range share {
				if err := deliver(ctx, w); err != nil {
					mu.Lock()
					first = keepFirst(first, err)
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	return first
}

// withParam returns url with the query parameter name=value added.
func withParam(url, name, value string) string {
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	return url + sep + name + "=" + value
}

// spaces collapses the white space of a statement's text.
var spaces = regexp.MustCompile(`\s+`)

// schemaName matches the names of the bench's fresh schemas, which a
// statement that names its schema (the simple protocol's) would carry.
var schemaName = regexp.MustCompile(`idembench_[0-9a-f]+`)

// readStatements reads the counters of the top-level statements of this
// database and user, by their text (white space collapsed), leaving out the
// part's own reads. Texts rather than query ids: a statement on a table of
// another round's fresh schema has another id but is the same statement.
func readStatements(ctx context.Context, admin *pgx.Conn) (map[string]*stmtCost, error) {
	rows, err := admin.Query(ctx, `SELECT query, plans, total_plan_time, calls, total_exec_time, rows,
  shared_blks_hit, shared_blks_read, shared_blks_dirtied, shared_blks_written,
  wal_records, wal_fpi, wal_bytes::float8
FROM pg_stat_statements
WHERE toplevel
  AND dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND userid = (SELECT oid FROM pg_roles WHERE rolname = current_user)
  AND query NOT LIKE '%pg_stat_statements%' AND query NOT LIKE '%pg_current_wal%'`)
	if err != nil {
		return nil, fmt.Errorf("read pg_stat_statements: %w", err)
	}
	defer rows.Close()
	out := map[string]*stmtCost{}
	for rows.Next() {
		c := &stmtCost{}
		if err := rows.Scan(&c.query, &c.plans, &c.planMs, &c.calls, &c.execMs, &c.rows,
			&c.hit, &c.read, &c.dirtied, &c.written, &c.walRecords, &c.walFPI, &c.walBytes); err != nil {
			return nil, err
		}
		c.query = schemaName.ReplaceAllString(strings.TrimSpace(spaces.ReplaceAllString(c.query, " ")), "idembench_…")
		if o, ok := out[c.query]; ok {
			o.add(c)
		} else {
			out[c.query] = c
		}
	}
	return out, rows.Err()
}

// walInsertBytes is the server's WAL insert position, in bytes.
func walInsertBytes(ctx context.Context, admin *pgx.Conn) (int64, error) {
	var lsn int64
	err := admin.QueryRow(ctx, "SELECT (pg_current_wal_insert_lsn() - '0/0')::int8").Scan(&lsn)
	return lsn, err
}
