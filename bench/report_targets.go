package main

import (
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/idemgen/idemgen/bench/internal/mdtable"
	"github.com/idemgen/idemgen/bench/internal/stats"
)

// status is a target's verdict.
type status int

const (
	met status = iota
	missed
	// reported: a measurement the issue asks to see, with no bound to meet.
	reported
	// notRun: the cells the target compares did not run (their part was
	// not selected, or a scenario it reads is absent).
	notRun
)

// word is the verdict in plain text.
func (s status) word() string {
	switch s {
	case met:
		return "met"
	case missed:
		return "missed"
	case reported:
		return "reported"
	}
	return "not run"
}

// String is the verdict as the table writes it: a miss in bold.
func (s status) String() string {
	if s == missed {
		return "**missed**"
	}
	return s.word()
}

// verdict is met when ok, else missed.
func verdict(ok bool) status {
	if ok {
		return met
	}
	return missed
}

// target is one line of the Targets table. Its cells are short: the
// numbers behind them go to the part's section (why), the reasoning to
// docs/benchmarks.md (doc).
type target struct {
	// doc is the anchor of the section of docs/benchmarks.md that says what
	// the target compares and why its bound bounds it.
	doc string
	// what is the target with its bound: "generated ≥ 1.3× hand-written at
	// 16 workers".
	what string
	// measured is the number or numbers the target reads, nothing else:
	// "0.96× [0.90–1.02]".
	measured string
	// bound is, for a missed target, what its mechanism allows, computed
	// from the same run.
	bound  bound
	status status
	// busy are the machine's busy fractions during the cells the line
	// compares (the other users of the machine included).
	busy []float64
	// why are the numbers behind the line, each with its label, one claim
	// each; the part's section writes them under "Behind the targets".
	why facts
	// section is the title of the part's section in BENCHMARKS.md; add
	// sets it to the part's, unless the line names another.
	section string
}

// bound is what a missed target's mechanism allows: a number and a label
// of two to four words, written "0.97× (server work)".
type bound struct {
	value, label string
}

func (b bound) String() string {
	if b.value == "" {
		return ""
	}
	return b.value + " (" + b.label + ")"
}

// fact is a number behind a target line, with what it is.
type fact struct {
	label, value string
}

// facts are the numbers behind a target line, in the order they are read.
type facts []fact

// add appends a fact: label, and the value formatted.
func (f *facts) add(label, format string, args ...any) {
	*f = append(*f, fact{label, fmt.Sprintf(format, args...)})
}

// targetTable collects the lines of the Targets table, each part adding its
// own.
type targetTable struct {
	lines   []target
	section string // of the part adding lines
}

// part starts the lines of the part whose section in BENCHMARKS.md has the
// title section, and returns t for them.
func (t *targetTable) part(section string) *targetTable {
	t.section = section
	return t
}

// add appends a line, in the current part's section unless it names one.
func (t *targetTable) add(l target) {
	if l.section == "" {
		l.section = t.section
	}
	t.lines = append(t.lines, l)
}

// busyOf is the busy fraction of each cell's rounds, pooled per cell.
func busyOf(cells ...*cell) []float64 {
	var busy []float64
	for _, c := range cells {
		if c != nil && len(c.samples) > 0 {
			busy = append(busy, c.summary().busy)
		}
	}
	return busy
}

// targetDocs is the page that explains the targets, from the repository's
// root, where BENCHMARKS.md is.
const targetDocs = "docs/benchmarks.md"

// behindTitle is the title of the subsection of a part's section that holds
// the numbers behind its target lines.
func behindTitle(section string) string { return "Behind the targets: " + section }

func (t *targetTable) String() string {
	tb := mdtable.New(mdtable.L("target"), mdtable.L("measured"), mdtable.L("bound"), mdtable.R("busy"), mdtable.L(""))
	for _, l := range t.lines {
		what := l.what
		if l.doc != "" {
			what = "[" + l.what + "](" + targetDocs + "#" + l.doc + ")"
		}
		tb.Row(what, l.measured, l.bound.String(), busyRange(l.busy), l.verdictCell())
	}
	return tb.String()
}

// verdictCell is the verdict, linked to the numbers behind the line: its
// part's "Behind the targets", or the part's section when the line has no
// numbers beyond its cells. A line not run links nowhere.
func (l target) verdictCell() string {
	if l.status == notRun || l.section == "" {
		return l.status.String()
	}
	to := l.section
	if len(l.why) > 0 {
		to = behindTitle(l.section)
	}
	return "[" + l.status.String() + "](#" + mdtable.Anchor(to) + ")"
}

// busyRange writes busy fractions as a percentage, or the lowest and the
// highest of them when they differ: "83%", "78–91%"; empty for none.
func busyRange(busy []float64) string {
	if len(busy) == 0 {
		return ""
	}
	lo, hi := mdtable.Percent(slices.Min(busy)), mdtable.Percent(slices.Max(busy))
	if lo == hi {
		return lo
	}
	return strings.TrimSuffix(lo, "%") + "–" + hi
}

// The targets of the issue.
const (
	// The single-message wrapper at the highest concurrency, against the
	// hand-written inbox and the bare UPDATE (issue 24: a claim that costs
	// what it must).
	targetVsHand = 1.3
	targetVsBare = 0.45
	// A first delivery of a one-statement handler, and a duplicate, cost
	// two round trips each (the optimistic protocol).
	targetFirstTrips = 2.0
	targetDupTrips   = 2.0
	targetDupFaster  = 3.0
	targetVsVet      = 1.5
	// maxCurvature bounds how much steeper the upper half of the growth
	// may be than the lower half for it to count as linear.
	maxCurvature = 1.5
)

// The titles of the report's sections that hold targets; the verdicts
// link to them.
const (
	secDelivery   = "Message delivery"
	secStatements = "Statements"
	secNetwork    = "Over a network"
	secBatches    = "Batches"
	secOutbox     = "Outbox"
	secBrokers    = "Brokers"
	secPurge      = "Purge under load"
	secDrop       = "Purging by dropping partitions"
	secEntity     = "mode=entity"
	secSizing     = "Sizing"
	secAlloc      = "Allocations"
	secMem        = "Memory over a long run"
	secGen        = "Generator"
)

// targets are the lines of the Targets table: every part that ran adds its
// own, and the targets of some parts that did not run a line not run.
func (r *report) targets() *targetTable {
	t := &targetTable{}
	if r.db != nil {
		r.dbTargets(t.part(secDelivery))
	} else {
		t.add(notRunTarget("generated-against-hand-written-and-bare", fmt.Sprintf("generated ≥ %.1f× hand-written and ≥ %g× bare at %s", targetVsHand, targetVsBare, highestOf(r.cfg.workers, "-workers")), "db"))
	}
	if r.stmts != nil {
		r.statementsTargets(t.part(secStatements))
	}
	if r.net != nil {
		r.netTargets(t.part(secNetwork))
	}
	if r.batch != nil {
		r.batchTargets(t.part(secBatches))
	} else {
		t.add(notRunTarget("batches", fmt.Sprintf("HandleBatch at %s ≥ %.2f× bare batched", highestOf(r.cfg.batchWorkers, "-batchworkers"), targetBatchVsBatched), "batch"))
	}
	r.outboxTargets(t.part(secOutbox))
	r.brokersTargets(t.part(secBrokers))
	if r.purge != nil {
		r.purgeTargets(t.part(secPurge))
	}
	if r.entity != nil {
		r.entityTargets(t.part(secEntity))
	}
	if r.sizing != nil {
		r.sizingTargets(t.part(secSizing))
	}
	if r.gen != nil {
		r.genTargets(t.part(secGen))
	}
	if r.alloc != nil {
		r.allocTargets(t.part(secAlloc))
	}
	if r.mem != nil {
		r.memTargets(t.part(secMem))
	}
	return t
}

// writeTargets writes the Targets table.
func (r *report) writeTargets(w writer) {
	w("## Targets\n\n")
	w("A line per target, each read from the cells of this run. ")
	w("**measured** is the number the target reads. ")
	w("**bound** is, for a missed target, what its mechanism allows, computed from the same run. ")
	w("**busy** is how busy the whole machine was during the cells the line compares: every core, the other users of the machine included, the lowest and the highest. ")
	w("Each target links to [%s](%s), which says what it compares and why its bound bounds it. ", targetDocs, targetDocs)
	w("Each verdict links to the numbers behind it, in the part's section below.\n\n%s\n", r.targets())
}

// writeBehind writes, at the end of a part's section, the numbers behind
// the part's target lines: a paragraph per line that has any.
func (r *report) writeBehind(w writer, section string) {
	var lines []target
	for _, l := range r.targets().lines {
		if l.section == section && len(l.why) > 0 {
			lines = append(lines, l)
		}
	}
	if len(lines) == 0 {
		return
	}
	w("### %s\n\n", behindTitle(section))
	for _, l := range lines {
		w("**%s**: %s, %s", l.what, l.status.word(), l.measured)
		if b := l.bound.String(); b != "" {
			w("; bound %s", b)
		}
		w(".\n\n")
		for _, f := range l.why {
			w("- %s: %s\n", f.label, f.value)
		}
		w("\n")
	}
}

func (r *report) dbTargets(t *targetTable) {
	n := r.maxWorkers()
	cell := func(name string, workers int) *cell { return r.db.cell(name, workers) }
	gen, hand, bare, dup := cell(scGenerated, n).summary(), cell(scHand, n).summary(), cell(scBare, n).summary(), cell(scDuplicate, n).summary()
	// against is a line of the generated scenario against other: when it is
	// missed, what both cells cost and what the server's work allows.
	against := func(other string, o summary, goal float64, what string) {
		q := gen.rate / o.rate
		l := target{doc: "generated-against-hand-written-and-bare", what: what, measured: r.pairRatio(scGenerated, other, n), status: verdict(q >= goal),
			busy: busyOf(cell(scGenerated, n), cell(other, n))}
		if other == scHand {
			l.why.add("median latency message by message, hand-written ÷ generated", "%s", mdtable.Ratio(float64(r.pairedP50(scHand))/float64(r.pairedP50(scGenerated))))
		}
		if q < goal {
			l.why = append(l.why, cellFacts(scGenerated, gen, runtime.NumCPU(), 2)...)
			l.why = append(l.why, cellFacts(other, o, runtime.NumCPU(), 2)...)
			byCPU := float64(cpuPerMsg(o)) / float64(cpuPerMsg(gen))
			l.why.add("what the CPU a message allows, "+other+" ÷ generated", "%s", mdtable.Ratio(byCPU))
			l.bound = bound{mdtable.Ratio(byCPU), "CPU a message"}
			if work, ok := r.serverWork(other, &l.why); ok {
				l.bound = bound{mdtable.Ratio(work), "server work"}
			}
		}
		t.add(l)
	}
	against(scHand, hand, targetVsHand, fmt.Sprintf("generated ≥ %.1f× hand-written at %d workers", targetVsHand, n))
	against(scBare, bare, targetVsBare, fmt.Sprintf("generated ≥ %g× bare at %d workers", targetVsBare, n))

	first := target{doc: "round-trips", what: fmt.Sprintf("a first delivery costs %.0f round trips", targetFirstTrips), status: met}
	var firstTrips []string
	for _, k := range r.cfg.workers {
		s := cell(scGenerated, k).summary()
		firstTrips = append(firstTrips, fmt.Sprintf("%.2f at %d", s.tripsPerMsg, k))
		if s.tripsPerMsg > targetFirstTrips+0.005 {
			first.status = missed
		}
		first.busy = append(first.busy, busyOf(cell(scGenerated, k))...)
	}
	first.measured = strings.Join(firstTrips, ", ")
	t.add(first)
	trips := target{doc: "round-trips", what: fmt.Sprintf("a duplicate costs %.0f round trips", targetDupTrips), measured: fmt.Sprintf("%.2f round trips", dup.tripsPerMsg),
		status: verdict(dup.tripsPerMsg <= targetDupTrips+0.005), busy: busyOf(cell(scDuplicate, n))}
	t.add(trips)
	r.protocolTargets(t, n, gen)
	if r.db.log != nil {
		r.logTarget(t)
	}
	one := slices.Min(r.cfg.workers)
	lat := float64(cell(scGenerated, one).summary().p50) / float64(cell(scDuplicate, one).summary().p50)
	paired := float64(r.pairedP50(scGenerated)) / float64(r.pairedP50(scDuplicate))
	thr := dup.rate / gen.rate
	faster := target{doc: "duplicates", what: fmt.Sprintf("a duplicate ≥ %.0f× faster than a first delivery", targetDupFaster),
		measured: fmt.Sprintf("%s latency at %d, %s throughput at %d", mdtable.Ratio(lat), one, mdtable.Ratio(thr), n),
		status:   verdict(lat >= targetDupFaster && thr >= targetDupFaster),
		busy:     busyOf(cell(scGenerated, one), cell(scDuplicate, one), cell(scGenerated, n), cell(scDuplicate, n))}
	faster.why.add(fmt.Sprintf("median latency at %d %s, first delivery ÷ duplicate", one, plural(one, "worker")), "%s", mdtable.Ratio(lat))
	faster.why.add("the same, the scenarios alternating message by message", "%s", mdtable.Ratio(paired))
	faster.why.add(fmt.Sprintf("throughput at %d workers, duplicate ÷ first delivery", n), "%s", mdtable.Ratio(thr))
	if thr < targetDupFaster {
		// On saturated cores a duplicate's rate is the CPU over its CPU a
		// message: it still runs four statements on the server.
		byCPU := float64(cpuPerMsg(gen)) / float64(cpuPerMsg(dup))
		faster.why.add(fmt.Sprintf("duplicate, CPU a message at %d workers", n), "%s (client %s + server %s)", mdtable.Dur(cpuPerMsg(dup)), mdtable.Dur(dup.clientCPU), serverDur(dup))
		faster.why.add(fmt.Sprintf("first delivery, CPU a message at %d workers", n), "%s (client %s + server %s)", mdtable.Dur(cpuPerMsg(gen)), mdtable.Dur(gen.clientCPU), serverDur(gen))
		faster.why.add("what the CPU a message allows, first delivery ÷ duplicate", "%s", mdtable.Ratio(byCPU))
		faster.bound = bound{mdtable.Ratio(byCPU), "CPU a message"}
	}
	t.add(faster)
}

// protocolTargets are the reported lines of the claim-first protocol beside
// the optimistic one: the wrapper built with WithPessimisticClaim, and the
// protocols' SQL from pgbench, at n workers.
func (r *report) protocolTargets(t *targetTable, n int, gen summary) {
	if pc := r.db.cell(scPessimistic, n); pc != nil && len(pc.samples) > 0 {
		p := pc.summary()
		l := target{doc: "the-claim-first-protocol", what: "generated against generated, pessimistic, reported", status: reported,
			measured: fmt.Sprintf("%s at %d; %.2f against %.2f round trips", r.pairRatio(scGenerated, scPessimistic, n), n, gen.tripsPerMsg, p.tripsPerMsg),
			busy:     busyOf(r.db.cell(scGenerated, n), pc)}
		for _, k := range r.cfg.workers {
			l.why.add(fmt.Sprintf("generated ÷ generated, pessimistic, %d %s, per round in brackets", k, plural(k, "worker")), "%s", r.pairRatio(scGenerated, scPessimistic, k))
		}
		l.why.add("generated, pessimistic, msgs/s at "+mdtable.Int(n), "%s", mdtable.Thousands(p.rate))
		l.why.add("generated, msgs/s at "+mdtable.Int(n), "%s", mdtable.Thousands(gen.rate))
		l.why.add("median latency message by message, pessimistic ÷ generated", "%s", mdtable.Ratio(float64(r.pairedP50(scPessimistic))/float64(r.pairedP50(scGenerated))))
		t.add(l)
	}
	if !r.db.pgbench {
		return
	}
	l := target{doc: "the-claim-first-protocol", what: "pgbench: inbox, claim-first, read then insert, insert only, reported", status: reported}
	var rates []string
	for _, name := range pgbenchNames[1:] {
		c := r.db.cell(name, n)
		if c == nil || len(c.samples) == 0 {
			return
		}
		rates = append(rates, mdtable.Thousands(c.summary().rate))
		l.busy = append(l.busy, busyOf(c)...)
		for _, k := range r.cfg.workers {
			l.why.add(fmt.Sprintf("%s (%d round trips), msgs/s at %d", name, pgbenchTrips[name], k), "%s", mdtable.Thousands(r.db.cell(name, k).summary().rate))
		}
	}
	l.measured = strings.Join(rates, " / ") + fmt.Sprintf(" msgs/s at %d", n)
	l.why.add(fmt.Sprintf("read then insert ÷ claim-first, %d workers", n), "%s", r.pairRatio(scPgOptimistic, scPgClaimFirst, n))
	l.why.add(fmt.Sprintf("insert only ÷ read then insert, %d workers", n), "%s", r.pairRatio(scPgNoRead, scPgOptimistic, n))
	l.why.add(fmt.Sprintf("generated ÷ pgbench read then insert, %d workers", n), "%s", r.pairRatio(scGenerated, scPgOptimistic, n))
	t.add(l)
}

// cpuPerMsg is a cell's CPU a message, client and server together.
func cpuPerMsg(s summary) time.Duration { return s.clientCPU + max(s.serverCPU, 0) }

// cellFacts are what bound a cell: its CPU a message against the machine's
// cores, its round trips a message (to digits decimals), and how busy the
// machine was.
func cellFacts(name string, s summary, cores, digits int) facts {
	var f facts
	f.add(name+", CPU a message", "%s (client %s + server %s)", mdtable.Dur(cpuPerMsg(s)), mdtable.Dur(s.clientCPU), serverDur(s))
	f.add(fmt.Sprintf("%s, at most on %d cores", name, cores), "%s msgs/s", mdtable.Thousands(float64(cores)/cpuPerMsg(s).Seconds()))
	f.add(name+", round trips a message", "%.*f", digits, s.tripsPerMsg)
	f.add(name+", the machine busy", "%s", mdtable.Percent(s.busy))
	return f
}

func (r *report) genTargets(t *targetTable) {
	worst, worstName := 0.0, ""
	for _, p := range r.gen.packages {
		q := float64(medianTiming(p.idemgen, wallOf)) / float64(medianTiming(p.vet, wallOf))
		if q > worst {
			worst, worstName = q, p.name
		}
	}
	t.add(target{doc: "the-generator", what: fmt.Sprintf("idemgen ≤ %.1f× go vet on the same package", targetVsVet),
		measured: fmt.Sprintf("at most %s (%s)", mdtable.Ratio(worst), worstName), status: verdict(worst <= targetVsVet)})
	fit := r.gen.fit(cpuOf, func(p genPackage) []timing { return p.idemgen })
	l := target{doc: "the-generator", what: "idemgen linear in the number of handlers",
		measured: fmt.Sprintf("slope ratio %.2f, R² = %.3f", fit.Curvature(), fit.R2), status: verdict(fit.B > 0 && fit.Curvature() <= maxCurvature)}
	p := fit.Points
	l.why.add("CPU time, least squares over the synthetic packages", "%s + %s per handler",
		mdtable.Dur(time.Duration(fit.A*float64(time.Second))), mdtable.Dur(time.Duration(fit.B*float64(time.Second))))
	l.why.add("R² of the fit", "%.3f", fit.R2)
	l.why.add(fmt.Sprintf("slope %d→%d ÷ slope %d→%d", int(p[len(p)/2][0]), int(p[len(p)-1][0]), int(p[0][0]), int(p[len(p)/2][0])), "%.2f", fit.Curvature())
	t.add(l)
}

func (r *report) allocTargets(t *targetTable) {
	for _, bl := range r.alloc.benches {
		if bl.name == "Generated" {
			t.add(target{doc: "allocations-and-memory", what: "the wrapper's allocations per message, reported", status: reported,
				measured: fmt.Sprintf("%.0f allocs, %s B a first delivery", bl.aPO, mdtable.Thousands(bl.bPerOp))})
		}
	}
}

func (r *report) memTargets(t *targetTable) {
	_, mean, overRun := r.mem.growth()
	first, last := r.mem.samples[0], r.mem.samples[len(r.mem.samples)-1]
	l := target{doc: "allocations-and-memory", what: "no growth in memory over a long run",
		measured: fmt.Sprintf("heap trend %+.1f%%, goroutines %d → %d", 100*overRun, first.goroutines, last.goroutines),
		status:   verdict(math.Abs(overRun) < 0.05 && last.goroutines <= first.goroutines)}
	l.why.add("live heap, on average", "%s", mdtable.IEC(mean))
	l.why.add("the trend, over the last two thirds of the run", "%+.1f%%", 100*overRun)
	l.why.add("the length of the run", "%s", r.mem.elapsed.Round(time.Second))
	t.add(l)
}

// describeFit writes a fit of seconds against handlers: the intercept, the
// slope, R² and the slope ratio of the upper half of the sizes to the lower.
func describeFit(f stats.Line) string {
	p := f.Points
	return fmt.Sprintf("%s + %s per handler, R² = %.3f; slope %d→%d ÷ slope %d→%d = %.2f",
		mdtable.Dur(time.Duration(f.A*float64(time.Second))), mdtable.Dur(time.Duration(f.B*float64(time.Second))), f.R2,
		int(p[len(p)/2][0]), int(p[len(p)-1][0]), int(p[0][0]), int(p[len(p)/2][0]), f.Curvature())
}
