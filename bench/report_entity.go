package main

import (
	"fmt"
	"math"

	"github.com/idemgen/idemgen/bench/internal/mdtable"
	"github.com/idemgen/idemgen/bench/internal/stats"
)

// The entity part's targets (issue 15), read at 16 workers.
const (
	targetEntityVsBare = 0.9
	targetEntityVsTx   = 1.5
)

// entityRatio is the ratio of two cells' throughput at n workers, and the
// range of the per-round ratios.
func (r *report) entityRatio(a, b string, n int) (ratio, lo, hi float64) {
	ca, cb := r.entity.cell(a, n), r.entity.cell(b, n)
	if ca == nil || cb == nil {
		return math.NaN(), math.NaN(), math.NaN()
	}
	lo, hi = stats.RatioRange(ca.rates(), cb.rates())
	return ca.summary().rate / cb.summary().rate, lo, hi
}

func (r *report) entityTargets(t *targetTable) {
	n := entityWorkers[len(entityWorkers)-1]
	cell := func(name string) *cell { return r.entity.cell(name, n) }
	// line adds mode=entity against other: when it is missed, what both
	// cells cost, and what their CPU a message allows.
	line := func(other string, goal float64, what string) {
		q, lo, hi := r.entityRatio(scEntity, other, n)
		l := target{doc: "modeentity", what: what, measured: fmt.Sprintf("%.2f× [%.2f–%.2f]", q, lo, hi), status: verdict(q >= goal), busy: busyOf(cell(scEntity), cell(other))}
		if q < goal && cell(scEntity) != nil && cell(other) != nil {
			e, o := cell(scEntity).summary(), cell(other).summary()
			for _, c := range []struct {
				name string
				s    summary
			}{{scEntity, e}, {other, o}} {
				l.why.add(c.name+", round trips a message", "%.2f", c.s.tripsPerMsg)
				l.why.add(c.name+", WAL a message", "%.0f B", r.entity.walPerMsg(c.name, n))
				l.why.add(c.name+", CPU a message", "%s (client %s + server %s)", mdtable.Dur(cpuPerMsg(c.s)), mdtable.Dur(c.s.clientCPU), serverDur(c.s))
			}
			byCPU := float64(cpuPerMsg(o)) / float64(cpuPerMsg(e))
			l.why.add("what the CPU a message allows, "+other+" ÷ mode=entity", "%s", mdtable.Ratio(byCPU))
			l.bound = bound{mdtable.Ratio(byCPU), "CPU a message"}
		}
		t.add(l)
	}
	line(scEntityBare, targetEntityVsBare, fmt.Sprintf("mode=entity ≥ %.1f× the bare transaction at %d workers", targetEntityVsBare, n))
	line(scEntityTx, targetEntityVsTx, fmt.Sprintf("mode=entity ≥ %.1f× mode=tx at %d workers", targetEntityVsTx, n))
}

func (r *report) writeEntity(w writer) {
	cfg := r.cfg
	w("## %s\n\n", secEntity)
	w("One consumer, [`bench/orders`](bench/orders/), whose business change is `INSERT INTO orders (id, customer, amount) VALUES ($1, $2, $3)`, each message a new order, delivered as:\n\n")
	w("- **%s**: `orders.Bare`: `BEGIN; INSERT; COMMIT` in one pgx pipeline (one round trip), no deduplication;\n", scEntityBare)
	w("- **%s**: `orders.PlaceEntityIdem`, the generated wrapper: `BEGIN` and `set_config('idem.fingerprint', …)` in one pipeline with the handler's INSERT (whose default records the fingerprint), then the marker check with `COMMIT`: two round trips;\n", scEntity)
	w("- **%s**: `orders.PlaceTxIdem`, the generated wrapper of the same INSERT into `orders_tx`, with an inbox row (`BEGIN` with the claim; the INSERT; `COMMIT`).\n\n", scEntityTx)
	w("Cells as in the message delivery table: %s after a %s warm-up, %d round(s), the scenarios in a rotating order, a fresh schema per cell, a pool of as many connections as workers, round trips counted on the wire. "+
		"**WAL/msg** is `pg_current_wal_lsn()` after the measurement minus before, over the messages: the position is the server's, so other sessions of the shared machine add to it; the table gives the least of the rounds.\n\n",
		cfg.duration, cfg.warmup, cfg.rounds)
	t := mdtable.New(mdtable.L("workers"), mdtable.L("scenario"), mdtable.L("msgs/s"), mdtable.L("p50"), mdtable.L("p99"), mdtable.L("round trips/msg"), mdtable.L("WAL/msg"),
		mdtable.L("client CPU/msg"), mdtable.L("server CPU/msg"), mdtable.L("vs bare"), mdtable.L("vs mode=tx"))
	for _, n := range entityWorkers {
		bare, tx := r.entity.cell(scEntityBare, n), r.entity.cell(scEntityTx, n)
		for _, name := range entityScenarios {
			c := r.entity.cell(name, n)
			if c == nil {
				continue
			}
			s := c.summary()
			server := "n/a"
			if s.serverCPU >= 0 {
				server = mdtable.Dur(s.serverCPU)
			}
			vsBare, vsTx := "", ""
			if bare != nil && name != scEntityBare {
				vsBare = fmt.Sprintf("%.2f×", s.rate/bare.summary().rate)
			}
			if tx != nil && name != scEntityTx {
				vsTx = fmt.Sprintf("%.2f×", s.rate/tx.summary().rate)
			}
			t.Row(mdtable.Int(n), name, fmt.Sprintf("%.0f", s.rate), mdtable.Dur(s.p50), mdtable.Dur(s.p99), fmt.Sprintf("%.2f", s.tripsPerMsg),
				fmt.Sprintf("%.0f B", r.entity.walPerMsg(name, n)), mdtable.Dur(s.clientCPU), server, vsBare, vsTx)
		}
	}
	w("%s", t)
	w("\nmode=entity costs one round trip more than the bare transaction (its COMMIT, with the marker check, can only be sent once the handler has returned; BEGIN and the setting ride with the handler's INSERT) and writes about as much WAL (a 33-byte fingerprint in the row); mode=tx has a third round trip and writes a second row and a second index entry per message. " +
		"On this 2-core shared machine a round trip is CPU on both sides, so the ratios follow the round trips: see [docs/natural.md](docs/natural.md#cost).\n\n")
	r.writeBehind(w, secEntity)
}
