package main

import (
	"slices"
	"testing"
	"time"

	"github.com/idemgen/idemgen/bench/internal/mdtable"
	"github.com/idemgen/idemgen/bench/internal/stats"
)

// TestEqualTrips checks the verdict of the target "0, 1 and 10 outgoing
// messages cost the same round trips": equal to the second decimal passes, a
// hundredth more fails, and no cells is no proof.
func TestEqualTrips(t *testing.T) {
	cellOf := func(msgs, trips int64) *cell {
		return &cell{samples: []sample{{msgs: msgs, trips: trips, elapsed: time.Second}}}
	}
	if ok, trips := equalTrips([]*cell{cellOf(100, 300), cellOf(50, 150), cellOf(1000, 3001)}); !ok || !slices.Equal(trips, []float64{3, 3, 3.001}) {
		t.Fatalf("3, 3 and 3.001 round trips: equal %v, %v; want equal", ok, trips)
	}
	if ok, _ := equalTrips([]*cell{cellOf(100, 300), cellOf(100, 301)}); ok {
		t.Fatal("3.00 and 3.01 round trips counted as equal")
	}
	if ok, _ := equalTrips(nil); ok {
		t.Fatal("no cells counted as equal round trips")
	}
}

// TestPooledRelayRate checks that the relay throughput pools rows over time,
// not the rates of the rounds.
func TestPooledRelayRate(t *testing.T) {
	runs := []relayRun{{rows: 10000, elapsed: time.Second}, {rows: 10000, elapsed: 3 * time.Second}}
	if got := pooledRelayRate(runs); got != 5000 {
		t.Fatalf("pooled rate %v, want 5000 (20,000 rows in 4s)", got)
	}
	if got := pooledRelayRate(nil); got != 0 {
		t.Fatalf("pooled rate of no run %v, want 0", got)
	}
	if got := (relayRun{rows: 500, elapsed: 250 * time.Millisecond}).rate(); got != 2000 {
		t.Fatalf("rate %v, want 2000", got)
	}
}

// TestPooledLatencies checks that the latencies of the rounds are merged and
// sorted before the percentiles are read.
func TestPooledLatencies(t *testing.T) {
	got := pooledLatencies([]latencyRun{{lat: []time.Duration{5, 1}}, {lat: []time.Duration{3, -1}}})
	if !slices.Equal(got, []time.Duration{-1, 1, 3, 5}) {
		t.Fatalf("pooled %v, want [-1 1 3 5]", got)
	}
	if p := stats.Percentile(got, 50); p != 1 {
		t.Fatalf("p50 %v, want 1", p)
	}
}

// TestOutboxNames checks the names the outbox tables and the log use.
func TestOutboxNames(t *testing.T) {
	var names []string
	for _, v := range obxVariants {
		names = append(names, v.name())
	}
	want := []string{"0 messages", "1 message", "10 messages", "1 message, WithoutNotify", "10 messages, WithoutNotify"}
	if !slices.Equal(names, want) {
		t.Fatalf("variants %q, want %q", names, want)
	}
	for _, c := range []struct {
		x    float64
		want string
	}{{1.954, "1.95×"}, {2241.25, "2241×"}} {
		if got := mdtable.Ratio(c.x); got != c.want {
			t.Errorf("mdtable.Ratio(%v) = %q, want %q", c.x, got, c.want)
		}
	}
	if roundUp(20001, 10) != 20010 || roundUp(20000, 10) != 20000 {
		t.Errorf("roundUp: %d, %d", roundUp(20001, 10), roundUp(20000, 10))
	}
	if plural(1, "worker") != "worker" || plural(16, "worker") != "workers" {
		t.Error("plural")
	}
}
