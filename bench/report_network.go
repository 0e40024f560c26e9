package main

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/idemgen/idemgen/bench/internal/mdtable"
)

// The network part's targets (issue 14).
const (
	targetNetVsHand = 1.5
	// At one worker a message waits its round trips: 2 against the
	// hand-written inbox's 5.
	targetNetVsHandOne = 1.8
	// A first delivery's median latency, in measured round trips of the
	// link: its 2 round trips and the server's work.
	targetNetFirstP50  = 2.3
	targetNetDupTrips  = 2.0
	targetNetDupFaster = 2.0
)

// netTargetRTT is the round trip the targets are read at: the longest one
// measured.
func (r *netResults) targetRTT() time.Duration {
	var rtt time.Duration
	for _, l := range r.links {
		rtt = max(rtt, l.rtt)
	}
	return rtt
}

// netTargets writes the network part's lines of the Targets table.
func (r *report) netTargets(t *targetTable) {
	n := r.net
	rtt := n.targetRTT()
	if rtt == 0 {
		return
	}
	one, many := slices.Min(n.workers), slices.Max(n.workers)
	link := netLink{rtt: rtt}.name()
	// At one worker the stricter target below applies; this one holds at
	// the highest concurrency, when one was measured beside it.
	vsHand := target{doc: "over-a-network", what: fmt.Sprintf("%s: generated ≥ %.1f× hand-written at %d workers", link, targetNetVsHand, many), status: met}
	var ratios []string
	var cells []*cell
	for _, k := range []int{many} {
		cells = append(cells, n.cell(rtt, scGenerated, k), n.cell(rtt, scHand, k))
		g, h := n.bound(rtt, scGenerated, k), n.bound(rtt, scHand, k)
		q := g.s.rate / h.s.rate
		ratios = append(ratios, mdtable.Ratio(q)+" at "+mdtable.Int(k))
		if q < targetNetVsHand {
			// Each cell's rate is at most the lower of its two bounds, so
			// their quotient is what the link and the cores allow the ratio.
			vsHand.status = missed
			vsHand.why = append(vsHand.why, g.facts()...)
			vsHand.why = append(vsHand.why, h.facts()...)
			label := g.bindLabel
			if g.bindLabel != h.bindLabel {
				label = "round trips and CPU"
			}
			allows := g.most() / h.most()
			vsHand.why.add(fmt.Sprintf("what the bounds allow at %d %s, generated ÷ hand-written", k, plural(k, "worker")), "%s", mdtable.Ratio(allows))
			vsHand.bound = bound{mdtable.Ratio(allows), label}
		}
	}
	vsHand.measured, vsHand.busy = strings.Join(ratios, ", "), busyOf(cells...)
	if many > one {
		t.add(vsHand)
	}
	gc1, hc1 := n.cell(rtt, scGenerated, one), n.cell(rtt, scHand, one)
	q1 := gc1.summary().rate / hc1.summary().rate
	vsOne := target{doc: "over-a-network", what: fmt.Sprintf("%s: generated ≥ %.1f× hand-written at %d %s", link, targetNetVsHandOne, one, plural(one, "worker")),
		measured: cellRatio(gc1, hc1), status: verdict(q1 >= targetNetVsHandOne), busy: busyOf(gc1, hc1)}
	if q1 < targetNetVsHandOne {
		g, h := n.bound(rtt, scGenerated, one), n.bound(rtt, scHand, one)
		vsOne.why = append(append(vsOne.why, g.facts()...), h.facts()...)
		vsOne.bound = bound{mdtable.Ratio(g.most() / h.most()), g.bindLabel}
		// A worker waits its round trips and what a message takes on the
		// socket (the server's work and the commit's flush, nearly no
		// network): their sum a message, each scenario.
		if gl, hl := n.latencyBound(rtt, scGenerated, one), n.latencyBound(rtt, scHand, one); gl > 0 && hl > 0 {
			vsOne.why.add("a message's round trips × ping + its median on the socket, generated / hand-written", "%s / %s", mdtable.Dur(gl), mdtable.Dur(hl))
			vsOne.bound = bound{mdtable.Ratio(float64(hl) / float64(gl)), "round trips + socket latency"}
		}
	}
	t.add(vsOne)
	ping := n.ping[rtt]
	gs1 := gc1.summary()
	inTrips := float64(gs1.p50) / float64(ping)
	p50 := target{doc: "over-a-network", what: fmt.Sprintf("%s: a first delivery's median ≤ %.1f round trips", link, targetNetFirstP50),
		measured: fmt.Sprintf("%.2f round trips (%s ÷ %s)", inTrips, mdtable.Dur(gs1.p50), mdtable.Dur(ping)), status: verdict(inTrips <= targetNetFirstP50), busy: busyOf(gc1)}
	p50.why.add(fmt.Sprintf("median latency at %d %s", one, plural(one, "worker")), "%s", mdtable.Dur(gs1.p50))
	p50.why.add("the link's round trip, the median ping", "%s", mdtable.Dur(ping))
	p50.why.add("round trips a message, counted on the wire", "%.2f", gs1.tripsPerMsg)
	if inTrips > targetNetFirstP50 {
		// The round trips alone take tripsPerMsg pings; what exceeds it is
		// the work of client and server, and the commit's flush, which the
		// socket's median holds.
		p50.bound = bound{fmt.Sprintf("%.2f", gs1.tripsPerMsg), "round trips counted"}
		if lb := n.latencyBound(rtt, scGenerated, one); lb > 0 {
			p50.why.add(fmt.Sprintf("median latency on the socket at %d %s", one, plural(one, "worker")), "%s", mdtable.Dur(n.cell(0, scGenerated, one).summary().p50))
			p50.bound = bound{fmt.Sprintf("%.2f", float64(lb)/float64(ping)), "round trips + socket latency"}
		}
	}
	t.add(p50)
	d := n.cell(rtt, scDuplicate, one).summary()
	g := n.cell(rtt, scGenerated, one).summary()
	t.add(target{doc: "over-a-network", what: fmt.Sprintf("%s: a duplicate costs ≤ %.0f round trips", link, targetNetDupTrips),
		measured: fmt.Sprintf("%.2f at %d, %.2f at %d", d.tripsPerMsg, one, n.cell(rtt, scDuplicate, many).summary().tripsPerMsg, many),
		status:   verdict(d.tripsPerMsg <= targetNetDupTrips+0.005), busy: busyOf(n.cell(rtt, scDuplicate, one), n.cell(rtt, scDuplicate, many))})
	lat := float64(g.p50) / float64(d.p50)
	faster := target{doc: "over-a-network", what: fmt.Sprintf("%s: duplicate ≥ %.0f× faster than first delivery, %d %s", link, targetNetDupFaster, one, plural(one, "worker")),
		measured: fmt.Sprintf("%s latency, %s throughput", mdtable.Ratio(lat), mdtable.Ratio(d.rate/g.rate)),
		status:   verdict(lat >= targetNetDupFaster), busy: busyOf(n.cell(rtt, scGenerated, one), n.cell(rtt, scDuplicate, one))}
	faster.why.add("median latency, first delivery / duplicate", "%s / %s", mdtable.Dur(g.p50), mdtable.Dur(d.p50))
	if lat < targetNetDupFaster {
		// Across a network a worker waits its round trips: a first delivery
		// takes g.tripsPerMsg of them, a duplicate d.tripsPerMsg, so the
		// round trips alone give at most their quotient.
		ping := n.ping[rtt]
		faster.why.add("ping", "%s", mdtable.Dur(ping))
		faster.why.add("a first delivery, round trips × ping", "%.2f × %s = %s", g.tripsPerMsg, mdtable.Dur(ping), mdtable.Dur(time.Duration(g.tripsPerMsg*float64(ping))))
		faster.why.add("a duplicate, round trips × ping", "%.2f × %s = %s", d.tripsPerMsg, mdtable.Dur(ping), mdtable.Dur(time.Duration(d.tripsPerMsg*float64(ping))))
		faster.why.add("what the round trips alone allow", "%s", mdtable.Ratio(g.tripsPerMsg/d.tripsPerMsg))
		faster.bound = bound{mdtable.Ratio(g.tripsPerMsg / d.tripsPerMsg), "round trips"}
	}
	t.add(faster)
}

func (r *report) writeNetwork(w writer) {
	n := r.net
	w("## %s\n\n", secNetwork)
	w("The scenarios of [Message delivery](#message-delivery) (%s) again, with the workers' connections reaching PostgreSQL straight through its Unix socket and through a TCP proxy in this process ([`internal/netproxy`](internal/netproxy/)) that holds every chunk of bytes for half the round trip each way before passing it on (bandwidth not limited, order kept), as a network between the application and the database would. ", strings.Join(n.scenarios, ", "))
	w("Each cell ran %d time(s) for %s after a %s warm-up in a fresh schema, the rounds interleaved as above; round trips counted on the wire as above. ", r.cfg.rounds, r.cfg.netDuration, r.cfg.warmup)
	w("**ping** is the median of 200 pings (an empty query) on one connection through the link: what a round trip cost. ")
	w("A worker does at most one message per (round trips × ping); the CPU of a message (client + server) on %d cores bounds all the workers together: on the socket the CPU binds, across a network the round trips do, until enough workers make the CPU bind again.\n\n", n.cores)
	t := cellTable(slices.Concat([]mdtable.Column{mdtable.L("link"), mdtable.R("ping")}, workersScenario), "p50", "p99", "vs hand-written", "vs the socket")
	for _, l := range n.links {
		for _, k := range n.workers {
			hand := n.cell(l.rtt, scHand, k).summary().rate
			for _, name := range n.scenarios {
				s := n.cell(l.rtt, name, k).summary()
				sock := n.cell(0, name, k).summary().rate
				t.Row(slices.Concat([]string{l.name(), mdtable.Dur(n.ping[l.rtt]), mdtable.Int(k), name}, s.cells(2),
					[]string{mdtable.Ratio(s.rate / hand), mdtable.Ratio(s.rate / sock)})...)
			}
		}
	}
	w("%s\n", t)
	w("What bounds the first deliveries, link by link (the lower of the two bounds is the one that binds):\n\n")
	for _, l := range n.links {
		for _, k := range n.workers {
			w("- %s, %d worker(s): %s; %s.\n", l.name(), k, n.bound(l.rtt, scGenerated, k), n.bound(l.rtt, scHand, k))
		}
	}
	w("\n")
	r.writeBehind(w, secNetwork)
}

// latencyBound is what a message of scenario name at workers waits across
// the link rtt at least: its round trips × the link's ping, and its median
// latency on the socket, where the round trips cost nearly nothing. It is 0
// when the socket's cell did not run.
func (r *netResults) latencyBound(rtt time.Duration, name string, workers int) time.Duration {
	c := r.cell(0, name, workers)
	if c == nil || len(c.samples) == 0 {
		return 0
	}
	s := r.cell(rtt, name, workers).summary()
	return time.Duration(s.tripsPerMsg*float64(r.ping[rtt])) + c.summary().p50
}
