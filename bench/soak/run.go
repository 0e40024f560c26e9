package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idemgen/idemgen/examples/billing"
	"github.com/idemgen/idemgen/idem/idemtest/brokertest"
)

// Hostile payloads: each kind s.o.hostile times, keyed hostile-<kind>-<n>.
const (
	hostileUndecodable = "undecodable"
	hostileOversized   = "oversized"
	hostileReused      = "reused"
)

func hostileKey(kind string, n int) string { return fmt.Sprintf("hostile-%s-%d", kind, n) }

// publishAll publishes the M orders, a share of them 2 or 3 times, in an
// order the seed shuffles (a producer's retry can come late), with the
// undecodable and oversized payloads among them; then, once every order is
// charged, the reused keys: known order ids with another amount.
func (s *soak) publishAll(ctx context.Context) error {
	const batch = 500
	h := s.o.hostile
	seq := make([]int, 0, s.o.messages+s.o.messages/5+2*h)
	injected := 0
	for i := 1; i <= s.o.messages; i++ {
		seq = append(seq, i)
		if s.pubRnd.Float64() < s.o.dupShare {
			extra := 1 + s.pubRnd.IntN(2)
			injected += extra
			for range extra {
				seq = append(seq, i)
			}
		}
	}
	for n := 1; n <= 2*h; n++ {
		seq = append(seq, -n) // -1..-h undecodable, -h-1..-2h oversized
	}
	s.pubRnd.Shuffle(len(seq), func(a, b int) { seq[a], seq[b] = seq[b], seq[a] })
	s.mu.Lock()
	s.injected = injected
	s.mu.Unlock()

	oversized := []byte(`{"order_id":"x","account_id":"acc-00","amount_cents":1,"pad":"` + strings.Repeat("x", 2*maxBody) + `"}`)
	ps := make([]payload, 0, batch)
	flush := func() error {
		if len(ps) == 0 {
			return nil
		}
		if err := s.ctl.publish(ctx, ps); err != nil {
			return fmt.Errorf("publish: %w", err)
		}
		s.mu.Lock()
		s.sent += len(ps)
		s.mu.Unlock()
		ps = ps[:0]
		return nil
	}
	for _, e := range seq {
		switch {
		case e > 0:
			ps = append(ps, payload{key: orderID(e), body: orderBody(e)})
		case -e <= h:
			k := hostileKey(hostileUndecodable, -e)
			ps = append(ps, payload{key: k, body: []byte(`{"order_id": "` + k + `", "amount_cents": 1`)}) // cut short
			s.addHostile(k)
		default:
			k := hostileKey(hostileOversized, -e-h)
			ps = append(ps, payload{key: k, body: oversized})
			s.addHostile(k)
		}
		if len(ps) == batch {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := flush(); err != nil {
		return err
	}
	s.logf("published %d orders (+%d producer retries) and %d undecodable and oversized payloads", s.o.messages, injected, 2*h)

	// Reused keys: only once the original is charged is the second payload
	// the reused one.
	for {
		n, err := s.queryInt(ctx, `SELECT count(*) FROM charges`)
		if err == nil && n >= s.o.messages {
			break
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(500 * time.Millisecond):
		}
	}
	for n := 1; n <= h; n++ {
		i := 1 + s.pubRnd.IntN(s.o.messages)
		k := hostileKey(hostileReused, n)
		body, _ := json.Marshal(billing.OrderPlaced{OrderID: orderID(i), AccountID: accountOf(i), AmountCents: 999_999})
		ps = append(ps, payload{key: k, body: body})
		s.addHostile(k)
	}
	if err := flush(); err != nil {
		return err
	}
	s.logf("published %d payloads that reuse a charged order's key with another amount", h)
	return nil
}

func (s *soak) addHostile(k string) {
	s.mu.Lock()
	s.hostile = append(s.hostile, k)
	s.mu.Unlock()
}

// Fault kinds, as the report counts them.
const (
	faultKillBilling = "SIGKILL billing consumer"
	faultKillNotify  = "SIGKILL notifications consumer"
	faultKillRelay   = "SIGKILL relay"
	faultTerminate   = "pg_terminate_backend (sessions)"
	faultBroker      = "broker connections closed"
	faultPGRestart   = "PostgreSQL stop/start"
	faultFailover    = "PostgreSQL failover"
)

// injectFaults injects a random fault every so often (the seed decides
// which and when) until ctx ends, and restarts PostgreSQL once, when a
// share of the orders (also from the seed) is charged. With -failover it
// also fails PostgreSQL over -failovers times, each when its share of the
// orders is charged: spread between 10% and 85%, from the seed.
func (s *soak) injectFaults(ctx context.Context) {
	pgAt := int(float64(s.o.messages) * (0.3 + 0.3*s.faultRnd.Float64()))
	pgDone := false
	var failAt []int
	if s.o.failover {
		step := 0.75 / float64(s.o.failovers)
		for i := range s.o.failovers {
			failAt = append(failAt, int(float64(s.o.messages)*(0.1+step*(float64(i)+0.2+0.6*s.faultRnd.Float64()))))
		}
	}
	kinds := []string{faultKillBilling, faultKillBilling, faultKillNotify, faultKillRelay, faultKillRelay, faultTerminate, faultTerminate, faultBroker}
	defer s.bg.Wait()
	for {
		wait := time.Duration(float64(s.o.faultEvery) * (0.3 + 1.4*s.faultRnd.Float64()))
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		if len(failAt) > 0 {
			if n, err := s.queryInt(ctx, `SELECT count(*) FROM charges`); err == nil && n >= failAt[0] {
				failAt = failAt[1:]
				s.failover(ctx)
				s.pgFaultsLeft.Add(-1)
				continue
			}
		}
		if !pgDone {
			if n, err := s.queryInt(ctx, `SELECT count(*) FROM charges`); err == nil && n >= pgAt {
				pgDone = true
				s.restartPG()
				s.pgFaultsLeft.Add(-1)
				continue
			}
		}
		kind := kinds[s.faultRnd.IntN(len(kinds))]
		switch kind {
		case faultKillBilling, faultKillNotify, faultKillRelay:
			role := map[string]string{faultKillBilling: roleBilling, faultKillNotify: roleNotify, faultKillRelay: roleRelay}[kind]
			names := s.names(role)
			name := names[s.faultRnd.IntN(len(names))]
			s.kill(name)
			time.Sleep(time.Duration(50+s.faultRnd.IntN(450)) * time.Millisecond)
			s.spawn(role, name)
		case faultTerminate:
			// The children's pools, and the relays' listening connections
			// (named "idem relay <id>").
			n, err := s.queryInt(context.WithoutCancel(ctx),
				`SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
				WHERE application_name LIKE $1 OR application_name LIKE 'idem relay ' || $1) t`, s.end.prefix+" %")
			if err != nil || n == 0 {
				continue
			}
		case faultBroker:
			// rabbitmqctl takes seconds per call: close in the background,
			// and let the other faults go on meanwhile.
			if !s.closing.CompareAndSwap(false, true) {
				continue
			}
			all := append(append(s.names(roleBilling), s.names(roleRelay)...), s.names(roleNotify)...)
			name := all[s.faultRnd.IntN(len(all))]
			s.bg.Add(1)
			go func() {
				defer s.bg.Done()
				defer s.closing.Store(false)
				if n, err := s.closeBrokerConnections(name); err != nil {
					s.logf("close broker connections: %v", err)
				} else if n > 0 {
					s.mu.Lock()
					s.faults[faultBroker]++
					s.brokerConns += n
					s.mu.Unlock()
				}
			}()
			continue
		}
		s.mu.Lock()
		s.faults[kind]++
		s.mu.Unlock()
	}
}

func (s *soak) closeBrokerConnections(name string) (int, error) {
	if s.nats != nil {
		return s.nats.Cut(), nil
	}
	// One process's connections: rabbitmqctl takes seconds a call, and one
	// call per connection of every process would make the fault take minutes.
	var n int
	err := tbCall("soak fault", func(t testing.TB) { n = brokertest.CloseRabbitMQConnections(t, s.end.prefix+" "+name) })
	return n, err
}

// failover fails the soak's pair over and makes a new standby.
func (s *soak) failover(ctx context.Context) {
	primary := s.pg.primary()
	s.logf("fault: PostgreSQL failover: the primary %s stops in immediate mode, its standby is promoted", primary)
	r, err := s.pg.failover(ctx, func() bool {
		n, err := s.queryInt(ctx, `SELECT count(*) FROM charges`)
		return err == nil && n >= s.o.messages
	})
	if err != nil {
		s.logf("failover: %v", err)
		return
	}
	s.logf("fault: failover %d → %d: %s; a new standby built in %v", r.from, r.to, r.resumed(), r.rebuild.Round(time.Millisecond))
	s.mu.Lock()
	s.faults[faultFailover]++
	s.failovers = append(s.failovers, r)
	s.mu.Unlock()
}

func (s *soak) restartPG() {
	pg := s.pg.primary()
	s.logf("fault: PostgreSQL stop")
	if err := pg.Stop(); err != nil {
		s.logf("%v", err)
	}
	time.Sleep(time.Duration(1000+s.faultRnd.IntN(2000)) * time.Millisecond)
	if err := pg.Start(); err != nil {
		s.logf("PostgreSQL does not start again: %v", err)
		return
	}
	s.logf("fault: PostgreSQL started again")
	s.mu.Lock()
	s.faults[faultPGRestart]++
	s.mu.Unlock()
}

// progress is one line of how far the run is.
func (s *soak) progress(ctx context.Context, last *int, lastAt *time.Time) {
	charges, _ := s.queryInt(ctx, `SELECT count(*) FROM charges`)
	notes, _ := s.queryInt(ctx, `SELECT count(*) FROM notifications`)
	pending, _ := s.queryInt(ctx, `SELECT count(*) FROM idem_outbox`)
	s.mu.Lock()
	faults := 0
	for _, n := range s.faults {
		faults += n
	}
	sent := s.sent
	s.mu.Unlock()
	rate := float64(charges-*last) / time.Since(*lastAt).Seconds()
	*last, *lastAt = charges, time.Now()
	b := s.totals(roleBilling)
	s.logf("published %d, charged %d/%d (%.0f/s), outbox pending %d, notified %d, duplicates %d, retried %d, faults %d",
		sent, charges, s.o.messages, rate, pending, notes, b[1], b[2], faults)
}

// waitDone waits until every order is charged and notified, the outbox is
// drained, every hostile payload is dead-lettered and every PostgreSQL
// fault of the plan (the restart, the failovers) is done; it prints
// progress.
func (s *soak) waitDone(ctx context.Context, pubErr <-chan error) error {
	published := false
	last, lastAt := 0, time.Now()
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			s.progress(context.WithoutCancel(ctx), &last, &lastAt)
			return fmt.Errorf("not done within -timeout %v: %w", s.o.timeout, context.Cause(ctx))
		case err := <-pubErr:
			if err != nil {
				return err
			}
			published = true
		case <-tick.C:
			s.progress(ctx, &last, &lastAt)
		case <-time.After(time.Second):
		}
		if !published {
			continue
		}
		charges, err1 := s.queryInt(ctx, `SELECT count(*) FROM charges`)
		notes, err2 := s.queryInt(ctx, `SELECT count(*) FROM notifications`)
		pending, err3 := s.queryInt(ctx, `SELECT count(*) FROM idem_outbox`)
		if errors.Join(err1, err2, err3) != nil || charges < s.o.messages || notes < s.o.messages || pending > 0 {
			continue
		}
		if s.pgFaultsLeft.Load() > 0 {
			continue // the run ends after every PostgreSQL fault it planned
		}
		dl, err := s.ctl.deadLetters(ctx, false)
		if err == nil && len(dl) >= 3*s.o.hostile {
			s.progress(ctx, &last, &lastAt)
			return nil
		}
	}
}

// settle lets what the faults left in flight arrive, then waits until the
// work queues are empty (a stopped consumer's unacked messages are counted
// as left over by the check).
func (s *soak) settle(ctx context.Context) error {
	time.Sleep(3 * time.Second)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		left, err := s.ctl.leftover(ctx)
		if err == nil && len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the work queues are not empty 2 minutes after the last fault: %v (err %v)", left, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
