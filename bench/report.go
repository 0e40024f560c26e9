package main

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/bench/internal/mdtable"
	"github.com/idemgen/idemgen/bench/internal/procstat"
	"github.com/idemgen/idemgen/bench/internal/stats"
)

// report is everything BENCHMARKS.md says.
type report struct {
	cfg               *config
	started, finished time.Time
	machine           [][2]string
	pgSettings        [][2]string
	loadBefore        string
	loadAfter         string
	db                *dbResults
	alloc             *allocResults
	mem               *memResults
	outbox            *outboxResults
	brokers           *brokersResults
	purge             *purgeResults
	net               *netResults
	batch             *batchResults
	sizing            *sizingResults
	gen               *genResults
	entity            *entityResults
	http              *httpResults
	stmts             *stmtResults
}

// describeMachine records what the numbers depend on: the Go toolchain, the
// CPU, PostgreSQL and the settings that decide what a commit costs.
func (r *report) describeMachine(ctx context.Context) error {
	r.loadBefore = procstat.LoadAverage()
	goVersion := runtime.Version()
	if out, err := exec.Command("go", "version").Output(); err == nil {
		goVersion = strings.TrimSpace(string(out))
	}
	commit := "unknown"
	if out, err := exec.Command("git", "-C", r.cfg.root, "rev-parse", "--short", "HEAD").Output(); err == nil {
		commit = strings.TrimSpace(string(out))
		if st, err := exec.Command("git", "-C", r.cfg.root, "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(bytes.TrimSpace(st)) > 0 {
			commit += " (with uncommitted changes)"
		}
	}
	r.machine = [][2]string{
		{"Go", goVersion},
		{"CPU", procstat.CPUModel()},
		{"cores (runtime.NumCPU)", fmt.Sprint(runtime.NumCPU())},
		{"memory", procstat.MemTotal()},
		{"kernel", procstat.ReadTrim("/proc/sys/kernel/osrelease")},
		{"commit", commit},
	}
	if r.cfg.pgbench != "" {
		if out, err := exec.Command(r.cfg.pgbench, "--version").Output(); err == nil {
			r.machine = append(r.machine, [2]string{"pgbench", strings.TrimSpace(string(out))})
		}
	}

	conn, err := pgx.Connect(ctx, r.cfg.db)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", r.cfg.db, err)
	}
	defer conn.Close(ctx)
	var version string
	if err := conn.QueryRow(ctx, "SELECT version()").Scan(&version); err != nil {
		return err
	}
	r.pgSettings = append(r.pgSettings, [2]string{"version", version})
	cc := conn.Config()
	where := fmt.Sprintf("%s:%d", cc.Host, cc.Port)
	if strings.HasPrefix(cc.Host, "/") {
		where = "Unix socket " + cc.Host
	}
	r.pgSettings = append(r.pgSettings, [2]string{"connection", where + " (same machine)"})
	for _, name := range []string{"synchronous_commit", "fsync", "wal_sync_method", "full_page_writes", "commit_delay",
		"shared_buffers", "max_connections", "default_transaction_isolation", "checkpoint_timeout", "max_wal_size"} {
		var v string
		if err := conn.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&v); err != nil {
			return err
		}
		r.pgSettings = append(r.pgSettings, [2]string{name, v})
	}
	return nil
}

func (r *report) markdown() []byte {
	var b bytes.Buffer
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	args := "go run ./bench"
	if len(r.cfg.args) > 0 {
		args += " " + strings.Join(r.cfg.args, " ")
	}
	w("# Benchmarks\n\n")
	w("Written by `%s` on %s (%s); run it again to replace this file. ", args, r.started.UTC().Format("2006-01-02 15:04 MST"), r.finished.Sub(r.started).Round(time.Second))
	w("Every number below comes from that one run on one shared machine, so compare them as ratios: ")
	w("the scenarios ran side by side, interleaved, against the same PostgreSQL. See docs/benchmarks.md for what each part measures.\n\n")

	r.writeTargets(w)
	r.writeMachine(w)
	if r.db != nil {
		r.writeDB(w)
	}
	if r.stmts != nil {
		r.writeStatements(w)
	}
	if r.net != nil {
		r.writeNetwork(w)
	}
	if r.batch != nil {
		r.writeBatch(w)
	}
	if r.outbox != nil {
		r.writeOutbox(w)
	}
	if r.brokers != nil {
		r.writeBrokers(w)
	}
	if r.purge != nil {
		r.writePurge(w)
	}
	if r.entity != nil {
		r.writeEntity(w)
	}
	if r.http != nil {
		r.writeHTTP(w)
	}
	if r.sizing != nil {
		r.writeSizing(w)
	}
	if r.alloc != nil {
		r.writeAlloc(w)
	}
	if r.mem != nil {
		r.writeMem(w)
	}
	if r.gen != nil {
		r.writeGen(w)
	}
	if r.db != nil {
		r.writeRawDB(w)
	}
	return b.Bytes()
}

type writer func(format string, args ...any)

// maxWorkers is the highest concurrency measured, where the targets are read.
func (r *report) maxWorkers() int { return slices.Max(r.cfg.workers) }

func (r *report) rate(name string, workers int) float64 {
	c := r.db.cell(name, workers)
	if c == nil {
		return math.NaN()
	}
	return c.summary().rate
}

func (r *report) writeMachine(w writer) {
	machine := mdtable.New(mdtable.L(""), mdtable.L(""))
	for _, kv := range r.machine {
		machine.Row(kv[0], kv[1])
	}
	machine.Row("load average before / after", r.loadBefore+" / "+r.loadAfter)
	pg := mdtable.New(mdtable.L("setting"), mdtable.L("value"))
	for _, kv := range r.pgSettings {
		pg.Row(kv[0], "`"+kv[1]+"`")
	}
	w("## Machine\n\n%s\nPostgreSQL, shared with other users of the machine (nothing was reconfigured):\n\n%s\n", machine, pg)
}

func (r *report) writeDB(w writer) {
	cfg := r.cfg
	w("## %s\n\n", secDelivery)
	w("One consumer, [`bench/ledger`](bench/ledger/), whose business change is `%s`, on a random one of %d accounts, delivered:\n\n", "UPDATE accounts SET balance = balance + $1 WHERE id = $2", cfg.accounts)
	for _, sc := range r.db.scenarios {
		w("- **%s**: %s;\n", sc.name, sc.what)
	}
	if r.db.pgbench {
		w("- **%s** and **%s**: pgbench (`-M prepared`, one statement per round trip) running the bare UPDATE, and the hand-written inbox's transaction (BEGIN; claim; UPDATE; store the result; COMMIT), as a reference for what a C client gets from the same SQL;\n", scPgBare, scPgInbox)
		w("- **%s**, **%s** and **%s**: the protocols' round trips from pgbench, each round trip's statements in one pipeline (`\\startpipeline` … `\\endpipeline`: one Sync, then the answers). "+
			"Claim-first: BEGIN and the claim; the UPDATE; the result and COMMIT (3 round trips, the inbox row written twice). "+
			"Read, then insert: BEGIN, the key's read and the UPDATE; the row with its result and COMMIT (2 round trips, one write). "+
			"Insert, no read: the same without the read.\n", scPgClaimFirst, scPgOptimistic, scPgNoRead)
	}
	w("\nEach cell (scenario × workers) ran %d time(s) for %s after a %s warm-up, each time in a fresh schema (migrations applied with goose, accounts created, `VACUUM ANALYZE`), with a pool of as many connections as workers. ", cfg.rounds, cfg.duration, cfg.warmup)
	w("The rounds interleave: within a round each concurrency runs every scenario in an order that rotates from round to round. ")
	w("The table pools the rounds (messages over time; latency percentiles over every message). ")
	w("**Round trips** are counted on the wire, below pgx: the pool's `DialFunc` wraps each connection, and every read that returns data after a write is one round trip (pgbench's are by construction, one per statement). ")
	w("**CPU/msg**: the CPU time of the client (this process, or pgbench) and of the PostgreSQL backends serving its connections (read from `/proc`; not known for pgbench), per message; **busy**: how busy the whole machine was, the other users included.\n\n")

	t := cellTable(workersScenario, "p50", "p99", "vs bare", "vs hand-written")
	for _, n := range cfg.workers {
		bare, hand := r.rate(scBare, n), r.rate(scHand, n)
		for _, name := range r.db.names() {
			s := r.db.cell(name, n).summary()
			cells := s.cells(2)
			if strings.HasPrefix(name, "pgbench") {
				cells[tripsColumn] += "\\*"
			}
			t.Row(slices.Concat([]string{mdtable.Int(n), name}, cells, []string{mdtable.Ratio(s.rate / bare), mdtable.Ratio(s.rate / hand)})...)
		}
	}
	w("%s\n\\* by construction, not counted.\n\n", t)

	w("### Ratios, per concurrency\n\n")
	w("The pooled ratio, and in brackets the lowest and highest of the per-round ratios (the two cells of a pair ran minutes apart at most).\n\n")
	cols := []mdtable.Column{mdtable.R("workers"), mdtable.R("generated / bare"), mdtable.R("generated / hand-written"), mdtable.R("hand-written / bare"),
		mdtable.R("duplicate / generated (msgs/s)"), mdtable.R("generated p50 / duplicate p50"), mdtable.R("generated / pessimistic")}
	if r.db.pgbench {
		cols = append(cols, mdtable.R("pgbench inbox / pgbench bare"), mdtable.R("generated / pgbench inbox"), mdtable.R("pgbench read, then insert / claim-first"))
	}
	ratios := mdtable.New(cols...)
	for _, n := range cfg.workers {
		g := r.db.cell(scGenerated, n).summary()
		d := r.db.cell(scDuplicate, n).summary()
		row := []string{mdtable.Int(n), r.pairRatio(scGenerated, scBare, n), r.pairRatio(scGenerated, scHand, n), r.pairRatio(scHand, scBare, n),
			r.pairRatio(scDuplicate, scGenerated, n), mdtable.Ratio(float64(g.p50) / float64(d.p50)), r.pairRatio(scGenerated, scPessimistic, n)}
		if r.db.pgbench {
			row = append(row, r.pairRatio(scPgInbox, scPgBare, n), r.pairRatio(scGenerated, scPgInbox, n), r.pairRatio(scPgOptimistic, scPgClaimFirst, n))
		}
		ratios.Row(row...)
	}
	w("%s\n", ratios)
	r.writePaired(w)
	r.writeLog(w)
	r.writeBounds(w)
	r.writeBehind(w, secDelivery)
}

func (r *report) pairedP50(name string) time.Duration {
	return stats.Percentile(slices.Sorted(slices.Values(r.db.paired[name])), 50)
}

// writePaired reports the latencies of the scenarios delivered in turn.
func (r *report) writePaired(w writer) {
	w("### Latency, message by message\n\n")
	w("Cells minutes apart see different neighbours on a shared machine. Here every round also delivered one message of each Go scenario in turn (the order rotating), on one connection, for %s after a %s warm-up: ", r.cfg.duration, r.cfg.warmup)
	w("the latencies below differ by what each scenario does, not by when it ran.\n\n")
	t := mdtable.New(mdtable.L("scenario"), mdtable.R("messages"), mdtable.R("p50"), mdtable.R("p90"), mdtable.R("p99"), mdtable.R("p50 vs generated"))
	gen := slices.Sorted(slices.Values(r.db.paired[scGenerated]))
	for _, sc := range r.db.scenarios {
		lat := slices.Sorted(slices.Values(r.db.paired[sc.name]))
		t.Row(sc.name, mdtable.Int(len(lat)), mdtable.Dur(stats.Percentile(lat, 50)), mdtable.Dur(stats.Percentile(lat, 90)), mdtable.Dur(stats.Percentile(lat, 99)),
			mdtable.Ratio(float64(stats.Percentile(lat, 50))/float64(stats.Percentile(gen, 50))))
	}
	w("%s\n", t)
}

// pairRatio is the pooled ratio of two scenarios' rates with the range of the
// per-round ratios.
func (r *report) pairRatio(a, b string, n int) string {
	return cellRatio(r.db.cell(a, n), r.db.cell(b, n))
}

// cellRatio is the pooled ratio of two cells' rates with the range of the
// per-round ratios.
func cellRatio(ca, cb *cell) string {
	pooled := ca.summary().rate / cb.summary().rate
	if len(ca.samples) < 2 {
		return mdtable.Ratio(pooled)
	}
	lo, hi := stats.RatioRange(ca.rates(), cb.rates())
	if hi < 0.1 {
		return fmt.Sprintf("%s [%.3f–%.3f]", mdtable.Ratio(pooled), lo, hi)
	}
	return fmt.Sprintf("%s [%.2f–%.2f]", mdtable.Ratio(pooled), lo, hi)
}

// rates are the cell's rates, round by round.
func (c *cell) rates() []float64 {
	rates := make([]float64, len(c.samples))
	for i, s := range c.samples {
		rates[i] = s.rate()
	}
	return rates
}

// writeBounds explains, from the measurements, what bounds each ratio.
func (r *report) writeBounds(w writer) {
	n := r.maxWorkers()
	s := func(name string, workers int) summary { return r.db.cell(name, workers).summary() }
	gen, hand, bare, dup, pess := s(scGenerated, n), s(scHand, n), s(scBare, n), s(scDuplicate, n), s(scPessimistic, n)
	one := slices.Min(r.cfg.workers)
	g1, h1, b1, d1 := r.pairedP50(scGenerated), r.pairedP50(scHand), r.pairedP50(scBare), r.pairedP50(scDuplicate)

	w("### What bounds the ratios\n\n")
	w("**Round trips.** The wire counts match the protocol: bare %.2f per message (the UPDATE; its implicit transaction commits with it), "+
		"hand-written %.2f (BEGIN, claim, UPDATE, store, COMMIT), generated %.2f (BEGIN, the key's lookup and the handler's UPDATE in one pipelined batch; the row with its result and COMMIT in one more), "+
		"pessimistic %.2f (BEGIN + claim in one batch, the UPDATE, result + COMMIT in one batch), "+
		"duplicate %.2f (the lookup batch finds the row, then ROLLBACK). ",
		bare.tripsPerMsg, hand.tripsPerMsg, gen.tripsPerMsg, pess.tripsPerMsg, dup.tripsPerMsg)
	w("Delivered message by message, where a message waits for nothing but its own round trips and its commit's WAL flush, the median latencies are %s (bare), %s (hand-written), %s (generated) and %s (duplicate): "+
		"generated is %s faster than hand-written (two round trips fewer, the same commit), and a round trip costs about %s here ((hand-written − generated) ÷ 2).\n\n",
		mdtable.Dur(b1), mdtable.Dur(h1), mdtable.Dur(g1), mdtable.Dur(d1), mdtable.Ratio(float64(h1)/float64(g1)), mdtable.Dur((h1-g1)/2))

	cpu := func(s summary) time.Duration { return s.clientCPU + max(s.serverCPU, 0) }
	w("**CPU at %d workers.** The machine was %.0f%% busy during the generated cell (bare %.0f%%, hand-written %.0f%%), the other users of the machine included. ", n, 100*gen.busy, 100*bare.busy, 100*hand.busy)
	w("Per message, client and server together spent %s for bare, %s for hand-written and %s for generated (server %s, %s and %s; Go client %s, %s and %s). ",
		mdtable.Dur(cpu(bare)), mdtable.Dur(cpu(hand)), mdtable.Dur(cpu(gen)), serverDur(bare), serverDur(hand), serverDur(gen), mdtable.Dur(bare.clientCPU), mdtable.Dur(hand.clientCPU), mdtable.Dur(gen.clientCPU))
	w("When the cores are saturated, throughput is the CPU available ÷ the CPU per message, so the CPU ratios bound the throughput ratios: bare/generated CPU = %s (measured generated/bare throughput %s), hand-written/generated CPU = %s (measured generated/hand-written throughput %s). ",
		mdtable.Ratio(float64(cpu(bare))/float64(cpu(gen))), mdtable.Ratio(gen.rate/bare.rate), mdtable.Ratio(float64(cpu(hand))/float64(cpu(gen))), mdtable.Ratio(gen.rate/hand.rate))
	w("Fewer round trips save latency and the per-round-trip work of client and server (a read, a write, a wake-up on each side), but not the work of the statements themselves: generated executes five statements per message on the server (BEGIN; the key's lookup, which also marks the transaction; the UPDATE; the INSERT of the row with its result, which bounds its lock wait; COMMIT), like hand-written, which writes its row twice; bare one. ")
	if r.db.pgbench {
		pb, pi := s(scPgBare, n), s(scPgInbox, n)
		w("The client is not what sets this ceiling: pgbench, sending the hand-written inbox's SQL from C, reaches %s of its own bare UPDATE at %d workers, and the generated wrapper %s of pgbench's inbox.", mdtable.Ratio(pi.rate/pb.rate), n, mdtable.Ratio(gen.rate/pi.rate))
	}
	w("\n\n")

	w("**Duplicates.** A duplicate learns that it is one from the lookup that rides with BEGIN, then rolls back: %.2f round trips; the handler stops at its first statement, which the rollback undoes, and there is no WAL flush to wait for. "+
		"It is %s faster at %d worker and %s message by message (median latency), with %s the messages per second at %d workers. "+
		"At %d workers the cores bound it: a duplicate costs %s of CPU (server %s, client %s) against %s for a first delivery, a ratio of %s.\n\n",
		dup.tripsPerMsg, mdtable.Ratio(float64(s(scGenerated, one).p50)/float64(s(scDuplicate, one).p50)), one, mdtable.Ratio(float64(g1)/float64(d1)), mdtable.Ratio(dup.rate/gen.rate), n,
		n, mdtable.Dur(cpu(dup)), serverDur(dup), mdtable.Dur(dup.clientCPU), mdtable.Dur(cpu(gen)), mdtable.Ratio(float64(cpu(gen))/float64(cpu(dup))))
}

func (r *report) writeAlloc(w writer) {
	a := r.alloc
	w("## %s\n\n", secAlloc)
	w("`%s`: one delivery at a time against the same database, with `-benchmem`. Bare and hand-written are the same code as in the table above.\n\n", a.command)
	benches := mdtable.New(mdtable.L("benchmark"), mdtable.R("ns/op"), mdtable.R("B/op"), mdtable.R("allocs/op"))
	for _, bl := range a.benches {
		benches.Row(bl.name, mdtable.Thousands(bl.nsPerOp), mdtable.Thousands(bl.bPerOp), fmt.Sprintf("%.0f", bl.aPO))
	}
	w("%s", benches)
	w("\nWhere the allocations of a first delivery through the generated wrapper come from, outside the handler (the handler's own UPDATE allocates the same as bare): ")
	w("a profile of %d deliveries with `-memprofilerate 1`, each allocation attributed to the nearest function outside the standard library (`go tool pprof -hide` of the standard library):\n\n", a.profiled)
	sources := mdtable.New(mdtable.L("source"), mdtable.R("allocs per message"))
	total := 0.0
	for _, g := range a.bySource {
		sources.Row(g.name, fmt.Sprintf("%.1f", g.allocs))
		total += g.allocs
	}
	sources.Row("**total**", fmt.Sprintf("**%.1f**", total))
	funcs := mdtable.New(mdtable.L("function"), mdtable.R("allocs per message"))
	for _, f := range a.top {
		if f.allocs >= 0.5 {
			funcs.Row("`"+f.name+"`", fmt.Sprintf("%.1f", f.allocs))
		}
	}
	w("%s\nBy function (those making at least 0.5 allocations per message):\n\n%s", sources, funcs)
	w("\npgx's pipeline (`SendBatch`, which the wrapper uses to send BEGIN with the lookup and the handler's first statement, and the row with COMMIT, a round trip each) allocates per queued statement; one statement per round trip through `Exec` allocates less but costs a round trip each (see hand-written).\n\n")
	r.writeBehind(w, secAlloc)
}

func (r *report) writeMem(w writer) {
	m := r.mem
	slope, mean, overRun := m.growth()
	w("## %s\n\n", secMem)
	w("The generated scenario at %d workers for %s (%s messages, %s msgs/s), sampling the Go runtime's live heap (`/gc/heap/live:bytes`: what the last GC kept) and the goroutines. ",
		m.workers, m.elapsed.Round(time.Second), mdtable.Thousands(float64(m.msgs)), mdtable.Thousands(float64(m.msgs)/m.elapsed.Seconds()))
	w("A least-squares fit over the last two thirds of the samples (the first third fills the pool and pgx's statement caches) gives a trend of %+.0f bytes/min on a mean live heap of %s: %+.1f%% over that part of the run. ", slope, mdtable.IEC(mean), 100*overRun)
	w("The target counts as met when that is within ±5%% and the goroutines do not grow.\n\n")
	t := mdtable.New(mdtable.R("time"), mdtable.R("messages"), mdtable.R("live heap"), mdtable.R("goroutines"), mdtable.R("GC cycles"))
	for _, s := range m.samples {
		t.Row(s.at.Round(time.Second).String(), mdtable.Thousands(float64(s.msgs)), mdtable.IEC(float64(s.live)), fmt.Sprint(s.goroutines), fmt.Sprint(s.gcs))
	}
	w("%s\n", t)
	r.writeBehind(w, secMem)
}

// fit is t = a + b·handlers by least squares over the synthetic packages'
// medians (seconds, seconds per handler).
func (g *genResults) fit(pick func(timing) time.Duration, of func(genPackage) []timing) stats.Line {
	var points [][2]float64
	for _, p := range g.packages {
		if strings.HasPrefix(p.name, "syn") {
			points = append(points, [2]float64{float64(p.handlers), medianTiming(of(p), pick).Seconds()})
		}
	}
	return stats.Fit(points)
}

func (r *report) writeGen(w writer) {
	g := r.gen
	w("## %s\n\n", secGen)
	w("`idemgen -migrations migrations .` (built once with `go build`) against `go vet .` in the same package directory, both in a temporary module that requires this repository through a `replace` directive, ")
	w("with the build cache warm for the dependencies and the package's generated output current (as in a re-run of `go generate`). ")
	w("Before every timed run a file of the package changes, so that neither go vet's result cache nor the build cache answers for the package itself. ")
	w("%d repetitions of each, alternating which runs first; medians. Wall time is what a user waits; CPU time (user + system, with child processes) is less disturbed by the other users of the machine. ", g.reps)
	w("**go list** is the part of idemgen's wall time spent waiting for the go command, which go/packages runs twice: to list the package, then to get its imports' export data (as go vet, idemgen type-checks the package itself from source).\n\n")
	t := mdtable.New(mdtable.L("package"), mdtable.R("handlers"), mdtable.R("idemgen wall"), mdtable.R("go vet wall"), mdtable.R("ratio"),
		mdtable.R("idemgen CPU"), mdtable.R("go vet CPU"), mdtable.R("ratio"), mdtable.R("go list in idemgen"))
	for _, p := range g.packages {
		iw, vw := medianTiming(p.idemgen, wallOf), medianTiming(p.vet, wallOf)
		ic, vc := medianTiming(p.idemgen, cpuOf), medianTiming(p.vet, cpuOf)
		gl := stats.Median(p.golist)
		t.Row(p.name, mdtable.Int(p.handlers), mdtable.Dur(iw), mdtable.Dur(vw), mdtable.Ratio(float64(iw)/float64(vw)),
			mdtable.Dur(ic), mdtable.Dur(vc), mdtable.Ratio(float64(ic)/float64(vc)), fmt.Sprintf("%s (%.0f%%)", mdtable.Dur(gl), 100*float64(gl)/float64(iw)))
	}
	w("%s", t)
	idemgen := func(p genPackage) []timing { return p.idemgen }
	vet := func(p genPackage) []timing { return p.vet }
	w("\nGrowth with the number of handlers, least squares over the synthetic packages' medians; the slope ratio compares the upper half of the sizes with the lower half (1 for a straight line, more when the time grows faster than the handlers; the target counts as met up to %.1f):\n\n", maxCurvature)
	growth := mdtable.New(mdtable.L(""), mdtable.L("CPU time"), mdtable.L("wall time"))
	growth.Row("idemgen", describeFit(g.fit(cpuOf, idemgen)), describeFit(g.fit(wallOf, idemgen)))
	growth.Row("go vet", describeFit(g.fit(cpuOf, vet)), describeFit(g.fit(wallOf, vet)))
	every := mdtable.New(mdtable.L("package"), mdtable.L("tool"), mdtable.L("runs"))
	for _, p := range g.packages {
		for _, t := range []struct {
			name string
			ts   []timing
		}{{"idemgen", p.idemgen}, {"go vet", p.vet}} {
			var parts []string
			for _, x := range t.ts {
				parts = append(parts, mdtable.Dur(x.wall)+" / "+mdtable.Dur(x.cpu))
			}
			every.Row(p.name, t.name, strings.Join(parts, ", "))
		}
	}
	w("%s\n<details><summary>Every timing (wall / CPU)</summary>\n\n%s\n</details>\n\n", growth, every)
	r.writeBehind(w, secGen)
}

func (r *report) writeRawDB(w writer) {
	w("## Raw numbers\n\n")
	w("Messages per second of every cell in every round, with the messages and the measured time, round trips/msg and machine busy fraction.\n\n")
	cols := []mdtable.Column{mdtable.R("workers"), mdtable.L("scenario")}
	for i := range r.cfg.rounds {
		cols = append(cols, mdtable.L(fmt.Sprintf("round %d", i+1)))
	}
	t := mdtable.New(cols...)
	for _, n := range r.cfg.workers {
		for _, name := range r.db.names() {
			row := make([]string, len(cols)) // the rounds a cell did not run stay empty
			row[0], row[1] = mdtable.Int(n), name
			for i, s := range r.db.cell(name, n).samples {
				row[2+i] = fmt.Sprintf("%s (%d in %s, %.2f rt, %.0f%%)", mdtable.Thousands(s.rate()), s.msgs, s.elapsed.Round(time.Millisecond), float64(s.trips)/float64(max(s.msgs, 1)), 100*s.busy)
			}
			t.Row(row...)
		}
	}
	w("%s\nOrder the cells ran in:\n\n", t)
	for i, o := range r.db.order {
		w("%d. %s\n", i+1, strings.Join(o, "; "))
	}
	w("\n")
}

// workersScenario are the columns that name a cell in most tables.
var workersScenario = []mdtable.Column{mdtable.R("workers"), mdtable.L("scenario")}

// cellTable starts the table most parts write, a row per cell: the columns
// that name the cell (naming), its summary (cellColumns, the latency
// columns headed p50 and p99), then one column per ratio.
func cellTable(naming []mdtable.Column, p50, p99 string, ratios ...string) *mdtable.Table {
	cols := slices.Concat(naming, []mdtable.Column{mdtable.R("msgs/s"), mdtable.R(p50), mdtable.R(p99), mdtable.R("round trips/msg"),
		mdtable.R("client CPU/msg"), mdtable.R("server CPU/msg"), mdtable.R("busy")})
	for _, q := range ratios {
		cols = append(cols, mdtable.R(q))
	}
	return mdtable.New(cols...)
}

// tripsColumn is the index of the round trips in summary.cells.
const tripsColumn = 3

// cells are the summary's cells of a cellTable: rate, p50, p99, round trips
// (to digits decimals), client and server CPU per message, busy.
func (s summary) cells(digits int) []string {
	return []string{mdtable.Thousands(s.rate), mdtable.Dur(s.p50), mdtable.Dur(s.p99), strconv.FormatFloat(s.tripsPerMsg, 'f', digits, 64),
		mdtable.Dur(s.clientCPU), serverDur(s), mdtable.Percent(s.busy)}
}

// serverDur is the server CPU per message, when it is known.
func serverDur(s summary) string {
	if s.serverCPU < 0 {
		return "–"
	}
	return mdtable.Dur(s.serverCPU)
}
