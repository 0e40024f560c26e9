package main

import (
	"fmt"
	"strings"
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
// 1.5 ms. Each side is the shortest of 50 pings: a loaded machine only ever
// makes a ping longer, and a proxy that adds too much adds it to every ping,
// the shortest too. A machine whose cores are all taken for a while (go
// test runs the other packages beside this one) can lengthen every one of
// 50 pings, so the measurement is taken up to five times, a second apart,
// and the test fails only when none of them is within the bounds.
func TestDelayProxyAddsTheRoundTrip(t *testing.T) {
	ctx, url := testDB(t, time.Minute)
	dial, err := serverDialer(url)
	if err != nil {
		t.Fatal(err)
	}
	p, err := netproxy.Start(dial, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	// A short delay must be near what was asked too: Go's timers alone
	// would make this 250 µs each way a millisecond each way.
	short, err := netproxy.Start(dial, 250*time.Microsecond)
	if err != nil {
		t.Fatal(err)
	}
	defer short.Close()
	shortest := func(via string) time.Duration {
		t.Helper()
		lat, err := pings(ctx, url, via, 50)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("pings via %q: shortest %s, median %s, longest %s", via, lat[0], stats.Percentile(lat, 50), lat[len(lat)-1])
		return lat[0]
	}
	var misses []string
	for attempt := 1; attempt <= 5; attempt++ {
		if attempt > 1 {
			time.Sleep(time.Second)
		}
		straight, proxied, half := shortest(""), shortest(p.Addr()), shortest(short.Addr())
		miss := ""
		if added := proxied - straight; added < 1900*time.Microsecond || added > 3*time.Millisecond {
			miss = fmt.Sprintf("the proxy of 2ms added %s to the shortest round trip (%s → %s), want 1.9 to 3 ms", added, straight, proxied)
		} else if half < 400*time.Microsecond || half > 1500*time.Microsecond {
			miss = fmt.Sprintf("the shortest ping through a proxy of 0.5ms a round trip took %s, want 0.4 to 1.5 ms", half)
		}
		if miss == "" {
			return
		}
		misses = append(misses, fmt.Sprintf("attempt %d: %s", attempt, miss))
	}
	t.Fatalf("no attempt within the bounds:\n%s", strings.Join(misses, "\n"))
}

// TestNetworkPartTiny runs the network part small (one 2 ms link, 1 and 2
// workers, 1s cells) and checks the round trips it counts through the proxy
// (bare 1, generated 2, hand-written 5, duplicate 2 a message, as on the
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
	want := map[string]float64{scBare: 1, scGenerated: 2, scHand: 5, scDuplicate: 2}
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
	checkTargets(t, reportHas(t, []string{"## Over a network", "| 2 ms round trip |", "2 ms round trip: generated ≥ 1.5× hand-written at 2 workers",
		"2 ms round trip: generated ≥ 1.8× hand-written at 1 worker", "2 ms round trip: a first delivery's median ≤ 2.3 round trips", "a duplicate costs ≤ 2 round trips"},
		r.writeTargets, r.writeNetwork))
}
