package main

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
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
	stmts             *stmtResults
}

// describeMachine records what the numbers depend on: the Go toolchain, the
// CPU, PostgreSQL and the settings that decide what a commit costs.
func (r *report) describeMachine(ctx context.Context) error {
	r.loadBefore = loadAverage()
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
		{"CPU", cpuModel()},
		{"cores (runtime.NumCPU)", fmt.Sprint(runtime.NumCPU())},
		{"memory", memTotal()},
		{"kernel", readTrim("/proc/sys/kernel/osrelease")},
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

func cpuModel() string {
	data, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	for _, line := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v) + " (" + runtime.GOARCH + ")"
		}
	}
	return runtime.GOARCH
}

func memTotal() string {
	for _, line := range strings.Split(readTrim("/proc/meminfo"), "\n") {
		var kb int64
		if _, err := fmt.Sscanf(line, "MemTotal: %d kB", &kb); err == nil {
			return fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
		}
	}
	return "unknown"
}

func loadAverage() string {
	f := strings.Fields(readTrim("/proc/loadavg"))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

func readTrim(path string) string {
	data, _ := os.ReadFile(path)
	return strings.TrimSpace(string(data))
}

// The targets of the issue.
const (
	// The single-message wrapper at the highest concurrency, against the
	// hand-written inbox and the bare UPDATE (issue 24: a claim that costs
	// what it must).
	targetVsHand    = 1.3
	targetVsBare    = 0.5
	targetDupTrips  = 1.0
	targetDupFaster = 3.0
	targetVsVet     = 1.5
	// maxCurvature bounds how much steeper the upper half of the growth
	// may be than the lower half for it to count as linear.
	maxCurvature = 1.5
)

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

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "**missed**"
}

func (r *report) writeTargets(w writer) {
	w("## Targets\n\n")
	w("| target | measured | |\n| --- | --- | --- |\n")
	if r.db != nil {
		n := r.maxWorkers()
		gen, hand, bare, dup := r.db.cell(scGenerated, n).summary(), r.db.cell(scHand, n).summary(), r.db.cell(scBare, n).summary(), r.db.cell(scDuplicate, n).summary()
		bound := func(q, target float64, other string, o summary) string {
			if q >= target {
				return ""
			}
			return "; " + cellBound(scGenerated, gen, runtime.NumCPU()) + "; " + cellBound(other, o, runtime.NumCPU())
		}
		w("| generated ≥ %.1f× hand-written at %d workers | %s (per round in brackets); median latency message by message %s%s | %s |\n",
			targetVsHand, n, r.pairRatio(scGenerated, scHand, n), ratio(float64(r.pairedP50(scHand))/float64(r.pairedP50(scGenerated))),
			bound(gen.rate/hand.rate, targetVsHand, scHand, hand), verdict(gen.rate/hand.rate >= targetVsHand))
		w("| generated ≥ %.1f× bare at %d workers | %s%s | %s |\n", targetVsBare, n, r.pairRatio(scGenerated, scBare, n),
			bound(gen.rate/bare.rate, targetVsBare, scBare, bare), verdict(gen.rate/bare.rate >= targetVsBare))
		w("| a duplicate costs ≤ %.0f round trip | %.2f round trips | %s |\n", targetDupTrips, dup.tripsPerMsg, verdict(dup.tripsPerMsg <= targetDupTrips+0.005))
		one := slices.Min(r.cfg.workers)
		lat := float64(r.db.cell(scGenerated, one).summary().p50) / float64(r.db.cell(scDuplicate, one).summary().p50)
		paired := float64(r.pairedP50(scGenerated)) / float64(r.pairedP50(scDuplicate))
		thr := dup.rate / gen.rate
		w("| a duplicate ≥ %.0f× faster than a first delivery | median latency at %d worker %s (%s when the scenarios alternate message by message); throughput at %d workers %s | %s |\n",
			targetDupFaster, one, ratio(lat), ratio(paired), n, ratio(thr), verdict(lat >= targetDupFaster && thr >= targetDupFaster))
	}
	if r.stmts != nil {
		r.statementsTargets(w)
	}
	if r.net != nil {
		r.netTargets(w)
	}
	if r.batch != nil {
		r.batchTargets(w)
	}
	if r.outbox != nil {
		r.outboxTargets(w)
	}
	if r.brokers != nil {
		r.brokersTargets(w)
	}
	if r.purge != nil {
		r.purgeTargets(w)
	}
	if r.sizing != nil {
		r.sizingTargets(w)
	}
	if r.gen != nil {
		worst, worstName := 0.0, ""
		for _, p := range r.gen.packages {
			q := float64(medianTiming(p.idemgen, wallOf)) / float64(medianTiming(p.vet, wallOf))
			if q > worst {
				worst, worstName = q, p.name
			}
		}
		w("| idemgen ≤ %.1f× go vet on the same package | at most %s (%s) | %s |\n", targetVsVet, ratio(worst), worstName, verdict(worst <= targetVsVet))
		fit := r.gen.fit(cpuOf, func(p genPackage) []timing { return p.idemgen })
		w("| idemgen linear in the number of handlers | CPU time %s | %s |\n", fit.describe(), verdict(fit.b > 0 && fit.curvature() <= maxCurvature))
	}
	if r.alloc != nil {
		for _, bl := range r.alloc.benches {
			if bl.name == "Generated" {
				w("| the wrapper's allocations per message reported | %.0f allocs, %.0f B per first delivery ([below](#allocations)) | reported |\n", bl.aPO, bl.bPerOp)
			}
		}
	}
	if r.mem != nil {
		_, mean, overRun := r.mem.growth()
		first, last := r.mem.samples[0], r.mem.samples[len(r.mem.samples)-1]
		w("| no growth in memory over a long run | live heap %s on average, trend %+.1f%% over the last two thirds of %s; goroutines %d → %d | %s |\n",
			bytesIEC(mean), 100*overRun, r.mem.elapsed.Round(time.Second), first.goroutines, last.goroutines,
			verdict(math.Abs(overRun) < 0.05 && last.goroutines <= first.goroutines))
	}
	if r.entity != nil {
		r.entityTargets(w)
	}
	w("\n")
}

func (r *report) writeMachine(w writer) {
	w("## Machine\n\n| | |\n| --- | --- |\n")
	for _, kv := range r.machine {
		w("| %s | %s |\n", kv[0], kv[1])
	}
	w("| load average before / after | %s / %s |\n", r.loadBefore, r.loadAfter)
	w("\nPostgreSQL, shared with other users of the machine (nothing was reconfigured):\n\n| setting | value |\n| --- | --- |\n")
	for _, kv := range r.pgSettings {
		w("| %s | `%s` |\n", kv[0], kv[1])
	}
	w("\n")
}

func (r *report) writeDB(w writer) {
	cfg := r.cfg
	w("## Message delivery\n\n")
	w("One consumer, [`bench/ledger`](bench/ledger/), whose business change is `%s`, on a random one of %d accounts, delivered:\n\n", "UPDATE accounts SET balance = balance + $1 WHERE id = $2", cfg.accounts)
	for _, sc := range r.db.scenarios {
		w("- **%s**: %s;\n", sc.name, sc.what)
	}
	if r.db.pgbench {
		w("- **%s** and **%s**: pgbench (`-M prepared`, one statement per round trip) running the bare UPDATE, and the hand-written inbox's transaction (BEGIN; claim; UPDATE; store the result; COMMIT), as a reference for what a C client gets from the same SQL.\n", scPgBare, scPgInbox)
	}
	w("\nEach cell (scenario × workers) ran %d time(s) for %s after a %s warm-up, each time in a fresh schema (migrations applied with goose, accounts created, `VACUUM ANALYZE`), with a pool of as many connections as workers. ", cfg.rounds, cfg.duration, cfg.warmup)
	w("The rounds interleave: within a round each concurrency runs every scenario in an order that rotates from round to round. ")
	w("The table pools the rounds (messages over time; latency percentiles over every message). ")
	w("**Round trips** are counted on the wire, below pgx: the pool's `DialFunc` wraps each connection, and every read that returns data after a write is one round trip (pgbench's are by construction, one per statement). ")
	w("**CPU/msg**: the CPU time of the client (this process, or pgbench) and of the PostgreSQL backends serving its connections (read from `/proc`; not known for pgbench), per message; **busy**: how busy the whole machine was, the other users included.\n\n")

	w("| workers | scenario | msgs/s | p50 | p99 | round trips/msg | client CPU/msg | server CPU/msg | busy | vs bare | vs hand-written |\n")
	w("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, n := range cfg.workers {
		bare, hand := r.rate(scBare, n), r.rate(scHand, n)
		for _, name := range r.db.names() {
			s := r.db.cell(name, n).summary()
			trips := fmt.Sprintf("%.2f", s.tripsPerMsg)
			if strings.HasPrefix(name, "pgbench") {
				trips += "\\*"
			}
			server := serverDur(s)
			w("| %d | %s | %s | %s | %s | %s | %s | %s | %.0f%% | %s | %s |\n", n, name, thousands(s.rate), dur(s.p50), dur(s.p99), trips,
				dur(s.clientCPU), server, 100*s.busy, ratio(s.rate/bare), ratio(s.rate/hand))
		}
	}
	w("\n\\* by construction, not counted.\n\n")

	w("### Ratios, per concurrency\n\n")
	w("The pooled ratio, and in brackets the lowest and highest of the per-round ratios (the two cells of a pair ran minutes apart at most).\n\n")
	w("| workers | generated / bare | generated / hand-written | hand-written / bare | duplicate / generated (msgs/s) | generated p50 / duplicate p50 |")
	if r.db.pgbench {
		w(" pgbench inbox / pgbench bare | generated / pgbench inbox |")
	}
	w("\n| ---: | ---: | ---: | ---: | ---: | ---: |")
	if r.db.pgbench {
		w(" ---: | ---: |")
	}
	w("\n")
	for _, n := range cfg.workers {
		g := r.db.cell(scGenerated, n).summary()
		d := r.db.cell(scDuplicate, n).summary()
		w("| %d | %s | %s | %s | %s | %s |", n,
			r.pairRatio(scGenerated, scBare, n), r.pairRatio(scGenerated, scHand, n), r.pairRatio(scHand, scBare, n),
			r.pairRatio(scDuplicate, scGenerated, n), ratio(float64(g.p50)/float64(d.p50)))
		if r.db.pgbench {
			w(" %s | %s |", r.pairRatio(scPgInbox, scPgBare, n), r.pairRatio(scGenerated, scPgInbox, n))
		}
		w("\n")
	}
	w("\n")
	r.writePaired(w)
	r.writeBounds(w)
}

func (r *report) pairedP50(name string) time.Duration {
	return percentile(slices.Sorted(slices.Values(r.db.paired[name])), 50)
}

// writePaired reports the latencies of the scenarios delivered in turn.
func (r *report) writePaired(w writer) {
	w("### Latency, message by message\n\n")
	w("Cells minutes apart see different neighbours on a shared machine. Here every round also delivered one message of each Go scenario in turn (the order rotating), on one connection, for %s after a %s warm-up: ", r.cfg.duration, r.cfg.warmup)
	w("the latencies below differ by what each scenario does, not by when it ran.\n\n")
	w("| scenario | messages | p50 | p90 | p99 | p50 vs generated |\n| --- | ---: | ---: | ---: | ---: | ---: |\n")
	gen := slices.Sorted(slices.Values(r.db.paired[scGenerated]))
	for _, sc := range r.db.scenarios {
		lat := slices.Sorted(slices.Values(r.db.paired[sc.name]))
		w("| %s | %s | %s | %s | %s | %s |\n", sc.name, thousands(float64(len(lat))), dur(percentile(lat, 50)), dur(percentile(lat, 90)), dur(percentile(lat, 99)),
			ratio(float64(percentile(lat, 50))/float64(percentile(gen, 50))))
	}
	w("\n")
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
		return ratio(pooled)
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	for i := range min(len(ca.samples), len(cb.samples)) {
		q := ca.samples[i].rate() / cb.samples[i].rate()
		lo, hi = math.Min(lo, q), math.Max(hi, q)
	}
	if hi < 0.1 {
		return fmt.Sprintf("%s [%.3f–%.3f]", ratio(pooled), lo, hi)
	}
	return fmt.Sprintf("%s [%.2f–%.2f]", ratio(pooled), lo, hi)
}

// writeBounds explains, from the measurements, what bounds each ratio.
func (r *report) writeBounds(w writer) {
	n := r.maxWorkers()
	s := func(name string, workers int) summary { return r.db.cell(name, workers).summary() }
	gen, hand, bare, dup := s(scGenerated, n), s(scHand, n), s(scBare, n), s(scDuplicate, n)
	one := slices.Min(r.cfg.workers)
	g1, h1, b1, d1 := r.pairedP50(scGenerated), r.pairedP50(scHand), r.pairedP50(scBare), r.pairedP50(scDuplicate)

	w("### What bounds the ratios\n\n")
	w("**Round trips.** The wire counts match the protocol: bare %.2f per message (the UPDATE; its implicit transaction commits with it), "+
		"hand-written %.2f (BEGIN, claim, UPDATE, store, COMMIT), generated %.2f (BEGIN + claim in one pipelined batch, the handler's UPDATE, result + COMMIT in one batch), "+
		"duplicate %.2f (the claim batch, then ROLLBACK + the read of the stored row in one batch). ",
		bare.tripsPerMsg, hand.tripsPerMsg, gen.tripsPerMsg, dup.tripsPerMsg)
	w("Delivered message by message, where a message waits for nothing but its own round trips and its commit's WAL flush, the median latencies are %s (bare), %s (hand-written), %s (generated) and %s (duplicate): "+
		"generated is %s faster than hand-written (two round trips fewer, the same commit), and a round trip costs about %s here ((hand-written − generated) ÷ 2).\n\n",
		dur(b1), dur(h1), dur(g1), dur(d1), ratio(float64(h1)/float64(g1)), dur((h1-g1)/2))

	cpu := func(s summary) time.Duration { return s.clientCPU + max(s.serverCPU, 0) }
	w("**CPU at %d workers.** The machine was %.0f%% busy during the generated cell (bare %.0f%%, hand-written %.0f%%), the other users of the machine included. ", n, 100*gen.busy, 100*bare.busy, 100*hand.busy)
	w("Per message, client and server together spent %s for bare, %s for hand-written and %s for generated (server %s, %s and %s; Go client %s, %s and %s). ",
		dur(cpu(bare)), dur(cpu(hand)), dur(cpu(gen)), serverDur(bare), serverDur(hand), serverDur(gen), dur(bare.clientCPU), dur(hand.clientCPU), dur(gen.clientCPU))
	w("When the cores are saturated, throughput is the CPU available ÷ the CPU per message, so the CPU ratios bound the throughput ratios: bare/generated CPU = %s (measured generated/bare throughput %s), hand-written/generated CPU = %s (measured generated/hand-written throughput %s). ",
		ratio(float64(cpu(bare))/float64(cpu(gen))), ratio(gen.rate/bare.rate), ratio(float64(cpu(hand))/float64(cpu(gen))), ratio(gen.rate/hand.rate))
	w("Fewer round trips save latency and the per-round-trip work of client and server (a read, a write, a wake-up on each side), but not the work of the statements themselves: generated executes five statements per message on the server (BEGIN; the claim, one statement that also sets and restores its lock_timeout; the UPDATE; the result UPDATE; COMMIT), like hand-written, whose claim waits without a bound; bare one. ")
	if r.db.pgbench {
		pb, pi := s(scPgBare, n), s(scPgInbox, n)
		w("The client is not what sets this ceiling: pgbench, sending the hand-written inbox's SQL from C, reaches %s of its own bare UPDATE at %d workers, and the generated wrapper %s of pgbench's inbox.", ratio(pi.rate/pb.rate), n, ratio(gen.rate/pi.rate))
	}
	w("\n\n")

	if dup.tripsPerMsg > targetDupTrips+0.005 {
		w("**Duplicates: %.2f round trips, by design.** The design claims the key *inside* the transaction (`BEGIN; INSERT … ON CONFLICT DO NOTHING`, one batch), so a delivery learns that it is a duplicate only from the claim's answer; "+
			"then the transaction must be rolled back and the stored row read in a fresh snapshot (correct under REPEATABLE READ and SERIALIZABLE), a second round trip. "+
			"Reading the inbox row before the claim would make a duplicate one round trip but add one to every first delivery (4 instead of 3 here), which pays only when more than half of the messages are duplicates. "+
			"A duplicate costs less than a first delivery (no handler, no write, no WAL flush to wait for): %s faster at %d worker and %s message by message (median latency), %s more messages per second at %d workers. "+
			"At %d workers the cores are the bound again: a duplicate still runs four statements on the server (BEGIN, the claim, ROLLBACK, the read of the row) and costs %s of CPU (server %s, client %s) against %s for a first delivery, a ratio of %s.\n\n",
			dup.tripsPerMsg, ratio(float64(s(scGenerated, one).p50)/float64(s(scDuplicate, one).p50)), one, ratio(float64(g1)/float64(d1)), ratio(dup.rate/gen.rate), n,
			n, dur(cpu(dup)), serverDur(dup), dur(dup.clientCPU), dur(cpu(gen)), ratio(float64(cpu(gen))/float64(cpu(dup))))
	}
}

func (r *report) writeAlloc(w writer) {
	a := r.alloc
	w("## Allocations\n\n")
	w("`%s`: one delivery at a time against the same database, with `-benchmem`. Bare and hand-written are the same code as in the table above.\n\n", a.command)
	w("| benchmark | ns/op | B/op | allocs/op |\n| --- | ---: | ---: | ---: |\n")
	for _, bl := range a.benches {
		w("| %s | %s | %s | %.0f |\n", bl.name, thousands(bl.nsPerOp), thousands(bl.bPerOp), bl.aPO)
	}
	w("\nWhere the allocations of a first delivery through the generated wrapper come from, outside the handler (the handler's own UPDATE allocates the same as bare): ")
	w("a profile of %d deliveries with `-memprofilerate 1`, each allocation attributed to the nearest function outside the standard library (`go tool pprof -hide` of the standard library):\n\n", a.profiled)
	w("| source | allocs per message |\n| --- | ---: |\n")
	total := 0.0
	for _, g := range a.bySource {
		w("| %s | %.1f |\n", g.name, g.allocs)
		total += g.allocs
	}
	w("| **total** | **%.1f** |\n\n", total)
	w("By function (those making at least 0.5 allocations per message):\n\n| function | allocs per message |\n| --- | ---: |\n")
	for _, f := range a.top {
		if f.allocs >= 0.5 {
			w("| `%s` | %.1f |\n", f.name, f.allocs)
		}
	}
	w("\npgx's pipeline (`SendBatch`, which the wrapper uses to send BEGIN with the claim and the result with COMMIT, a round trip each) allocates per queued statement; one statement per round trip through `Exec` allocates less but costs a round trip each (see hand-written).\n\n")
}

func (r *report) writeMem(w writer) {
	m := r.mem
	slope, mean, overRun := m.growth()
	w("## Memory over a long run\n\n")
	w("The generated scenario at %d workers for %s (%s messages, %s msgs/s), sampling the Go runtime's live heap (`/gc/heap/live:bytes`: what the last GC kept) and the goroutines. ",
		m.workers, m.elapsed.Round(time.Second), thousands(float64(m.msgs)), thousands(float64(m.msgs)/m.elapsed.Seconds()))
	w("A least-squares fit over the last two thirds of the samples (the first third fills the pool and pgx's statement caches) gives a trend of %+.0f bytes/min on a mean live heap of %s: %+.1f%% over that part of the run. ", slope, bytesIEC(mean), 100*overRun)
	w("The target counts as met when that is within ±5%% and the goroutines do not grow.\n\n")
	w("| time | messages | live heap | goroutines | GC cycles |\n| ---: | ---: | ---: | ---: | ---: |\n")
	for _, s := range m.samples {
		w("| %s | %s | %s | %d | %d |\n", s.at.Round(time.Second), thousands(float64(s.msgs)), bytesIEC(float64(s.live)), s.goroutines, s.gcs)
	}
	w("\n")
}

// linearFit is t = a + b·handlers by least squares over the synthetic
// packages' medians.
type linearFit struct {
	a, b, r2 float64 // seconds, seconds per handler
	points   [][2]float64
}

func (g *genResults) fit(pick func(timing) time.Duration, of func(genPackage) []timing) linearFit {
	var f linearFit
	for _, p := range g.packages {
		if strings.HasPrefix(p.name, "syn") {
			f.points = append(f.points, [2]float64{float64(p.handlers), medianTiming(of(p), pick).Seconds()})
		}
	}
	n := float64(len(f.points))
	if n < 2 {
		return f
	}
	var sx, sy, sxx, sxy, syy float64
	for _, p := range f.points {
		sx, sy, sxx, sxy, syy = sx+p[0], sy+p[1], sxx+p[0]*p[0], sxy+p[0]*p[1], syy+p[1]*p[1]
	}
	f.b = (n*sxy - sx*sy) / (n*sxx - sx*sx)
	f.a = (sy - f.b*sx) / n
	num := n*sxy - sx*sy
	f.r2 = num * num / ((n*sxx - sx*sx) * (n*syy - sy*sy))
	return f
}

// curvature compares the slope of the upper half of the points with that of
// the lower half: 1 for a straight line, more when the time grows faster
// than the handlers.
func (f linearFit) curvature() float64 {
	p := f.points
	if len(p) < 3 {
		return 1
	}
	mid := len(p) / 2
	lower := (p[mid][1] - p[0][1]) / (p[mid][0] - p[0][0])
	upper := (p[len(p)-1][1] - p[mid][1]) / (p[len(p)-1][0] - p[mid][0])
	return upper / lower
}

func (f linearFit) describe() string {
	return fmt.Sprintf("%s + %s per handler, R² = %.3f; slope %d→%d ÷ slope %d→%d = %.2f",
		dur(time.Duration(f.a*float64(time.Second))), dur(time.Duration(f.b*float64(time.Second))), f.r2,
		int(f.points[len(f.points)/2][0]), int(f.points[len(f.points)-1][0]), int(f.points[0][0]), int(f.points[len(f.points)/2][0]), f.curvature())
}

func (r *report) writeGen(w writer) {
	g := r.gen
	w("## Generator\n\n")
	w("`idemgen -migrations migrations .` (built once with `go build`) against `go vet .` in the same package directory, both in a temporary module that requires this repository through a `replace` directive, ")
	w("with the build cache warm for the dependencies and the package's generated output current (as in a re-run of `go generate`). ")
	w("Before every timed run a file of the package changes, so that neither go vet's result cache nor the build cache answers for the package itself. ")
	w("%d repetitions of each, alternating which runs first; medians. Wall time is what a user waits; CPU time (user + system, with child processes) is less disturbed by the other users of the machine. ", g.reps)
	w("**go list** is the part of idemgen's wall time spent waiting for the go command, which go/packages runs twice: to list the package, then to get its imports' export data (as go vet, idemgen type-checks the package itself from source).\n\n")
	w("| package | handlers | idemgen wall | go vet wall | ratio | idemgen CPU | go vet CPU | ratio | go list in idemgen |\n")
	w("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, p := range g.packages {
		iw, vw := medianTiming(p.idemgen, wallOf), medianTiming(p.vet, wallOf)
		ic, vc := medianTiming(p.idemgen, cpuOf), medianTiming(p.vet, cpuOf)
		gl := median(p.golist)
		w("| %s | %d | %s | %s | %s | %s | %s | %s | %s (%.0f%%) |\n", p.name, p.handlers, dur(iw), dur(vw), ratio(float64(iw)/float64(vw)),
			dur(ic), dur(vc), ratio(float64(ic)/float64(vc)), dur(gl), 100*float64(gl)/float64(iw))
	}
	idemgen := func(p genPackage) []timing { return p.idemgen }
	vet := func(p genPackage) []timing { return p.vet }
	w("\nGrowth with the number of handlers, least squares over the synthetic packages' medians; the slope ratio compares the upper half of the sizes with the lower half (1 for a straight line, more when the time grows faster than the handlers; the target counts as met up to %.1f):\n\n", maxCurvature)
	w("| | CPU time | wall time |\n| --- | --- | --- |\n")
	w("| idemgen | %s | %s |\n", g.fit(cpuOf, idemgen).describe(), g.fit(wallOf, idemgen).describe())
	w("| go vet | %s | %s |\n\n", g.fit(cpuOf, vet).describe(), g.fit(wallOf, vet).describe())
	w("<details><summary>Every timing (wall / CPU)</summary>\n\n| package | tool | runs |\n| --- | --- | --- |\n")
	for _, p := range g.packages {
		for _, t := range []struct {
			name string
			ts   []timing
		}{{"idemgen", p.idemgen}, {"go vet", p.vet}} {
			var parts []string
			for _, x := range t.ts {
				parts = append(parts, dur(x.wall)+" / "+dur(x.cpu))
			}
			w("| %s | %s | %s |\n", p.name, t.name, strings.Join(parts, ", "))
		}
	}
	w("\n</details>\n\n")
}

func (r *report) writeRawDB(w writer) {
	w("## Raw numbers\n\n")
	w("Messages per second of every cell in every round, with the messages and the measured time, round trips/msg and machine busy fraction.\n\n")
	w("| workers | scenario |")
	for i := range r.cfg.rounds {
		w(" round %d |", i+1)
	}
	w("\n| ---: | --- |" + strings.Repeat(" --- |", r.cfg.rounds) + "\n")
	for _, n := range r.cfg.workers {
		for _, name := range r.db.names() {
			w("| %d | %s |", n, name)
			for _, s := range r.db.cell(name, n).samples {
				w(" %s (%d in %s, %.2f rt, %.0f%%) |", thousands(s.rate()), s.msgs, s.elapsed.Round(time.Millisecond), float64(s.trips)/float64(max(s.msgs, 1)), 100*s.busy)
			}
			w("\n")
		}
	}
	w("\nOrder the cells ran in:\n\n")
	for i, o := range r.db.order {
		w("%d. %s\n", i+1, strings.Join(o, "; "))
	}
	w("\n")
}

// serverDur is the server CPU per message, when it is known.
func serverDur(s summary) string {
	if s.serverCPU < 0 {
		return "–"
	}
	return dur(s.serverCPU)
}

func ratio(x float64) string {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return "–"
	}
	if math.Abs(x) >= 100 {
		return fmt.Sprintf("%.0f×", x)
	}
	if x != 0 && math.Abs(x) < 0.1 {
		return fmt.Sprintf("%.3f×", x)
	}
	return fmt.Sprintf("%.2f×", x)
}

// dur prints a duration with three significant digits.
func dur(d time.Duration) string {
	switch {
	case d < 0:
		return "−" + dur(-d)
	case d == 0:
		return "0"
	case d < time.Millisecond:
		return fmt.Sprintf("%.3g µs", float64(d)/float64(time.Microsecond))
	case d < time.Second:
		return fmt.Sprintf("%.3g ms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.3g s", d.Seconds())
	}
}

func thousands(x float64) string {
	s := fmt.Sprintf("%.0f", x)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var out []byte
	for i, c := range []byte(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, c)
	}
	if neg {
		return "-" + string(out)
	}
	return string(out)
}

func bytesIEC(x float64) string {
	switch {
	case x >= 1<<40:
		return fmt.Sprintf("%.1f TiB", x/(1<<40))
	case x >= 1<<30:
		return fmt.Sprintf("%.1f GiB", x/(1<<30))
	case x >= 1<<20:
		return fmt.Sprintf("%.1f MiB", x/(1<<20))
	case x >= 1<<10:
		return fmt.Sprintf("%.0f KiB", x/(1<<10))
	default:
		return fmt.Sprintf("%.0f B", x)
	}
}
