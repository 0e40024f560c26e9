package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/idemgen/idemgen/bench/internal/mdtable"
)

// The batch part's targets (issue 14).
const (
	targetBatchVsGen     = 5.0
	targetBatchVsBare    = 1.0
	targetBatchVsBatched = 0.75
	// A set-based HandleBatch writes its inbox rows beside the handler's
	// change, which bare batched makes alone.
	targetBatchSetVsBatched = 0.6
	targetBatchDup          = 10.0
)

func (r *report) batchTargets(t *targetTable) {
	b := r.batch
	n := slices.Max(b.workers)
	rate := func(name string) float64 { return b.cell(name, n).summary().rate }
	batch := rate(scBatch)
	// line adds one target of handle against other: when it is missed, what
	// both cells cost, and what their CPU a message allows. more, if set,
	// adds what the cells' CPU and round trips do not say.
	line := func(what string, q, goal float64, handle, other string, more func(*facts)) {
		l := target{doc: "batches", what: what, measured: mdtable.Ratio(q), status: verdict(q >= goal), busy: busyOf(b.cell(handle, n), b.cell(other, n))}
		if q < goal {
			h, o := b.cell(handle, n).summary(), b.cell(other, n).summary()
			l.why = append(cellFacts(handle, h, b.cores, 3), cellFacts(other, o, b.cores, 3)...)
			byCPU := float64(cpuPerMsg(o)) / float64(cpuPerMsg(h))
			l.why.add("what the CPU a message allows, "+other+" ÷ "+handle, "%s", mdtable.Ratio(byCPU))
			l.bound = bound{mdtable.Ratio(byCPU), "CPU a message"}
			if more != nil {
				more(&l.why)
			}
		}
		t.add(l)
	}
	line(fmt.Sprintf("HandleBatch of %d ≥ %.0f× single-message generated at %d workers", b.size, targetBatchVsGen, n), batch/rate(scGenerated), targetBatchVsGen, scBatch, scGenerated, nil)
	line(fmt.Sprintf("HandleBatch of %d ≥ %.1f× bare at %d workers", b.size, targetBatchVsBare, n), batch/rate(scBare), targetBatchVsBare, scBatch, scBare, nil)
	line(fmt.Sprintf("HandleBatch of %d ≥ %.2f× bare batched at %d workers", b.size, targetBatchVsBatched, n), batch/rate(scBareBatched), targetBatchVsBatched, scBatch, scBareBatched, nil)
	// A set-based handler (one that takes the whole batch) is what the
	// target against bare batched asks for, where the part has its scenario.
	if b.cell(scBatchSet, n) != nil {
		line(fmt.Sprintf("set-based HandleBatch of %d ≥ %.1f× bare batched at %d workers", b.size, targetBatchSetVsBatched, n), rate(scBatchSet)/rate(scBareBatched), targetBatchSetVsBatched, scBatchSet, scBareBatched,
			r.inboxWrites)
	}
	t.add(b.tripsTarget(n))
	q := rate(scBatchDup) / rate(scDuplicate)
	line(fmt.Sprintf("a replay through HandleBatch ≥ %.0f× the single-message duplicate path at %d workers", targetBatchDup, n), q, targetBatchDup, scBatchDup, scDuplicate, nil)
}

func (r *report) writeBatch(w writer) {
	b := r.batch
	w("## %s\n\n", secBatches)
	w("The ledger's consumer delivered one message a transaction and %d a transaction, at %s workers, each cell %d time(s) for %s after a %s warm-up in a fresh schema, rotating as above:\n\n", b.size, joinInts(b.workers, ", "), r.cfg.rounds, r.cfg.duration, r.cfg.warmup)
	for _, sc := range b.scenarios {
		w("- **%s**: %s;\n", sc.name, sc.what)
	}
	w("\nThe messages of a batch are sorted by account before delivery in every batched scenario (two transactions updating the same accounts in different orders deadlock). Messages/s counts messages, not batches; the latencies are per call (a batch, or one message).\n\n")
	t := cellTable(workersScenario, "p50 a call", "p99 a call", "vs generated", "vs bare")
	for _, n := range b.workers {
		gen, bare := b.cell(scGenerated, n).summary().rate, b.cell(scBare, n).summary().rate
		for _, sc := range b.scenarios {
			s := b.cell(sc.name, n).summary()
			t.Row(slices.Concat([]string{mdtable.Int(n), sc.name}, s.cells(3), []string{mdtable.Ratio(s.rate / gen), mdtable.Ratio(s.rate / bare)})...)
		}
	}
	w("%s\n", t)
	r.writeBehind(w, secBatches)
}

// joinInts joins integers with thousands separators.
func joinInts(xs []int, sep string) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = mdtable.Int(x)
	}
	return strings.Join(s, sep)
}

// tripsTarget is "HandleBatch costs 2 round trips plus its handler's": a
// call's round trips on the wire, less those of the handler's statements.
// BEGIN, the marker and the lookups go in the first round trip; the rows,
// the outbox and COMMIT in the last. Post sends one UPDATE a message, a
// round trip each; the set-based PostAll one statement.
func (b *batchResults) tripsTarget(n int) target {
	l := target{doc: "batches", what: fmt.Sprintf("HandleBatch of %d: %.0f round trips plus the handler's", b.size, targetFirstTrips), status: met}
	var parts []string
	for _, sc := range []struct {
		name, short string
		own         int // the handler's round trips
	}{{scBatch, "per-message handler", b.size}, {scBatchSet, "set-based", 1}} {
		c := b.cell(sc.name, n)
		if c == nil || len(c.samples) == 0 {
			continue
		}
		perCall := c.summary().tripsPerMsg * float64(b.size)
		parts = append(parts, fmt.Sprintf("%.2f + %d %s", perCall-float64(sc.own), sc.own, sc.short))
		if perCall-float64(sc.own) > targetFirstTrips+0.005 {
			l.status = missed
		}
		l.why.add(fmt.Sprintf("%s, round trips a call at %d workers", sc.name, n), "%.2f", perCall)
		l.why.add(sc.name+", the handler's statements, one round trip each", "%d", sc.own)
		l.busy = append(l.busy, busyOf(c)...)
	}
	l.measured = strings.Join(parts, ", ")
	return l
}
