package main

import (
	"testing"
	"time"

	"github.com/idemgen/idemgen/bench/internal/stats"
	"github.com/idemgen/idemgen/internal/netproxy"
)

// TestDelayProxyAddsTheRoundTrip pings the server on one connection
// straight and through a netproxy.Proxy of 2 ms a round trip: the proxied
// ping must be 2 ms longer than the straight one, within 0.1 ms short (the
// proxy learns how late it wakes and sleeps that much less, but never writes
// a chunk before it is due) and 1 ms long, and through one of 0.5 ms, 0.4 to
// 1.5 ms. Each side is the shortest of 50 pings: a loaded machine (go test
// runs the other packages beside this one) only ever makes a ping longer,
// and a proxy that adds too much adds it to every ping, the shortest too.
func TestDelayProxyAddsTheRoundTrip(t *testing.T) {
	ctx, url := testDB(t, time.Minute)
	dial, err := serverDialer(url)
	if err != nil {
		t.Fatal(err)
	}
	shortest := func(via string) time.Duration {
		t.Helper()
		lat, err := pings(ctx, url, via, 50)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("pings via %q: shortest %s, median %s, longest %s", via, lat[0], stats.Percentile(lat, 50), lat[len(lat)-1])
		return lat[0]
	}
	p, err := netproxy.Start(dial, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	straight, proxied := shortest(""), shortest(p.Addr())
	if added := proxied - straight; added < 1900*time.Microsecond || added > 3*time.Millisecond {
		t.Fatalf("the proxy added %s to the shortest round trip (%s → %s), want 2ms (1.9 to 3 ms)", added, straight, proxied)
	}
	// A short delay must be near what was asked too: Go's timers alone
	// would make this 250 µs each way a millisecond each way.
	short, err := netproxy.Start(dial, 250*time.Microsecond)
	if err != nil {
		t.Fatal(err)
	}
	defer short.Close()
	if half := shortest(short.Addr()); half < 400*time.Microsecond || half > 1500*time.Microsecond {
		t.Fatalf("shortest ping through a proxy of 0.5ms a round trip: %s, want 0.4 to 1.5 ms", half)
	}
}

// TestNetworkPartTiny runs the network part small (one 2 ms link, 1 and 2
// workers, 1s cells) and checks the round trips it counts through the proxy
// (bare 1, generated 3, hand-written 5, duplicate 2 a message, as on the
// socket), that the proxy slows a worker down by its round trips, and that
// the report writes its section and its targets.
func TestNetworkPartTiny(t *testing.T) {
	ctx, url := testDB(t, 3*time.Minute)
	cfg := &config{db: url, accounts: 100, rounds: 1, warmup: 200 * time.Millisecond, netDuration: time.Second, netRTTs: []time.Duration{2 * time.Millisecond}, netWorkers: []int{1, 2}}
	res, err := runNetwork(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, rtt := range []time.Duration{0, 2 * time.Millisecond} {
		for _, name := range netScenarios {
			s := res.cell(rtt, name, 1).summary()
			t.Logf("rtt %s, %s: %.0f msgs/s, p50 %s, %.2f round trips/msg", rtt, name, s.rate, s.p50, s.tripsPerMsg)
		}
	}
	want := map[string]float64{scBare: 1, scGenerated: 3, scHand: 5, scDuplicate: 2}
	for name, trips := range want {
		s := res.cell(2*time.Millisecond, name, 1).summary()
		if s.tripsPerMsg < trips-0.01 || s.tripsPerMsg > trips+0.01 {
			t.Errorf("%s through the proxy: %.2f round trips a message, want %.0f", name, s.tripsPerMsg, trips)
		}
		// One worker through the proxy waits trips × 2ms a message at least.
		if floor := time.Duration(trips) * 2 * time.Millisecond; s.p50 < floor {
			t.Errorf("%s through the proxy: p50 %s, below its %0.f round trips of 2ms", name, s.p50, trips)
		}
	}
	r := &report{cfg: cfg, net: res}
	reportHas(t, []string{"## Over a network", "| 2 ms round trip |", "over the 2 ms round trip: generated ≥ 1.5× hand-written at 1 and at 2 workers", "a duplicate costs ≤ 2 round trips"},
		r.writeTargets, r.writeNetwork)
}
