package main

import (
	"testing"
	"time"

	"github.com/idemgen/idemgen/bench/internal/stats"
)

// TestPurgePartTiny runs the purge part small: 20,000 expired rows, 4
// workers, a 300ms baseline. It checks what the part itself checks (every
// expired row purged, every other row kept) and that the report writes its
// section and its targets.
func TestPurgePartTiny(t *testing.T) {
	ctx, url := testDB(t, 2*time.Minute)
	cfg := &config{db: url, accounts: 100, purgeRows: 20000, purgeWorkers: 4, purgeBaseline: 300 * time.Millisecond}
	res, err := runPurge(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("purged %d in %s (%d statements, longest %s); p99 %s without, %s during; %d samples, waits on the janitor %d, of the janitor %d",
		res.purged, res.purgeTook, res.report.Statements, res.report.Longest, stats.Percentile(res.without, 99), stats.Percentile(res.during, 99), res.samples, res.blockSeen, res.waitSeen)
	if res.purged != 20000 || len(res.without) == 0 || len(res.during) == 0 || res.report.Statements < 20 {
		t.Fatalf("purged %d, %d and %d deliveries, %d statements", res.purged, len(res.without), len(res.during), res.report.Statements)
	}
	r := &report{cfg: cfg, purge: res}
	checkTargets(t, reportHas(t, []string{"## Purge under load", "no unexpired row deleted", "| during the purge |", "| [met](#purge-under-load) |",
		"### Behind the targets: Purge under load", "### Behind the targets: Purging by dropping partitions"}, r.writeTargets, r.writePurge))
}
