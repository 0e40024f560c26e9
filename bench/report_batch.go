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
	targetBatchDup       = 10.0
)

// bound says what bounds a batch cell: its CPU per message against the
// machine's cores, and its round trips per message.
func (r *batchResults) bound(name string, workers int) string {
	s := r.cell(name, workers).summary()
	cpu := s.clientCPU + max(s.serverCPU, 0)
	return fmt.Sprintf("%s: CPU %s a message (client + server; %d cores: at most %s msgs/s), %.3f round trips a message, the machine %.0f%% busy",
		name, mdtable.Dur(cpu), r.cores, mdtable.Thousands(float64(r.cores)/cpu.Seconds()), s.tripsPerMsg, 100*s.busy)
}

func (r *report) batchTargets(t *targetTable) {
	b := r.batch
	n := slices.Max(b.workers)
	rate := func(name string) float64 { return b.cell(name, n).summary().rate }
	batch := rate(scBatch)
	// line writes one target; design, when the target is missed, says
	// what the cells' CPU and round trips do not: what the two designs
	// compared do differently.
	line := func(what string, q, target float64, handle, other, design string) {
		why := ""
		if q < target {
			why = "; " + b.bound(handle, n) + "; " + b.bound(other, n)
			if design != "" {
				why += "; " + design
			}
		}
		t.line(verdict(q >= target), what, mdtable.Ratio(q)+" ([below](#batches))"+why, busyOf(b.cell(handle, n), b.cell(other, n))...)
	}
	line(fmt.Sprintf("HandleBatch of %d at %d workers ≥ %.0f× the single-message generated throughput", b.size, n, targetBatchVsGen), batch/rate(scGenerated), targetBatchVsGen, scBatch, scGenerated, "")
	line(fmt.Sprintf("HandleBatch of %d at %d workers ≥ %.1f× bare (one UPDATE a transaction)", b.size, n, targetBatchVsBare), batch/rate(scBare), targetBatchVsBare, scBatch, scBare, "")
	// The handler's UPDATE is a statement of its own on the batch's
	// transaction (it reads the new balance before the next message); bare
	// batched queues all of its UPDATEs in one pgx batch.
	line(fmt.Sprintf("HandleBatch of %d at %d workers ≥ %.2f× bare batched (the same UPDATEs in one transaction)", b.size, n, targetBatchVsBatched), batch/rate(scBareBatched), targetBatchVsBatched, scBatch, scBareBatched,
		"the handler's own UPDATE is a round trip a message, which bare batched pipelines, and the claim, the lookup and the stored results are the inbox's work on top")
	// A set-based handler (one that takes the whole batch) is what the
	// target against bare batched asks for, where the part has its scenario.
	if b.cell(scBatchSet, n) != nil {
		line(fmt.Sprintf("HandleBatch of %d with a set-based handler (%s) at %d workers ≥ %.2f× bare batched", b.size, scBatchSet, n, targetBatchVsBatched), rate(scBatchSet)/rate(scBareBatched), targetBatchVsBatched, scBatchSet, scBareBatched,
			r.inboxWritesBound())
	}
	q := rate(scBatchDup) / rate(scDuplicate)
	why := ""
	if q < targetBatchDup {
		why = "; " + b.bound(scBatchDup, n) + "; " + b.bound(scDuplicate, n)
	}
	t.line(verdict(q >= targetBatchDup), fmt.Sprintf("a replay through HandleBatch ≥ %.0f× the single-message duplicate path", targetBatchDup),
		fmt.Sprintf("%s at %d workers%s", mdtable.Ratio(q), n, why), busyOf(b.cell(scBatchDup, n), b.cell(scDuplicate, n))...)
}

func (r *report) writeBatch(w writer) {
	b := r.batch
	w("## Batches\n\n")
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
}

// joinInts joins integers with thousands separators.
func joinInts(xs []int, sep string) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = mdtable.Int(x)
	}
	return strings.Join(s, sep)
}
