package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/idemgen/idemgen/idem"
)

// check runs the final checks and returns the report; ok is false when any
// check failed (the report names the offending keys).
func (s *soak) check(ctx context.Context) (report string, ok bool, err error) {
	var b strings.Builder
	ok = true
	m := s.o.messages
	line := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	verdict := func(pass bool) string {
		if pass {
			return "ok"
		}
		ok = false
		return "FAIL"
	}
	count := func(sql string, args ...any) int {
		n, qerr := s.queryInt(ctx, sql, args...)
		if qerr != nil && err == nil {
			err = fmt.Errorf("%s: %w", sql, qerr)
		}
		return n
	}
	keys := func(sql string, args ...any) []string {
		k, qerr := s.queryKeys(ctx, sql+" LIMIT 20", args...)
		if qerr != nil && err == nil {
			err = fmt.Errorf("%s: %w", sql, qerr)
		}
		return k
	}
	offending := func(what string, k []string) {
		if len(k) > 0 {
			line("    offending %s (first %d): %s", what, len(k), strings.Join(k, " "))
		}
	}

	// Fresh statistics: the tables grew from empty during the run.
	if _, aerr := s.pool.Exec(ctx, `ANALYZE`); aerr != nil {
		return "", false, aerr
	}
	host, _ := os.Hostname()
	var pgVersion string
	_ = s.pool.QueryRow(ctx, `SHOW server_version`).Scan(&pgVersion)
	s.mu.Lock()
	injected, sent, hostile, conns, failovers := s.injected, s.sent, slices.Clone(s.hostile), s.brokerConns, slices.Clone(s.failovers)
	faults := map[string]int{}
	for k, v := range s.faults {
		faults[k] = v
	}
	s.mu.Unlock()
	bt, nt, rt := s.totals(roleBilling), s.totals(roleNotify), s.totals(roleRelay)

	title := fmt.Sprintf("%s, seed %d", s.o.broker, s.o.seed)
	if s.o.failover {
		title += ", with failovers"
	}
	line("## soak report: %s", title)
	line("")
	pgKind := "throwaway cluster"
	if s.o.failover {
		pgKind = "throwaway primary and synchronous standby, reached through their multi-host URL"
	}
	line("machine: %s, %d CPUs, %s/%s, %s; PostgreSQL %s (%s); processes: %d billing, %d relays, %d notifications",
		host, runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version(), pgVersion, pgKind, s.o.billing, s.o.relays, s.o.notify)
	line("duration: %s", time.Since(s.started).Round(100*time.Millisecond))
	line("messages: M = %d distinct orders; %d published in all (%d producer retries: %.1f%% of orders sent 2-3 times; %d hostile)",
		m, sent, injected, 100*s.o.dupShare, len(hostile))
	line("")
	line("```")
	charges := count(`SELECT count(*) FROM charges`)
	line("business effects (charges)          %9d  want %d  %s", charges, m, verdict(charges == m))
	offending("orders without a charge", keys(`SELECT 'ord-' || g FROM generate_series(1, $1::int) g EXCEPT SELECT order_id FROM charges`, m))
	offending("charges of no order", keys(`SELECT order_id FROM charges EXCEPT SELECT 'ord-' || g FROM generate_series(1, $1::int) g`, m))
	inbox := count(`SELECT count(*) FROM idem_billing_charge`)
	line("billing inbox rows                  %9d  want %d  %s", inbox, m, verdict(inbox == m))
	badAmount := keys(`SELECT order_id FROM charges WHERE amount_cents <> 100 + (substr(order_id, 5)::int % 1000)`)
	line("charges with another amount         %9d  want 0  %s", len(badAmount), verdict(len(badAmount) == 0))
	offending("orders", badAmount)
	badBalance := keys(`SELECT a.id FROM accounts a LEFT JOIN (SELECT account_id, sum(amount_cents) s FROM charges GROUP BY account_id) c
		ON c.account_id = a.id WHERE a.balance_cents <> -coalesce(c.s, 0)`)
	line("balances off their charges          %9d  want 0  %s", len(badBalance), verdict(len(badBalance) == 0))
	offending("accounts", badBalance)
	// A published row is deleted: what is left is pending or dead.
	unpublished := count(`SELECT count(*) FROM idem_outbox`)
	line("outbox rows unpublished or dead     %9d  want 0  %s", unpublished, verdict(unpublished == 0))
	// The relays' own count of confirmed publishes is what they reported
	// every 200 ms: a SIGKILL loses up to that much of it, so it is shown,
	// not checked. The rows published (above) and applied downstream
	// (below) are the exact checks.
	line("relayed (broker confirms, reported) %9d  (a SIGKILL loses up to 200ms of a relay's reported count)", rt[4])
	notes := count(`SELECT count(*) FROM notifications`)
	line("notifications applied downstream    %9d  want %d  %s", notes, m, verdict(notes == m))
	offending("charges not notified", keys(`SELECT order_id FROM charges EXCEPT SELECT order_id FROM notifications`))
	ninbox := count(`SELECT count(*) FROM idem_notifications_charge_completed`)
	line("notifications inbox rows            %9d  want %d  %s", ninbox, m, verdict(ninbox == m))
	// The relay deletes each row it published, so the outbox cannot say
	// which message a notification came from; the stable id can: the
	// message billing.charge published for an order has the id
	// idem.OutgoingMessageID of the consumer and the order.
	wrongID, werr := s.notificationsOfAnotherEvent(ctx)
	if werr != nil && err == nil {
		err = werr
	}
	line("notifications of another event      %9d  want 0  %s", len(wrongID), verdict(len(wrongID) == 0))
	offending("orders", wrongID[:min(len(wrongID), 20)])

	// Seed 003's query: the work a handler did twice.
	var doubled []string
	for _, q := range []string{
		`SELECT order_id FROM charges GROUP BY order_id HAVING count(*) > 1`,
		`SELECT message_id FROM notifications GROUP BY message_id HAVING count(*) > 1`,
		`SELECT order_id FROM notifications GROUP BY order_id HAVING count(*) > 1`,
		`SELECT message_id::text FROM idem_outbox GROUP BY message_id HAVING count(*) > 1`,
	} {
		doubled = append(doubled, keys(q)...)
	}
	line("duplicate query (GROUP BY key HAVING count(*) > 1) rows %d  want 0  %s", len(doubled), verdict(len(doubled) == 0))
	offending("keys", doubled)

	left, lerr := s.ctl.leftover(ctx)
	if lerr != nil && err == nil {
		err = lerr
	}
	nleft := 0
	var where []string
	for q, n := range left {
		nleft += n
		where = append(where, fmt.Sprintf("%s=%d", q, n))
	}
	sort.Strings(where)
	line("lost or unacked (work/retry queues) %9d  want 0  %s", nleft, verdict(nleft == 0))
	offending("queues", where)

	dl, derr := s.ctl.deadLetters(ctx, false)
	if derr != nil && err == nil {
		err = derr
	}
	byKind := map[string]int{}
	var unexpected, missing []string
	want := map[string]bool{}
	for _, k := range hostile {
		want[k] = true
	}
	got := map[string]int{}
	for _, k := range dl {
		got[k]++
		if got[k] > 1 {
			continue
		}
		if !want[k] {
			unexpected = append(unexpected, k)
			continue
		}
		byKind[strings.SplitN(strings.TrimPrefix(k, "hostile-"), "-", 2)[0]]++
	}
	for _, k := range hostile {
		if got[k] == 0 {
			missing = append(missing, k)
		}
	}
	h := s.o.hostile
	line("hostile payloads dead-lettered      %9d  want %d (undecodable %d, oversized %d, reused key %d)  %s", len(got), len(hostile),
		byKind[hostileUndecodable], byKind[hostileOversized], byKind[hostileReused],
		verdict(len(got) == len(hostile) && len(unexpected) == 0 && len(missing) == 0 && byKind[hostileUndecodable] == h && byKind[hostileOversized] == h && byKind[hostileReused] == h))
	line("  dead-letter copies of one payload %9d  (a kill or closed connection between the dead-letter publish and the ack: at least once)", len(dl)-len(got))
	offending("dead-lettered but not hostile", first(unexpected))
	offending("hostile but not dead-lettered", first(missing))
	ndl, nerr := s.ctl.deadLetters(ctx, true)
	if nerr != nil && err == nil {
		err = nerr
	}
	line("notifications dead-lettered         %9d  want 0  %s", len(ndl), verdict(len(ndl) == 0))
	offending("messages", first(ndl))

	line("billing processed (reported)        %9d  want <= %d  %s", bt[0], m, verdict(bt[0] <= int64(m)))
	line("duplicates injected (producer)      %9d", injected)
	line("duplicates detected by billing      %9d  (the injected ones, plus redeliveries after kills and closed connections;", bt[1])
	line("                                               a SIGKILL loses up to %v of a process's reported counts)", statsEvery)
	line("notifications processed (reported)  %9d  want <= %d  %s", nt[0], m, verdict(nt[0] <= int64(m)))
	line("duplicates detected downstream      %9d  (relay re-publishes after kills, redeliveries)", nt[1])
	line("deliveries retried (faults)         %9d billing, %d notifications", bt[2], nt[2])
	line("")
	total := 0
	kinds := make([]string, 0, len(faults))
	for k, n := range faults {
		kinds = append(kinds, k)
		total += n
	}
	sort.Strings(kinds)
	line("faults injected                     %9d", total)
	for _, k := range kinds {
		line("  %-33s %9d", k, faults[k])
	}
	line("  (broker connections closed in all: %d)", conns)
	line("pgRestart once                      %9d  want 1  %s", faults[faultPGRestart], verdict(faults[faultPGRestart] == 1))
	if s.o.failover {
		line("PostgreSQL failovers                %9d  want %d  %s", faults[faultFailover], s.o.failovers, verdict(faults[faultFailover] == s.o.failovers))
		for i, r := range failovers {
			line("  failover %d: %d → %d, %s; new standby built in %v", i+1, r.from, r.to, r.resumed(), r.rebuild.Round(time.Millisecond))
		}
	}
	line("```")
	if ok {
		line("\nresult: PASS — every order applied once, nothing lost, nothing doubled")
	} else {
		line("\nresult: FAIL")
	}
	return b.String(), ok, err
}

func first(k []string) []string {
	sort.Strings(k)
	if len(k) > 20 {
		return k[:20]
	}
	return k
}

// chargeConsumer is the consumer of examples/billing's Charge, whose
// ChargeCompleted messages the notifications consume.
const chargeConsumer = "billing.charge"

// notificationsOfAnotherEvent lists the orders whose notification carries
// the message id of another event than the ChargeCompleted that billing's
// Charge published for the order.
func (s *soak) notificationsOfAnotherEvent(ctx context.Context) ([]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT order_id, message_id::text FROM notifications ORDER BY order_id`)
	if err != nil {
		return nil, fmt.Errorf("read the notifications: %w", err)
	}
	var wrong []string
	for rows.Next() {
		var order, id string
		if err := rows.Scan(&order, &id); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read the notifications: %w", err)
		}
		if id != idem.OutgoingMessageID(chargeConsumer, []any{order}, 0) {
			wrong = append(wrong, order)
		}
	}
	return wrong, rows.Err()
}
