package main

import (
	"fmt"
	"slices"
	"strings"
	"time"
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
		parts = append(parts, fmt.Sprintf("%s at %d %s", strings.Join(ts, " / "), n, plural(n, "worker")))
	}
	w("| 0, 1 and 10 outgoing messages cost the same round trips | 0 / 1 / 10 messages: %s round trips per first delivery, counted on the wire ([below](#outbox)) | %s |\n", strings.Join(parts, ", "), verdict(ok))
	hi := slices.Max(o.workers)
	with, without := o.cell(obxVariant{1, true}, hi), o.cell(obxVariant{1, false}, hi)
	w("| committing throughput with and without NOTIFY reported | %s msgs/s with, %s without at %d workers: %s | reported |\n",
		thousands(with.summary().rate), thousands(without.summary().rate), hi, cellRatio(without, with))
	n, p := pooledLatencies(o.latency[false]), pooledLatencies(o.latency[true])
	w("| commit-to-publish latency, NOTIFY against poll-only, reported | p50 %s / %s, p99 %s / %s (poll every %s) | reported |\n",
		dur(percentile(n, 50)), dur(percentile(p, 50)), dur(percentile(n, 99)), dur(percentile(p, 99)), o.poll)
	var rates []string
	for _, k := range o.relayNs {
		rates = append(rates, fmt.Sprintf("%s msgs/s with %d", thousands(pooledRelayRate(o.relays[k])), k))
	}
	w("| relay throughput reported | %s | reported |\n", strings.Join(rates, ", "))
}

// firstDeliveryCells are the cells of 0, 1 and 10 messages with NOTIFY at n
// workers, in that order.
func (o *outboxResults) firstDeliveryCells(n int) []*cell {
	var cells []*cell
	for _, v := range obxVariants {
		if v.notify {
			cells = append(cells, o.cell(v, n))
		}
	}
	return cells
}

func (r *report) writeOutbox(w writer) {
	o, cfg := r.outbox, r.cfg
	w("## Outbox\n\n")
	w("A handler that publishes: `ledger.NewPublishingPost` ([`bench/ledger/publishing.go`](bench/ledger/publishing.go)) wraps the same consumer with `idemimpl.NewPublishingInbox`; its handler makes Post's UPDATE, then calls `out.Publish` n times with a small JSON message. ")
	w("The inbox writes the n rows into `idem_outbox` in its commit round trip, with the result and `COMMIT`: one multi-row INSERT, and one `NOTIFY` unless `idem.WithoutNotify()` is given. ")
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
	hi := slices.Max(o.workers)
	lo := slices.Min(o.workers)
	z, one, ten := o.cell(obxVariant{0, true}, lo).summary(), o.cell(obxVariant{1, true}, lo).summary(), o.cell(obxVariant{10, true}, lo).summary()
	w("The rows cost no round trip: at %d worker the median latency is %s with no message, %s with 1 and %s with 10 (the INSERT and the NOTIFY ride in the batch that commits); what they cost is the server's work on that round trip: server CPU per delivery %s, %s and %s.\n\n",
		lo, dur(z.p50), dur(one.p50), dur(ten.p50), serverDur(z), serverDur(one), serverDur(ten))

	w("### NOTIFY and committing throughput\n\n")
	w("`NOTIFY` makes a committing transaction take a lock that PostgreSQL holds from just before the commit until after it (in `PreCommit_Notify`, a lock on \"database 0\", the same for every database of the server), so the commits of transactions that notify, WAL flush included, happen one at a time. ")
	w("One message per delivery, with and without the NOTIFY:\n\n")
	w("| workers | with NOTIFY, msgs/s | WithoutNotify, msgs/s | without / with | p50 with / without | p99 with / without |\n| ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, n := range o.workers {
		with, without := o.cell(obxVariant{1, true}, n), o.cell(obxVariant{1, false}, n)
		a, b := with.summary(), without.summary()
		w("| %d | %s | %s | %s | %s / %s | %s / %s |\n", n, thousands(a.rate), thousands(b.rate), cellRatio(without, with), dur(a.p50), dur(b.p50), dur(a.p99), dur(b.p99))
	}
	w("\nWithout the NOTIFY a relay finds the rows only when it polls, so the poll interval becomes the commit-to-publish latency (below). At %d workers that is the trade: the ratio above against the latency below.\n\n", hi)

	w("### Commit-to-publish latency\n\n")
	w("%d messages per second, scheduled at even intervals and delivered by %d producers on a pool of their own (each delivery publishes one message, with NOTIFY), for %s after a %s warm-up (not counted), while one relay on a pool of its own publishes them. ", o.rate, o.producers, cfg.duration, cfg.warmup)
	w("A message's latency runs from the moment `Handle` returned (the commit acknowledged to the producer) to the moment the relay handed the message to the publisher. ")
	w("Both relays poll every **%s** (`idem.WithRelayPollInterval`; the default is %s); the NOTIFY relay is also woken by each commit's NOTIFY through its listening connection, the poll-only one (`idem.WithRelayPollOnly()`, for PgBouncer in transaction mode) only by its poll.\n\n", o.poll, time.Second)
	w("| relay | messages | achieved rate | p50 | p90 | p99 | max | published twice |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, pollOnly := range []bool{false, true} {
		runs := o.latency[pollOnly]
		lat := pooledLatencies(runs)
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
		w("| %s | %s | %s msgs/s | %s | %s | %s | %s | %d |\n", name, thousands(float64(msgs)), thousands(float64(msgs)/elapsed.Seconds()),
			dur(percentile(lat, 50)), dur(percentile(lat, 90)), dur(percentile(lat, 99)), dur(lat[len(lat)-1]), dups)
	}
	n, p := pooledLatencies(o.latency[false]), pooledLatencies(o.latency[true])
	w("\nPoll-only / NOTIFY: %s at p50, %s at p99. A poll-only relay's latency is spread over its poll interval (half of it at the median); with NOTIFY it is the wake-up and one claim statement.\n\n",
		ratio(float64(percentile(p, 50))/float64(percentile(n, 50))), ratio(float64(percentile(p, 99))/float64(percentile(n, 99))))

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
