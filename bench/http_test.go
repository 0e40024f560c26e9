package main

import (
	"testing"
	"time"
)

// TestHTTPPartTiny runs the HTTP part small (1s cells): every request's
// answer is checked by the part (200, a replay exactly for the replays);
// this checks that idemhttp takes fewer round trips to PostgreSQL a request
// than the hand-written glue, first requests and replays, and that the
// report writes its section.
func TestHTTPPartTiny(t *testing.T) {
	ctx, url := testDB(t, 3*time.Minute)
	cfg := &config{db: url, accounts: 100, rounds: 1, warmup: 200 * time.Millisecond, duration: time.Second}
	res, err := runHTTP(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range httpWorkers {
		for _, name := range httpScenarios {
			s := res.cell(name, n).summary()
			t.Logf("%d client(s), %s: %.0f requests/s, %.2f round trips/request", n, name, s.rate, s.tripsPerMsg)
		}
		for idem, hand := range httpBaseline {
			if a, b := res.cell(idem, n).summary().tripsPerMsg, res.cell(hand, n).summary().tripsPerMsg; a >= b {
				t.Errorf("%d client(s): %s takes %.2f round trips a request, %s %.2f", n, idem, a, hand, b)
			}
		}
	}
	r := &report{cfg: cfg, http: res}
	reportHas(t, []string{"## HTTP", "| 1 | idemhttp + generated wrapper |", "| 16 | idemhttp + generated wrapper, replays |", "docs/http.md#cost"}, r.writeHTTP)
}
