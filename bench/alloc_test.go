package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestAllocPartTiny runs the alloc part with a short -benchtime: the
// benchmarks of bench/ledger report their allocations, and the profile of
// the generated wrapper's first deliveries attributes allocations to the
// runtime and to pgx. It fails when the profile's focus no longer names the
// method deliveries go through (the part then reports nothing).
func TestAllocPartTiny(t *testing.T) {
	ctx, url := testDB(t, 5*time.Minute)
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	res, err := runAlloc(ctx, &config{db: url, root: root, benchTime: "20x"})
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, b := range res.benches {
		names[b.name] = true
	}
	if !names["Generated"] {
		t.Errorf("no BenchmarkGenerated line among %v", res.benches)
	}
	var runtime, pgx float64
	for _, s := range res.bySource {
		switch {
		case strings.HasPrefix(s.name, "packages idem and idem/idemimpl"):
			runtime += s.allocs
		case strings.HasPrefix(s.name, "pgx"):
			pgx += s.allocs
		}
	}
	if runtime <= 0 || pgx <= 0 {
		t.Errorf("allocations a delivery: runtime %.1f, pgx %.1f, want both > 0; by source: %v", runtime, pgx, res.bySource)
	}
}
