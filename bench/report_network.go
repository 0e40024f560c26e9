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
	targetNetVsHand    = 1.5
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
	var ratios []string
	met := true
	var bounds []string
	var cells []*cell
	for _, k := range []int{one, many} {
		cells = append(cells, n.cell(rtt, scGenerated, k), n.cell(rtt, scHand, k))
		g, h := n.cell(rtt, scGenerated, k).summary(), n.cell(rtt, scHand, k).summary()
		q := g.rate / h.rate
		ratios = append(ratios, mdtable.Ratio(q)+" at "+mdtable.Int(k))
		if q < targetNetVsHand {
			met = false
			bounds = append(bounds, "at "+mdtable.Int(k)+": "+n.bound(rtt, scGenerated, k)+"; "+n.bound(rtt, scHand, k))
		}
		if k == many {
			break
		}
	}
	why := ""
	if !met {
		why = "; " + strings.Join(bounds, "; ")
	}
	t.line(verdict(met), fmt.Sprintf("over the %s: generated ≥ %.1f× hand-written at %d and at %d workers", link, targetNetVsHand, one, many),
		strings.Join(ratios, ", ")+" ([below](#over-a-network))"+why, busyOf(cells...)...)
	d := n.cell(rtt, scDuplicate, one).summary()
	g := n.cell(rtt, scGenerated, one).summary()
	t.line(verdict(d.tripsPerMsg <= targetNetDupTrips+0.005), fmt.Sprintf("over the %s: a duplicate costs ≤ %.0f round trips", link, targetNetDupTrips),
		fmt.Sprintf("%.2f at %d worker, %.2f at %d", d.tripsPerMsg, one, n.cell(rtt, scDuplicate, many).summary().tripsPerMsg, many),
		busyOf(n.cell(rtt, scDuplicate, one), n.cell(rtt, scDuplicate, many))...)
	lat := float64(g.p50) / float64(d.p50)
	dupWhy := ""
	if lat < targetNetDupFaster {
		// Across a network a worker waits its round trips: a first
		// delivery takes g.tripsPerMsg of them, a duplicate d.tripsPerMsg,
		// so the round trips alone give at most their quotient.
		dupWhy = fmt.Sprintf("; bounded by the round trips: a first delivery waits %.2f of them (%s at a ping of %s), a duplicate %.2f (%s): "+
			"at most %s by the round trips alone, the rest is the commit's WAL flush and the handler's CPU, which a duplicate skips",
			g.tripsPerMsg, mdtable.Dur(time.Duration(g.tripsPerMsg*float64(n.ping[rtt]))), mdtable.Dur(n.ping[rtt]),
			d.tripsPerMsg, mdtable.Dur(time.Duration(d.tripsPerMsg*float64(n.ping[rtt]))), mdtable.Ratio(g.tripsPerMsg/d.tripsPerMsg))
	}
	t.line(verdict(lat >= targetNetDupFaster), fmt.Sprintf("over the %s: a duplicate ≥ %.0f× faster than a first delivery at %d worker", link, targetNetDupFaster, one),
		fmt.Sprintf("median latency %s / %s = %s; throughput %s%s", mdtable.Dur(g.p50), mdtable.Dur(d.p50), mdtable.Ratio(lat), mdtable.Ratio(d.rate/g.rate), dupWhy),
		busyOf(n.cell(rtt, scGenerated, one), n.cell(rtt, scDuplicate, one))...)
}

func (r *report) writeNetwork(w writer) {
	n := r.net
	w("## Over a network\n\n")
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
}
