package main

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// The outbox part's targets, with the defaults.
const (
	// targetNotifyThroughput: committing throughput with the default NOTIFY
	// against WithoutNotify, at the most workers.
	targetNotifyThroughput = 0.9
	// targetLatencyP50 and targetLatencyP99 bound the commit-to-publish
	// latency of a relay woken by NOTIFY, at every rate of -obxrate.
	targetLatencyP50 = 5 * time.Millisecond
	targetLatencyP99 = 50 * time.Millisecond
)

// outboxTargets writes the outbox part's lines of the Targets table.
func (r *report) outboxTargets(w writer) {
	o := r.outbox
	var parts []string
	ok := true
	for _, n := range o.workers {
		eq, trips := equalTrips(o.firstDeliveryCells(n))
		ok = ok && eq
		var ts []string
		for _, t := range trips {
			ts = append(ts, fmt.Sprintf("%.2f", t))
		}
		parts = append(parts, fmt.Sprintf("%s at %d %s (and %.2f for the NOTIFY after it)", strings.Join(ts, " / "), n, plural(n, "worker"), o.notifyTrips(n)))
	}
	w("| 0, 1 and 10 outgoing messages cost the same round trips | 0 / 1 / 10 messages: %s round trips per first delivery, counted on the wire ([below](#outbox)) | %s |\n", strings.Join(parts, ", "), verdict(ok))
	var lines []string
	for _, n := range o.workers {
		with, without := o.cell(obxVariant{1, true}, n), o.cell(obxVariant{1, false}, n)
		lines = append(lines, fmt.Sprintf("%s against %s msgs/s at %d %s: %s", thousands(with.summary().rate), thousands(without.summary().rate), n, plural(n, "worker"), cellRatio(with, without)))
	}
	hi := slices.Max(o.workers)
	with, without := o.cell(obxVariant{1, true}, hi), o.cell(obxVariant{1, false}, hi)
	w("| committing throughput with the default NOTIFY ≥ %.1f× `WithoutNotify` at %d workers | one message per delivery, with / without: %s | %s |\n",
		targetNotifyThroughput, hi, strings.Join(lines, "; "), verdict(with.summary().rate/without.summary().rate >= targetNotifyThroughput))
	for _, rate := range o.rates {
		n, p := pooledLatencies(o.latency[latencyKey{rate, false}]), pooledLatencies(o.latency[latencyKey{rate, true}])
		p50, p99 := percentile(n, 50), percentile(n, 99)
		w("| commit-to-publish p50 ≤ %s and p99 ≤ %s at %s msgs/s, defaults | NOTIFY: p50 %s, p99 %s (poll-only, every %s: p50 %s, p99 %s) | %s |\n",
			dur(targetLatencyP50), dur(targetLatencyP99), thousands(float64(rate)), dur(p50), dur(p99), o.poll, dur(percentile(p, 50)), dur(percentile(p, 99)),
			verdict(len(n) > 0 && p50 <= targetLatencyP50 && p99 <= targetLatencyP99))
	}
	var rates []string
	for _, k := range o.relayNs {
		rates = append(rates, fmt.Sprintf("%s msgs/s with %d", thousands(pooledRelayRate(o.relays[k])), k))
	}
	w("| relay throughput reported | %s | reported |\n", strings.Join(rates, ", "))
}

// firstDeliveryCells are the cells whose round trips must be equal at n
// workers: 0 messages, and 1 and 10 WithoutNotify (the NOTIFY after a commit
// that wrote rows is a round trip of its own, shared by the commits of a few
// milliseconds: notifyTrips counts it apart).
func (o *outboxResults) firstDeliveryCells(n int) []*cell {
	var cells []*cell
	for _, v := range obxVariants {
		if v.msgs == 0 || !v.notify {
			cells = append(cells, o.cell(v, n))
		}
	}
	return cells
}

// notifyTrips is what the coalesced NOTIFY adds per delivery at n workers:
// the round trips per message with it less those without it, one message
// per delivery.
func (o *outboxResults) notifyTrips(n int) float64 {
	return o.cell(obxVariant{1, true}, n).summary().tripsPerMsg - o.cell(obxVariant{1, false}, n).summary().tripsPerMsg
}

func (r *report) writeOutbox(w writer) {
	o, cfg := r.outbox, r.cfg
	w("## Outbox\n\n")
	w("A handler that publishes: `ledger.NewPublishingPost` ([`bench/ledger/publishing.go`](bench/ledger/publishing.go)) wraps the same consumer with `idemimpl.NewPublishingInbox`; its handler makes Post's UPDATE, then calls `out.Publish` n times with a small JSON message. ")
	w("The inbox writes the n rows into `idem_outbox` in its commit round trip, with the result and `COMMIT`: one multi-row INSERT; after the commit, unless `idem.WithoutNotify()` is given, the pool's coalesced `NOTIFY` (below). ")
	w("The relay (`idem.NewRelay`, default options unless said) publishes to a recording publisher, which confirms every message at once and records when it first saw each id. ")
	w("Every run below is in a fresh schema with the ledger's migrations and the outbox chain (`migrations/`), applied with goose; %d %s (`-rounds`) ran them, interleaved, the order rotating from round to round.\n\n", cfg.rounds, plural(cfg.rounds, "round"))

	w("### A first delivery with 0, 1 and 10 outgoing messages\n\n")
	w("Cells as in the message delivery table (%s after a %s warm-up, a pool of as many connections as workers, round trips counted on the wire), each delivery a new message. ", cfg.duration, cfg.warmup)
	w("After each cell the outbox held exactly n rows per delivery (checked). **vs 0** is the throughput against the cell that publishes nothing, pooled, with the per-round range in brackets.\n\n")
	w("| workers | messages per delivery | NOTIFY | msgs/s | p50 | p99 | round trips/msg | client CPU/msg | server CPU/msg | busy | vs 0 |\n")
	w("| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, n := range o.workers {
		zero := o.cell(obxVariants[0], n)
		for _, v := range obxVariants {
			c := o.cell(v, n)
			s := c.summary()
			notify := "yes"
			if !v.notify {
				notify = "no (`WithoutNotify`)"
			}
			w("| %d | %d | %s | %s | %s | %s | %.2f | %s | %s | %.0f%% | %s |\n", n, v.msgs, notify, thousands(s.rate), dur(s.p50), dur(s.p99), s.tripsPerMsg,
				dur(s.clientCPU), serverDur(s), 100*s.busy, cellRatio(c, zero))
		}
	}
	w("\n")
	lo := slices.Min(o.workers)
	z, one, ten := o.cell(obxVariant{0, true}, lo).summary(), o.cell(obxVariant{1, true}, lo).summary(), o.cell(obxVariant{10, true}, lo).summary()
	w("The rows cost no round trip: at %d worker the median latency is %s with no message, %s with 1 and %s with 10 (the INSERT rides in the batch that commits); what they cost is the server's work on that round trip: server CPU per delivery %s, %s and %s.\n\n",
		lo, dur(z.p50), dur(one.p50), dur(ten.p50), serverDur(z), serverDur(one), serverDur(ten))

	w("### NOTIFY and committing throughput\n\n")
	w("`NOTIFY` makes a committing transaction take a lock that PostgreSQL holds from just before the commit until after it (in `PreCommit_Notify`, a lock on \"database 0\", the same for every database of the server), so the commits of transactions that notify, WAL flush included, happen one at a time. ")
	w("So no delivery's transaction notifies: once a commit that wrote outbox rows is acknowledged, the inbox hands the wake-up to its pool's notifier, which sends `NOTIFY` on its own, in a transaction that writes nothing and does not wait for its WAL flush, on a connection of the pool; the commits acknowledged while one is on its way, or within 2 ms after it, share the next. ")
	w("One message per delivery, with the default NOTIFY and with `WithoutNotify`; **NOTIFY round trips per delivery** is the difference of the two cells' round trips per message, the coalesced NOTIFYs counted on the wire:\n\n")
	w("| workers | with NOTIFY, msgs/s | WithoutNotify, msgs/s | with / without | NOTIFY round trips per delivery | p50 with / without | p99 with / without |\n| ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, n := range o.workers {
		with, without := o.cell(obxVariant{1, true}, n), o.cell(obxVariant{1, false}, n)
		a, b := with.summary(), without.summary()
		w("| %d | %s | %s | %s | %.3f | %s / %s | %s / %s |\n", n, thousands(a.rate), thousands(b.rate), cellRatio(with, without), o.notifyTrips(n), dur(a.p50), dur(b.p50), dur(a.p99), dur(b.p99))
	}
	w("\nWithout the NOTIFY a relay finds the rows only when it polls, so the poll interval becomes the commit-to-publish latency (below).\n\n")

	w("### Commit-to-publish latency\n\n")
	w("At each rate of `-obxrate`, messages scheduled at even intervals and delivered by producers on a pool of their own (one for every 100 messages per second, at least 4; each delivery publishes one message, with the default NOTIFY), for %s after a %s warm-up (not counted), while one relay on a pool of its own publishes them. ", cfg.duration, cfg.warmup)
	w("A message's latency runs from the moment `Handle` returned (the commit acknowledged to the producer) to the moment the relay handed the message to the publisher. ")
	w("Both relays poll every **%s** (`idem.WithRelayPollInterval`; the default is %s); the NOTIFY relay is also woken by the coalesced NOTIFY through its listening connection, and claims again at once while it finds rows; the poll-only one (`idem.WithRelayPollOnly()`, for PgBouncer in transaction mode) is woken only by its poll.\n\n", o.poll, time.Second)
	w("| rate | relay | messages | achieved rate | p50 | p90 | p99 | max | published twice |\n| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, rate := range o.rates {
		for _, pollOnly := range []bool{false, true} {
			runs := o.latency[latencyKey{rate, pollOnly}]
			lat := pooledLatencies(runs)
			if len(lat) == 0 {
				continue
			}
			var msgs, dups int
			var elapsed time.Duration
			for _, run := range runs {
				msgs += run.msgs
				dups += run.dups
				elapsed += run.elapsed
			}
			name := "NOTIFY + poll"
			if pollOnly {
				name = "poll-only"
			}
			w("| %s/s | %s | %s | %s msgs/s | %s | %s | %s | %s | %d |\n", thousands(float64(rate)), name, thousands(float64(msgs)), thousands(float64(msgs)/elapsed.Seconds()),
				dur(percentile(lat, 50)), dur(percentile(lat, 90)), dur(percentile(lat, 99)), dur(lat[len(lat)-1]), dups)
		}
	}
	w("\nA poll-only relay's latency is spread over its poll interval (half of it at the median); with NOTIFY it is the wait for the pool's next NOTIFY (at most 2 ms after the one before), its round trip, and one claim statement.\n\n")

	w("### Relay throughput\n\n")
	w("A backlog of %s rows written beforehand through the same wrapper (%d deliveries at a time, %d messages each, without NOTIFY; then `VACUUM ANALYZE idem_outbox`), then 1 or more relays started at once with the recording publisher, default options (batches of %d): the time until every row was published and deleted (no row left in `idem_outbox`). ",
		thousands(float64(roundUp(o.backlog, fillMessages))), o.fillWorker, fillMessages, 100)
	w("The relays have a pool of their own (3 connections per relay, one of which each takes for listening); **round trips per 100 rows** counts their connections' traffic on the wire (per batch: the claim, the mark, and any renewal of the lease; the last, empty claims; the listening connections).\n\n")
	w("| relays | rows | msgs/s | per round | vs 1 relay | round trips per 100 rows | rows of the busiest relay | published twice | busy |\n| ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |\n")
	base := pooledRelayRate(o.relays[slices.Min(o.relayNs)])
	for _, k := range slices.Sorted(slices.Values(o.relayNs)) {
		runs := o.relays[k]
		var rows, publishes, busiest int
		var trips int64
		var busy float64
		var per []string
		for _, run := range runs {
			rows += run.rows
			publishes += run.publishes
			trips += run.trips
			busy += run.busy / float64(len(runs))
			if len(run.byRelay) > 0 {
				busiest += run.byRelay[0]
			}
			per = append(per, thousands(run.rate()))
		}
		rate := pooledRelayRate(runs)
		w("| %d | %s | %s | %s | %s | %.2f | %.0f%% | %d | %.0f%% |\n", k, thousands(float64(rows)), thousands(rate), strings.Join(per, ", "), ratio(rate/base),
			100*float64(trips)/float64(max(rows, 1)), 100*float64(busiest)/float64(max(rows, 1)), publishes-rows, 100*busy)
	}
	w("\nOrder the outbox runs went in:\n\n")
	for i, ord := range o.order {
		w("%d. %s\n", i+1, strings.Join(ord, "; "))
	}
	w("\n")
}

// roundUp is n rounded up to a multiple of m.
func roundUp(n, m int) int { return (n + m - 1) / m * m }

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}
