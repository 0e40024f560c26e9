package main

import (
	"fmt"

	"github.com/idemgen/idemgen/bench/internal/mdtable"
)

// httpBaseline is what each HTTP scenario is compared with: the same
// requests through the hand-written glue.
var httpBaseline = map[string]string{
	scHTTPIdem:       scHTTPHand,
	scHTTPIdemReplay: scHTTPHandReplay,
}

func (r *report) writeHTTP(w writer) {
	cfg := r.cfg
	w("## HTTP\n\n")
	w("The consumer of [`bench/ledger`](bench/ledger/) behind an HTTP endpoint on loopback: each request a JSON deposit (`POST`, keyed by its `message_id`), sent by net/http clients with keep-alive, answered as JSON. Two servers:\n\n")
	w("- **%s**: a plain `net/http` handler that decodes the body, calls `ledger.HandWritten` (one statement per round trip) and writes the result, `Idempotent-Replayed` on a duplicate;\n", scHTTPHand)
	w("- **%s**: `idemhttp.Handler(ledger.NewPostIdem(pool))`.\n\n", scHTTPIdem)
	w("The replay rows send only requests the server answered before (%d, sent before the warm-up). "+
		"Cells as in the message delivery table: %s after a %s warm-up, %d round(s), the scenarios in a rotating order, a fresh schema per cell, a pool of as many connections as clients, round trips to PostgreSQL counted on the wire. "+
		"Client and server run in one process, so **CPU/req** is both.\n\n",
		duplicateKeys, cfg.duration, cfg.warmup, cfg.rounds)
	t := mdtable.New(mdtable.L("clients"), mdtable.L("scenario"), mdtable.L("requests/s"), mdtable.L("p50"), mdtable.L("p99"),
		mdtable.L("round trips/req"), mdtable.L("CPU/req"), mdtable.L("server CPU/req"), mdtable.L("vs net/http + hand-written"))
	for _, n := range httpWorkers {
		for _, name := range httpScenarios {
			c := r.http.cell(name, n)
			if c == nil {
				continue
			}
			s := c.summary()
			server := "n/a"
			if s.serverCPU >= 0 {
				server = mdtable.Dur(s.serverCPU)
			}
			vs := ""
			if base := r.http.cell(httpBaseline[name], n); base != nil {
				vs = fmt.Sprintf("%.2f×", s.rate/base.summary().rate)
			}
			t.Row(mdtable.Int(n), name, fmt.Sprintf("%.0f", s.rate), mdtable.Dur(s.p50), mdtable.Dur(s.p99), fmt.Sprintf("%.2f", s.tripsPerMsg),
				mdtable.Dur(s.clientCPU), server, vs)
		}
	}
	w("%s", t)
	w("\nSee [docs/http.md](docs/http.md#cost) for what the front door adds to a request.\n\n")
}
