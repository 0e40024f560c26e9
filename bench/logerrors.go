package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/bench/internal/mdtable"
	"github.com/idemgen/idemgen/bench/ledger"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/internal/pgcluster"
)

// The server's log during the deliveries: how many unique violations the
// optimistic protocol makes PostgreSQL log. A delivery's INSERT fails with
// one only when a concurrent copy of its key committed first; a new message
// has no copy, and a duplicate delivered after its first delivery finds the
// row at its lookup and inserts nothing. The shared server's log is not
// readable from a session (log_destination stderr, no collector), so the
// part runs on a throwaway cluster whose log file the bench reads.

// uniqueViolation is the text PostgreSQL logs for a unique violation.
const uniqueViolation = "duplicate key value violates unique constraint"

// Scenario names of the log runs only.
const scCopies = "generated, the same messages from every worker"

// logRun is one run of the log measurement: a scenario at a concurrency,
// and the server's log lines meanwhile.
type logRun struct {
	name    string
	workers int
	msgs    int64
	// violations are the log's unique-violation ERROR lines, errors all
	// its ERROR lines, over the run (its warm-up included).
	violations, errors int
}

// logResults are the log measurement's runs.
type logResults struct {
	where string // the cluster, in a sentence
	runs  []logRun
}

// run returns the run of scenario name at workers, and false when there is
// none.
func (l *logResults) run(name string, workers int) (logRun, bool) {
	if l == nil {
		return logRun{}, false
	}
	for _, r := range l.runs {
		if r.name == name && r.workers == workers {
			return r, true
		}
	}
	return logRun{}, false
}

// copiesScenario delivers the same message from every worker at about the
// same time: worker w's seq-th message has key c-<seq> whatever w. The
// copies race, so some of their INSERTs meet a committed row: the runs
// show what the log counts when copies do race.
func copiesScenario() scenario {
	return scenario{
		name: scCopies,
		what: "every worker delivers the same keys in the same order, so copies of a message run at once",
		prepare: func(ctx context.Context, pool *pgxpool.Pool, accounts int) (deliverFunc, error) {
			gen := ledger.NewPostIdem(pool)
			return func(ctx context.Context, w *worker) error {
				w.seq++
				msg := ledger.Deposit{MessageID: "c-" + strconv.Itoa(w.seq), Account: int64(w.seq%accounts) + 1, Amount: 1}
				_, _, err := gen.Handle(ctx, msg)
				if errors.Is(err, idem.ErrInProgress) {
					// A copy that waited out the claim wait: no error of
					// the protocol's.
					err = nil
				}
				return err
			}, nil
		},
	}
}

// runLogErrors runs, on a throwaway cluster, the generated scenario at the
// highest of cfg.workers, duplicates delivered one at a time, and racing
// copies at the highest concurrency, counting the ERROR lines the server
// logs during each.
func runLogErrors(ctx context.Context, cfg *config) (*logResults, error) {
	c, err := pgcluster.Start("idemgen-bench-log.")
	if err != nil {
		return nil, err
	}
	defer c.Remove()
	url := c.URL("postgres")
	var version string
	if err := queryOne(ctx, url, "SELECT current_setting('server_version')", &version); err != nil {
		return nil, err
	}
	res := &logResults{where: fmt.Sprintf("a throwaway PostgreSQL %s cluster (`%s/initdb`, initdb's defaults, on a Unix socket of its own), whose log file the bench reads", version, c.Bin)}
	local := *cfg
	local.db = url
	byName := map[string]scenario{}
	for _, sc := range goScenarios() {
		byName[sc.name] = sc
	}
	n := 1
	for _, k := range cfg.workers {
		n = max(n, k)
	}
	for _, r := range []struct {
		sc      scenario
		workers int
	}{{byName[scGenerated], n}, {byName[scDuplicate], 1}, {copiesScenario(), n}} {
		logf("db: the server's log, %d worker(s), %s", r.workers, r.sc.name)
		from := len(c.Log())
		smp, err := runGoCell(ctx, &local, r.sc, r.workers)
		if err != nil {
			return nil, fmt.Errorf("the server's log, %s: %w", r.sc.name, err)
		}
		// The server writes its log lines as it answers; let the last
		// reach the file.
		time.Sleep(200 * time.Millisecond)
		run := logRun{name: r.sc.name, workers: r.workers, msgs: smp.msgs}
		run.violations, run.errors = countErrors(c.Log()[from:])
		logf("    %d messages, %d unique-violation ERROR lines, %d ERROR lines", run.msgs, run.violations, run.errors)
		res.runs = append(res.runs, run)
	}
	return res, nil
}

// countErrors counts a log's unique-violation ERROR lines and all its ERROR
// lines.
func countErrors(log string) (violations, errs int) {
	for _, s := range strings.Split(log, "\n") {
		if !strings.Contains(s, "ERROR:") {
			continue
		}
		errs++
		if strings.Contains(s, uniqueViolation) {
			violations++
		}
	}
	return violations, errs
}

// queryOne scans the one value of query on a connection of its own.
func queryOne(ctx context.Context, url, query string, into any) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return conn.QueryRow(ctx, query).Scan(into)
}

// logTarget is "no unique violation in the server's log without concurrent
// copies": none during new messages at the highest concurrency, none for
// duplicates delivered one at a time. The racing copies are reported
// beside them.
func (r *report) logTarget(t *targetTable) {
	n := r.maxWorkers()
	const what = "no unique-violation ERROR logged without concurrent copies"
	fresh, ok1 := r.db.log.run(scGenerated, n)
	dups, ok2 := r.db.log.run(scDuplicate, 1)
	if !ok1 || !ok2 {
		t.add(target{doc: "the-servers-log", what: what, status: notRun, measured: "no log run"})
		return
	}
	l := target{doc: "the-servers-log", what: what, status: verdict(fresh.violations == 0 && dups.violations == 0),
		measured: fmt.Sprintf("%d at %d workers, %d for duplicates in turn", fresh.violations, n, dups.violations)}
	for _, run := range r.db.log.runs {
		l.why.add(fmt.Sprintf("%s, %d %s: unique-violation ERROR lines / all ERROR lines / messages", run.name, run.workers, plural(run.workers, "worker")),
			"%d / %d / %s", run.violations, run.errors, mdtable.Int(int(run.msgs)))
	}
	t.add(l)
}

// writeLog writes the log runs' table.
func (r *report) writeLog(w writer) {
	l := r.db.log
	if l == nil {
		return
	}
	w("### The server's log\n\n")
	w("The shared server's log cannot be read from a session. So three runs went to %s. ", l.where)
	w("Each ran as a cell above, for %s after a %s warm-up. ", r.cfg.duration, r.cfg.warmup)
	w("The table counts the log's ERROR lines over each run, warm-up included. ")
	w("A unique violation (`%s`) comes only from a copy whose INSERT met a committed row. ", uniqueViolation)
	w("The last run makes such copies on purpose: every worker delivers the same keys.\n\n")
	tb := mdtable.New(mdtable.R("workers"), mdtable.L("scenario"), mdtable.R("messages"), mdtable.R("unique violations"), mdtable.R("ERROR lines"))
	for _, run := range l.runs {
		tb.Row(mdtable.Int(run.workers), run.name, mdtable.Int(int(run.msgs)), mdtable.Int(run.violations), mdtable.Int(run.errors))
	}
	w("%s\n", tb)
}
