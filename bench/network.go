package main

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemgen/idemgen/bench/internal/mdtable"
	"github.com/idemgen/idemgen/bench/internal/stats"
	"github.com/idemgen/idemgen/internal/netproxy"
)

// The network part: the delivery scenarios (bare, hand-written, generated,
// duplicates) again, with the workers' connections going to PostgreSQL
// straight through its socket and through a netproxy.Proxy that adds a fixed
// delay each way, for each round trip of -netrtt. Over the socket a round
// trip costs almost nothing, so every scenario is bound by CPU; across a
// network the round trips a message takes bound a worker's rate (at most
// one message per trips×RTT), which is where the wrapper's 2 round trips
// against the hand-written inbox's 5 show.

// netLink is one way to reach the server: rtt 0 is the socket.
type netLink struct {
	rtt time.Duration
}

func (l netLink) name() string {
	if l.rtt == 0 {
		return "socket"
	}
	return mdtable.Dur(l.rtt) + " round trip"
}

type netKey struct {
	link     time.Duration
	scenario string
	workers  int
}

// netResults are the cells of the network part.
type netResults struct {
	links     []netLink
	workers   []int
	scenarios []string
	cells     map[netKey]*cell
	// ping is the median of a Ping (one empty query, one round trip) on
	// one connection through each link, measured before its cells.
	ping  map[time.Duration]time.Duration
	cores int
}

func (r *netResults) cell(rtt time.Duration, name string, workers int) *cell {
	return r.cells[netKey{rtt, name, workers}]
}

// netScenarios are the scenarios of the network part, in table order.
var netScenarios = []string{scBare, scHand, scGenerated, scDuplicate}

// runNetwork runs every scenario of netScenarios at every link and
// concurrency, cfg.rounds times, the scenarios rotating within a round as
// the db part's do.
func runNetwork(ctx context.Context, cfg *config) (*netResults, error) {
	res := &netResults{workers: cfg.netWorkers, scenarios: netScenarios, cells: map[netKey]*cell{}, ping: map[time.Duration]time.Duration{}, cores: runtime.NumCPU()}
	res.links = append(res.links, netLink{})
	for _, rtt := range cfg.netRTTs {
		res.links = append(res.links, netLink{rtt: rtt})
	}
	byName := map[string]scenario{}
	for _, sc := range goScenarios() {
		byName[sc.name] = sc
	}
	for _, l := range res.links {
		for _, n := range res.workers {
			for _, name := range res.scenarios {
				res.cells[netKey{l.rtt, name, n}] = &cell{}
			}
		}
	}
	dial, err := serverDialer(cfg.db)
	if err != nil {
		return nil, err
	}
	proxies := map[time.Duration]*netproxy.Proxy{}
	defer func() {
		for _, p := range proxies {
			p.Close()
		}
	}()
	for _, l := range res.links {
		if l.rtt == 0 {
			continue
		}
		if proxies[l.rtt], err = netproxy.Start(dial, l.rtt/2); err != nil {
			return nil, err
		}
	}
	for _, l := range res.links {
		via := ""
		if p := proxies[l.rtt]; p != nil {
			via = p.Addr()
		}
		if res.ping[l.rtt], err = medianPing(ctx, cfg.db, via, 200); err != nil {
			return nil, fmt.Errorf("ping through %s: %w", l.name(), err)
		}
		logf("network: %s, median ping %s", l.name(), mdtable.Dur(res.ping[l.rtt]))
	}

	total := cfg.rounds * len(res.links) * len(res.workers) * len(res.scenarios)
	done := 0
	for round := range cfg.rounds {
		for li, l := range res.links {
			via := ""
			if p := proxies[l.rtt]; p != nil {
				via = p.Addr()
			}
			for wi, n := range res.workers {
				for i := range res.scenarios {
					name := res.scenarios[(i+round+li+wi)%len(res.scenarios)]
					done++
					logf("network %d/%d: round %d, %s, %d worker(s), %s", done, total, round+1, l.name(), n, name)
					smp, err := runGoCellVia(ctx, cfg, byName[name], n, via, cfg.netDuration)
					if err != nil {
						return nil, fmt.Errorf("network round %d, %s, %d worker(s), %s: %w", round+1, l.name(), n, name, err)
					}
					logf("    %.0f msgs/s, %.2f round trips/msg", smp.rate(), float64(smp.trips)/float64(max(smp.msgs, 1)))
					c := res.cell(l.rtt, name, n)
					c.samples = append(c.samples, smp)
					select {
					case <-ctx.Done():
						return nil, ctx.Err()
					case <-time.After(200 * time.Millisecond):
					}
				}
			}
		}
	}
	return res, nil
}

// medianPing opens one connection (through the proxy at via, if set) and
// returns the median of n pings.
func medianPing(ctx context.Context, dbURL, via string, n int) (time.Duration, error) {
	lat, err := pings(ctx, dbURL, via, n)
	if err != nil {
		return 0, err
	}
	return stats.Percentile(lat, 50), nil
}

// pings opens one connection (through the proxy at via, if set) and returns
// the round trips of n pings on it, shortest first.
func pings(ctx context.Context, dbURL, via string, n int) ([]time.Duration, error) {
	s := &schema{name: "public", base: dbURL, via: via}
	pool, _, err := s.pool(ctx, 1)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Release()
	lat := make([]time.Duration, 0, n)
	for range n {
		t0 := time.Now()
		if err := conn.Conn().Ping(ctx); err != nil {
			return nil, err
		}
		lat = append(lat, time.Since(t0))
	}
	slices.Sort(lat)
	return lat, nil
}

// linkBound is what bounds a cell's rate across a link: the round trips (a
// worker does at most one message per trips × ping) or the CPU (the
// machine's cores over the CPU time of a message, client and server).
type linkBound struct {
	name               string
	workers, cores     int
	s                  summary
	ping, tripsTime    time.Duration
	byTrips, byCPU     float64 // msgs/s
	binding, bindLabel string  // what binds, in a sentence and in a label
}

func (r *netResults) bound(rtt time.Duration, name string, workers int) linkBound {
	s := r.cell(rtt, name, workers).summary()
	b := linkBound{name: name, workers: workers, cores: r.cores, s: s, ping: r.ping[rtt]}
	b.tripsTime = time.Duration(s.tripsPerMsg * float64(b.ping))
	b.byTrips = float64(workers) / b.tripsTime.Seconds()
	b.byCPU = float64(r.cores) / cpuPerMsg(s).Seconds()
	b.binding, b.bindLabel = "the round trips", "round trips"
	if b.byCPU < b.byTrips {
		b.binding, b.bindLabel = "CPU", "CPU a message"
	}
	return b
}

// most is the rate the lower of the two bounds allows.
func (b linkBound) most() float64 { return min(b.byTrips, b.byCPU) }

func (b linkBound) String() string {
	return fmt.Sprintf("%s bounded by %s (%.2f round trips × %s = %s a message per worker: at most %s msgs/s at %d; CPU %s a message, client + server, on %d cores: at most %s msgs/s; measured %s msgs/s, the machine %.0f%% busy)",
		b.name, b.binding, b.s.tripsPerMsg, mdtable.Dur(b.ping), mdtable.Dur(b.tripsTime), mdtable.Thousands(b.byTrips), b.workers, mdtable.Dur(cpuPerMsg(b.s)), b.cores,
		mdtable.Thousands(b.byCPU), mdtable.Thousands(b.s.rate), 100*b.s.busy)
}

// facts are the bound's numbers, each with its label.
func (b linkBound) facts() facts {
	var f facts
	at := fmt.Sprintf("%s at %d %s", b.name, b.workers, plural(b.workers, "worker"))
	f.add(at+", round trips a message × ping", "%.2f × %s = %s", b.s.tripsPerMsg, mdtable.Dur(b.ping), mdtable.Dur(b.tripsTime))
	f.add(at+", what the round trips allow", "%s msgs/s", mdtable.Thousands(b.byTrips))
	f.add(at+", CPU a message, client + server", "%s", mdtable.Dur(cpuPerMsg(b.s)))
	f.add(fmt.Sprintf("%s, what %d cores allow", at, b.cores), "%s msgs/s", mdtable.Thousands(b.byCPU))
	f.add(at+", measured", "%s msgs/s, the machine %s busy", mdtable.Thousands(b.s.rate), mdtable.Percent(b.s.busy))
	f.add(at+", bounded by", "%s", b.binding)
	return f
}

// serverDialer returns a dialer of the server that the database URL names,
// as pgx reaches it: its Unix socket, or host:port over TCP. The proxies of
// the network part dial the server with it, so that the server sees the same
// kind of connection as from the other parts and pg_hba.conf need not allow
// TCP.
func serverDialer(dbURL string) (netproxy.DialFunc, error) {
	cfg, err := pgconn.ParseConfig(dbURL)
	if err != nil {
		return nil, err
	}
	network, address := "tcp", net.JoinHostPort(cfg.Host, fmt.Sprint(cfg.Port))
	if strings.HasPrefix(cfg.Host, "/") {
		network, address = "unix", fmt.Sprintf("%s/.s.PGSQL.%d", cfg.Host, cfg.Port)
	}
	var d net.Dialer
	return func(ctx context.Context) (net.Conn, error) { return d.DialContext(ctx, network, address) }, nil
}
