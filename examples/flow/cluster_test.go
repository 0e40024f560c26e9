package main

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/idemgen/idemgen/idem/idemtest"
	"github.com/idemgen/idemgen/idem/idemtest/brokertest"
)

// clusterOrders is how many orders the cluster test publishes: enough for
// the flow to run well past the election of new leaders.
const clusterOrders = 1500

// progress samples a count over time.
type progress struct {
	mu      sync.Mutex
	at      []time.Time
	counts  []int
	samples func() (int, error)
}

func (p *progress) sample(now time.Time) error {
	n, err := p.samples()
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.counts) == 0 || n != p.counts[len(p.counts)-1] {
		p.at, p.counts = append(p.at, now), append(p.counts, n)
	}
	return nil
}

// pause is the longest time the count did not move, among the moves from
// the last one before from to the one that reached total; start and end
// are when that pause began and ended.
func (p *progress) pause(from time.Time, total int) (longest time.Duration, start, end time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	first := 0
	for i, t := range p.at {
		if t.Before(from) {
			first = i
		}
	}
	for i := first + 1; i < len(p.at); i++ {
		if gap := p.at[i].Sub(p.at[i-1]); gap > longest {
			longest, start, end = gap, p.at[i-1], p.at[i]
		}
		if p.counts[i] >= total {
			break
		}
	}
	return longest, start, end
}

// count is the count at t.
func (p *progress) count(t time.Time) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for i, at := range p.at {
		if at.After(t) {
			break
		}
		n = p.counts[i]
	}
	return n
}

// TestFlowJetStreamClusterLeaderKilled runs the flow on a JetStream cluster
// of three nats-server processes (built from the Go module), its streams
// and durable consumers replicated on all three. One server leads both
// streams and both consumers; it is killed with SIGKILL while orders are
// being charged and ChargeCompleted relayed. The other two elect new
// leaders, the clients on the dead server reconnect to them, and the flow
// ends exact: each order charged once, relayed once, notified once, nothing
// left over. Redeliveries of messages whose ack the dead leader lost are
// Duplicates. The test logs how long the flow stalled.
func TestFlowJetStreamClusterLeaderKilled(t *testing.T) {
	cluster, err := brokertest.StartNATSCluster(3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cluster.Stop(); err != nil {
			t.Error(err)
		}
	})
	ctx := context.Background()
	id := unique()
	logw := idemtest.LogWriter(t)
	log := slog.New(slog.NewTextHandler(logw, &slog.HandlerOptions{Level: slog.LevelWarn}))
	e := Endpoint{Broker: "jetstream", URL: cluster.URL(), Prefix: "flow-cluster-" + id, Replicas: 3}
	f, err := Open(ctx, idemtest.DatabaseURL(t), "flow_test_"+id, e, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.Close(); err != nil {
			t.Error(err)
		}
	})
	j := f.Broker.(*jetStream)

	// One server leads everything the flow goes through: killing it takes
	// away the leader of the stream the relay publishes to and of the
	// stream the billing consumer reads, and of both durable consumers.
	const victim = "n1"
	for _, top := range [][2]string{{j.orders.Stream, j.orders.Consumer}, {j.notes.Stream, j.notes.Consumer}} {
		if err := brokertest.MoveLeaders(ctx, j.nc, j.js, victim, top[0], top[1]); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.PublishOrders(ctx, clusterOrders, 1); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d orders stored in %s (3 replicas); %s leads both streams and both consumers; the clients are connected to %s",
		clusterOrders, j.orders.Stream, victim, j.nc.ConnectedServerName())

	charges := &progress{samples: func() (int, error) { return queryInt(ctx, f.Pool, `SELECT count(*) FROM charges`) }}
	relayed := &progress{samples: func() (int, error) { return int(f.relayed.Load()), nil }}
	notes := &progress{samples: func() (int, error) { return queryInt(ctx, f.Pool, `SELECT count(*) FROM notifications`) }}
	type result struct {
		c   Counts
		err error
	}
	done := make(chan result, 1)
	start := time.Now()
	go func() {
		c, err := f.Process(ctx, Expect{Orders: clusterOrders, BillingProcessed: clusterOrders, Redeliveries: true}, 5*time.Minute)
		done <- result{c, err}
	}()

	var killedAt time.Time
	var res result
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
sample:
	for {
		select {
		case res = <-done:
			break sample
		case now := <-tick.C:
			for _, p := range []*progress{charges, relayed, notes} {
				if err := p.sample(now); err != nil {
					t.Fatal(err)
				}
			}
			if killedAt.IsZero() && notes.count(now) >= clusterOrders/4 {
				if err := cluster.Kill(cluster.Node(victim)); err != nil {
					t.Fatal(err)
				}
				killedAt = time.Now()
				t.Logf("killed %s (SIGKILL) after %v: %d charges, %d notifications so far", victim, killedAt.Sub(start).Round(time.Millisecond),
					charges.count(now), notes.count(now))
			}
		}
	}
	c, err := res.c, res.err
	t.Logf("counts: %s", c.Line(1))
	if err != nil {
		t.Fatal(err)
	}
	if killedAt.IsZero() {
		t.Fatal("the flow ended before the leader was killed: publish more orders")
	}
	want := Counts{Published: clusterOrders, Charges: clusterOrders, Relayed: clusterOrders, Notifications: clusterOrders,
		BillingDuplicates: c.BillingDuplicates, NotificationDuplicates: c.NotificationDuplicates}
	if c != want {
		t.Fatalf("counts %+v; want %+v", c, want)
	}

	leaders := map[string]string{}
	for _, top := range [][2]string{{j.orders.Stream, j.orders.Consumer}, {j.notes.Stream, j.notes.Consumer}} {
		l, err := brokertest.LeadersOf(ctx, j.js, top[0], top[1])
		if err != nil {
			t.Fatal(err)
		}
		for what, server := range l {
			if server == victim || server == "" {
				t.Errorf("%s is led by %q after %s died", what, server, victim)
			}
			leaders[what] = server
		}
	}
	for _, s := range []struct {
		name string
		p    *progress
	}{
		{"charges (the billing consumer, from the orders stream)", charges},
		{"ChargeCompleted relayed (the relay, to the charge-completed stream)", relayed},
		{"notifications (the notifications consumer, from the charge-completed stream)", notes},
	} {
		longest, from, to := s.p.pause(killedAt, clusterOrders)
		t.Logf("%s: longest pause %v, from %s to %s after the kill", s.name, longest.Round(time.Millisecond), since(from, killedAt), since(to, killedAt))
	}
	t.Logf("new leaders: %v; the clients reconnected to %s; whole run %v", leaders, j.nc.ConnectedServerName(), time.Since(start).Round(time.Millisecond))
}

// since writes t relative to ref: +1.2s, -40ms.
func since(t, ref time.Time) string {
	d := t.Sub(ref).Round(time.Millisecond)
	if d >= 0 {
		return fmt.Sprintf("+%v", d)
	}
	return d.String()
}
