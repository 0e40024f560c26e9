package main

import (
	"fmt"
	"slices"
	"strings"
	"time"
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
func (r *report) netTargets(w writer) {
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
	for _, k := range []int{one, many} {
		g, h := n.cell(rtt, scGenerated, k).summary(), n.cell(rtt, scHand, k).summary()
		q := g.rate / h.rate
		ratios = append(ratios, ratio(q)+" at "+itoa(k))
		if q < targetNetVsHand {
			met = false
			bounds = append(bounds, "at "+itoa(k)+": "+n.bound(rtt, scGenerated, k)+"; "+n.bound(rtt, scHand, k))
		}
		if k == many {
			break
		}
	}
	why := ""
	if !met {
		why = "; " + joinSemi(bounds)
	}
	w("| over the %s: generated ≥ %.1f× hand-written at %d and at %d workers | %s ([below](#over-a-network))%s | %s |\n",
		link, targetNetVsHand, one, many, joinSlash(ratios), why, verdict(met))
	d := n.cell(rtt, scDuplicate, one).summary()
	g := n.cell(rtt, scGenerated, one).summary()
	w("| over the %s: a duplicate costs ≤ %.0f round trips | %.2f at %d worker, %.2f at %d | %s |\n",
		link, targetNetDupTrips, d.tripsPerMsg, one, n.cell(rtt, scDuplicate, many).summary().tripsPerMsg, many, verdict(d.tripsPerMsg <= targetNetDupTrips+0.005))
	lat := float64(g.p50) / float64(d.p50)
	dupWhy := ""
	if lat < targetNetDupFaster {
		// Across a network a worker waits its round trips: a first
		// delivery takes g.tripsPerMsg of them, a duplicate d.tripsPerMsg,
		// so the round trips alone give at most their quotient.
		dupWhy = fmt.Sprintf("; bounded by the round trips: a first delivery waits %.2f of them (%s at a ping of %s), a duplicate %.2f (%s): "+
			"at most %s by the round trips alone, the rest is the commit's WAL flush and the handler's CPU, which a duplicate skips",
			g.tripsPerMsg, dur(time.Duration(g.tripsPerMsg*float64(n.ping[rtt]))), dur(n.ping[rtt]),
			d.tripsPerMsg, dur(time.Duration(d.tripsPerMsg*float64(n.ping[rtt]))), ratio(g.tripsPerMsg/d.tripsPerMsg))
	}
	w("| over the %s: a duplicate ≥ %.0f× faster than a first delivery at %d worker | median latency %s / %s = %s; throughput %s%s | %s |\n",
		link, targetNetDupFaster, one, dur(g.p50), dur(d.p50), ratio(lat), ratio(d.rate/g.rate), dupWhy, verdict(lat >= targetNetDupFaster))
}

func (r *report) writeNetwork(w writer) {
	n := r.net
	w("## Over a network\n\n")
	w("The scenarios of [Message delivery](#message-delivery) (%s) again, with the workers' connections reaching PostgreSQL straight through its Unix socket and through a TCP proxy in this process ([`bench/netproxy.go`](bench/netproxy.go)) that holds every chunk of bytes for half the round trip each way before passing it on (bandwidth not limited, order kept), as a network between the application and the database would. ", joinComma(n.scenarios))
	w("Each cell ran %d time(s) for %s after a %s warm-up in a fresh schema, the rounds interleaved as above; round trips counted on the wire as above. ", r.cfg.rounds, r.cfg.netDuration, r.cfg.warmup)
	w("**ping** is the median of 200 pings (an empty query) on one connection through the link: what a round trip cost. ")
	w("A worker does at most one message per (round trips × ping); the CPU of a message (client + server) on %d cores bounds all the workers together: on the socket the CPU binds, across a network the round trips do, until enough workers make the CPU bind again.\n\n", n.cores)
	w("| link | ping | workers | scenario | msgs/s | p50 | p99 | round trips/msg | client CPU/msg | server CPU/msg | busy | vs hand-written | vs the socket |\n")
	w("| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, l := range n.links {
		for _, k := range n.workers {
			hand := n.cell(l.rtt, scHand, k).summary().rate
			for _, name := range n.scenarios {
				s := n.cell(l.rtt, name, k).summary()
				sock := n.cell(0, name, k).summary().rate
				w("| %s | %s | %d | %s | %s | %s | %s | %.2f | %s | %s | %.0f%% | %s | %s |\n", l.name(), dur(n.ping[l.rtt]), k, name,
					thousands(s.rate), dur(s.p50), dur(s.p99), s.tripsPerMsg, dur(s.clientCPU), serverDur(s), 100*s.busy, ratio(s.rate/hand), ratio(s.rate/sock))
			}
		}
	}
	w("\n")
	w("What bounds the first deliveries, link by link (the lower of the two bounds is the one that binds):\n\n")
	for _, l := range n.links {
		for _, k := range n.workers {
			w("- %s, %d worker(s): %s; %s.\n", l.name(), k, n.bound(l.rtt, scGenerated, k), n.bound(l.rtt, scHand, k))
		}
	}
	w("\n")
}

func itoa(n int) string { return thousands(float64(n)) }

func joinSlash(parts []string) string { return strings.Join(parts, ", ") }
func joinSemi(parts []string) string  { return strings.Join(parts, "; ") }
func joinComma(parts []string) string { return strings.Join(parts, ", ") }
