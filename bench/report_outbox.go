package main

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/idemgen/idemgen/bench/internal/mdtable"
	"github.com/idemgen/idemgen/bench/internal/stats"
)

// outboxTargets writes the outbox part's lines of the Targets table; those
// of issue 24 are lines not run when the part did not run.
func (r *report) outboxTargets(t *targetTable) {
	o := r.outbox
	if o != nil {
		trips := target{doc: "outbox-round-trips", what: fmt.Sprintf("a first delivery, 0, 1 or 10 messages out: %.0f round trips", targetFirstTrips), status: met}
		var parts []string
		for _, n := range o.workers {
			trips.busy = append(trips.busy, busyOf(o.firstDeliveryCells(n)...)...)
			_, ts := equalTrips(o.firstDeliveryCells(n))
			if slices.Max(ts) > targetFirstTrips+0.005 {
				trips.status = missed
			}
			var cells []string
			for _, x := range ts {
				cells = append(cells, fmt.Sprintf("%.2f", x))
			}
			parts = append(parts, fmt.Sprintf("%s at %d", strings.Join(cells, " / "), n))
			trips.why.add(fmt.Sprintf("the NOTIFY after a commit, round trips a delivery at %d %s", n, plural(n, "worker")), "%.2f", o.notifyTrips(n))
		}
		trips.measured = strings.Join(parts, "; ")
		t.add(trips)
		committing := target{doc: "notify-and-committing-throughput", what: "committing throughput with and without NOTIFY, reported", status: reported}
		var ratios []string
		for _, k := range o.workers {
			with, without := o.cell(obxVariant{1, true}, k), o.cell(obxVariant{1, false}, k)
			ratios = append(ratios, fmt.Sprintf("%s at %d", mdtable.Ratio(with.summary().rate/without.summary().rate), k))
			at := fmt.Sprintf(" at %d %s", k, plural(k, "worker"))
			committing.why.add("with NOTIFY, msgs/s"+at, "%s", mdtable.Thousands(with.summary().rate))
			committing.why.add("WithoutNotify, msgs/s"+at, "%s", mdtable.Thousands(without.summary().rate))
			committing.why.add("with ÷ without"+at+", per round in brackets", "%s", cellRatio(with, without))
			committing.busy = append(committing.busy, busyOf(with, without)...)
		}
		committing.measured = strings.Join(ratios, ", ")
		t.add(committing)
	}
	t.add(r.notifyTarget())
	if o != nil {
		for _, rate := range o.rates {
			n, p := pooledLatencies(o.latencyRuns(rate, false)), pooledLatencies(o.latencyRuns(rate, true))
			if len(n) == 0 || len(p) == 0 {
				continue
			}
			l := target{doc: "commit-to-publish-latency", what: fmt.Sprintf("commit-to-publish at %s msgs/s, NOTIFY against poll-only, reported", mdtable.Thousands(float64(rate))),
				measured: fmt.Sprintf("p50 %s / %s, p99 %s / %s", mdtable.Dur(stats.Percentile(n, 50)), mdtable.Dur(stats.Percentile(p, 50)), mdtable.Dur(stats.Percentile(n, 99)), mdtable.Dur(stats.Percentile(p, 99))),
				status:   reported}
			for _, pollOnly := range []bool{false, true} {
				for _, run := range o.latencyRuns(rate, pollOnly) {
					l.busy = append(l.busy, run.busy)
				}
			}
			l.why.add("both relays poll every", "%s", o.poll)
			t.add(l)
		}
	}
	for _, l := range r.publishLatencyTargets() {
		t.add(l)
	}
	if o != nil {
		var rates []string
		var busy []float64
		for _, k := range o.relayNs {
			rates = append(rates, fmt.Sprintf("%s msgs/s with %d", mdtable.Thousands(pooledRelayRate(o.relays[k])), k))
			busy = append(busy, relayBusy(o.relays[k]))
		}
		t.add(target{doc: "relay-throughput", what: "relay throughput, reported", measured: strings.Join(rates, ", "), status: reported, busy: busy})
	}
}

// relayBusy is the machine's busy fraction over relay runs, the mean of the
// rounds.
func relayBusy(runs []relayRun) float64 {
	var busy float64
	for _, run := range runs {
		busy += run.busy / float64(len(runs))
	}
	return busy
}

// latencyRates are the message rates of the commit-to-publish runs.
func (o *outboxResults) latencyRates() []int { return o.rates }

// latencyRuns are the commit-to-publish runs at rate, of the poll-only
// relay or of the one woken by NOTIFY.
func (o *outboxResults) latencyRuns(rate int, pollOnly bool) []latencyRun {
	return o.latency[latencyKey{rate, pollOnly}]
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
	w("## %s\n\n", secOutbox)
	w("A handler that publishes: `ledger.NewPublishingPost` ([`bench/ledger/publishing.go`](bench/ledger/publishing.go)) wraps the same consumer with `idemimpl.NewPublishingInbox`; its handler makes Post's UPDATE, then calls `out.Publish` n times with a small JSON message. ")
	w("The inbox writes the n rows into `idem_outbox` in its commit round trip, with the result and `COMMIT`: one multi-row INSERT; after the commit, unless `idem.WithoutNotify()` is given, the pool's coalesced `NOTIFY` (below). ")
	w("The relay (`relay.New`, default options unless said) publishes to a recording publisher, which confirms every message at once and records when it first saw each id. ")
	w("Every run below is in a fresh schema with the ledger's migrations and the outbox chain (`migrations/`), applied with goose; %d %s (`-rounds`) ran them, interleaved, the order rotating from round to round.\n\n", cfg.rounds, plural(cfg.rounds, "round"))

	w("### A first delivery with 0, 1 and 10 outgoing messages\n\n")
	w("Cells as in the message delivery table (%s after a %s warm-up, a pool of as many connections as workers, round trips counted on the wire), each delivery a new message. ", cfg.duration, cfg.warmup)
	w("After each cell the outbox held exactly n rows per delivery (checked). **vs 0** is the throughput against the cell that publishes nothing, pooled, with the per-round range in brackets.\n\n")
	t := cellTable([]mdtable.Column{mdtable.R("workers"), mdtable.R("messages per delivery"), mdtable.L("NOTIFY")}, "p50", "p99", "vs 0")
	for _, n := range o.workers {
		zero := o.cell(obxVariants[0], n)
		for _, v := range obxVariants {
			c := o.cell(v, n)
			s := c.summary()
			notify := "yes"
			if !v.notify {
				notify = "no (`WithoutNotify`)"
			}
			t.Row(slices.Concat([]string{mdtable.Int(n), mdtable.Int(v.msgs), notify}, s.cells(2), []string{cellRatio(c, zero)})...)
		}
	}
	w("%s\n", t)
	hi := slices.Max(o.workers)
	lo := slices.Min(o.workers)
	z, one, ten := o.cell(obxVariant{0, true}, lo).summary(), o.cell(obxVariant{1, true}, lo).summary(), o.cell(obxVariant{10, true}, lo).summary()
	w("The rows cost no round trip: at %d worker the median latency is %s with no message, %s with 1 and %s with 10 (the INSERT rides in the batch that commits); what they cost is the server's work on that round trip: server CPU per delivery %s, %s and %s.\n\n",
		lo, mdtable.Dur(z.p50), mdtable.Dur(one.p50), mdtable.Dur(ten.p50), serverDur(z), serverDur(one), serverDur(ten))

	w("### NOTIFY and committing throughput\n\n")
	w("`NOTIFY` makes a committing transaction take a lock that PostgreSQL holds from just before the commit until after it (in `PreCommit_Notify`, a lock on \"database 0\", the same for every database of the server), so the commits of transactions that notify, WAL flush included, happen one at a time. ")
	w("So no delivery's transaction notifies: once a commit that wrote outbox rows is acknowledged, the inbox hands the wake-up to its pool's notifier, which sends `NOTIFY` on its own, in a transaction that writes nothing and does not wait for its WAL flush, on a connection of the pool; the commits acknowledged while one is on its way, or within 2 ms after it, share the next. ")
	w("One message per delivery, with the default NOTIFY and with `WithoutNotify`; **NOTIFY round trips per delivery** is the difference of the two cells' round trips per message, the coalesced NOTIFYs counted on the wire:\n\n")
	notify := mdtable.New(mdtable.R("workers"), mdtable.R("with NOTIFY, msgs/s"), mdtable.R("WithoutNotify, msgs/s"), mdtable.R("with / without"),
		mdtable.R("NOTIFY round trips per delivery"), mdtable.R("p50 with / without"), mdtable.R("p99 with / without"))
	for _, n := range o.workers {
		with, without := o.cell(obxVariant{1, true}, n), o.cell(obxVariant{1, false}, n)
		a, b := with.summary(), without.summary()
		notify.Row(mdtable.Int(n), mdtable.Thousands(a.rate), mdtable.Thousands(b.rate), cellRatio(with, without), fmt.Sprintf("%.3f", o.notifyTrips(n)),
			mdtable.Dur(a.p50)+" / "+mdtable.Dur(b.p50), mdtable.Dur(a.p99)+" / "+mdtable.Dur(b.p99))
	}
	w("%s", notify)
	w("\nWithout the NOTIFY a relay finds the rows only when it polls, so the poll interval becomes the commit-to-publish latency (below). At %d workers that is the trade: the ratio above against the latency below.\n\n", hi)

	w("### Commit-to-publish latency\n\n")
	w("At each rate of `-obxrate`, messages scheduled at even intervals and delivered by producers on a pool of their own (one for every 100 messages per second, at least 4; each delivery publishes one message, with the default NOTIFY), for %s after a %s warm-up (not counted), while one relay on a pool of its own publishes them. ", cfg.duration, cfg.warmup)
	w("A message's latency runs from the moment `Handle` returned (the commit acknowledged to the producer) to the moment the relay handed the message to the publisher. ")
	w("Both relays poll every **%s** (`relay.WithPollInterval`; the default is %s); the NOTIFY relay is also woken by the coalesced NOTIFY through its listening connection, and claims again at once while it finds rows; the poll-only one (`relay.WithPollOnly()`, for PgBouncer in transaction mode) is woken only by its poll.\n\n", o.poll, time.Second)
	latency := mdtable.New(mdtable.R("rate"), mdtable.L("relay"), mdtable.R("messages"), mdtable.R("achieved rate"), mdtable.R("p50"), mdtable.R("p90"), mdtable.R("p99"), mdtable.R("max"), mdtable.R("published twice"))
	for _, rate := range o.rates {
		for _, pollOnly := range []bool{false, true} {
			runs := o.latency[latencyKey{rate, pollOnly}]
			lat := pooledLatencies(runs)
			if len(lat) == 0 {
				continue
			}
			msgs, achieved := pooledRate(runs)
			dups := 0
			for _, run := range runs {
				dups += run.dups
			}
			name := "NOTIFY + poll"
			if pollOnly {
				name = "poll-only"
			}
			latency.Row(mdtable.Thousands(float64(rate))+"/s", name, mdtable.Int(msgs), mdtable.Thousands(achieved)+" msgs/s",
				mdtable.Dur(stats.Percentile(lat, 50)), mdtable.Dur(stats.Percentile(lat, 90)), mdtable.Dur(stats.Percentile(lat, 99)), mdtable.Dur(lat[len(lat)-1]), fmt.Sprint(dups))
		}
	}
	w("%s", latency)
	w("\nA poll-only relay's latency is spread over its poll interval (half of it at the median); with NOTIFY it is the wait for the pool's next NOTIFY (at most 2 ms after the one before), its round trip, and one claim statement.\n\n")

	w("### Relay throughput\n\n")
	w("A backlog of %s rows written beforehand through the same wrapper (%d deliveries at a time, %d messages each, without NOTIFY; then `VACUUM ANALYZE idem_outbox`), then 1 or more relays started at once with the recording publisher, default options (batches of %d): the time until every row was published and deleted (no row left in `idem_outbox`). ",
		mdtable.Thousands(float64(roundUp(o.backlog, fillMessages))), o.fillWorker, fillMessages, 100)
	w("The relays have a pool of their own (3 connections per relay, one of which each takes for listening); **round trips per 100 rows** counts their connections' traffic on the wire (per batch: the claim, the mark, and any renewal of the lease; the last, empty claims; the listening connections).\n\n")
	relays := mdtable.New(mdtable.R("relays"), mdtable.R("rows"), mdtable.R("msgs/s"), mdtable.L("per round"), mdtable.R("vs 1 relay"), mdtable.R("round trips per 100 rows"),
		mdtable.R("rows of the busiest relay"), mdtable.R("published twice"), mdtable.R("busy"))
	base := pooledRelayRate(o.relays[slices.Min(o.relayNs)])
	for _, k := range slices.Sorted(slices.Values(o.relayNs)) {
		runs := o.relays[k]
		var rows, publishes, busiest int
		var trips int64
		var per []string
		for _, run := range runs {
			rows += run.rows
			publishes += run.publishes
			trips += run.trips
			if len(run.byRelay) > 0 {
				busiest += run.byRelay[0]
			}
			per = append(per, mdtable.Thousands(run.rate()))
		}
		rate := pooledRelayRate(runs)
		relays.Row(mdtable.Int(k), mdtable.Int(rows), mdtable.Thousands(rate), strings.Join(per, ", "), mdtable.Ratio(rate/base),
			fmt.Sprintf("%.2f", 100*float64(trips)/float64(max(rows, 1))), mdtable.Percent(float64(busiest)/float64(max(rows, 1))), fmt.Sprint(publishes-rows), mdtable.Percent(relayBusy(runs)))
	}
	w("%s", relays)
	w("\nOrder the outbox runs went in:\n\n")
	for i, ord := range o.order {
		w("%d. %s\n", i+1, strings.Join(ord, "; "))
	}
	w("\n")
	r.writeBehind(w, secOutbox)
}

// roundUp is n rounded up to a multiple of m.
func roundUp(n, m int) int { return (n + m - 1) / m * m }

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}
