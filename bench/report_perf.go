package main

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/idemgen/idemgen/bench/internal/mdtable"
	"github.com/idemgen/idemgen/bench/internal/stats"
	"github.com/idemgen/idemgen/idem/relay"
)

// The targets of issue 24 (performance where users pay for it), each read
// from the cells of one run. HandleBatch's (≥ 0.75× bare batched) is the
// batch part's targetBatchVsBatched, the claim's (generated ≥ 1.3×
// hand-written and ≥ 0.5× bare) the db part's targetVsHand and targetVsBare.
const (
	targetNotifyVsWithout  = 0.9
	targetPublishP50       = 5 * time.Millisecond
	targetPublishP99       = 50 * time.Millisecond
	targetRelayVsRecording = 0.8
)

// notRunTarget is the line of a target whose cells did not run: parts are
// the parts it reads that were not selected.
func notRunTarget(what string, parts ...string) target {
	return target{what: what, status: notRun,
		measured: fmt.Sprintf("the %s %s did not run (`-parts`)", strings.Join(parts, " and "), plural(len(parts), "part"))}
}

// highestOf names the highest of the concurrencies ns, those of flag, for
// a line whose part did not run.
func highestOf(ns []int, flag string) string {
	if len(ns) == 0 {
		return "the highest concurrency of " + flag
	}
	return fmt.Sprintf("%d workers", slices.Max(ns))
}

// perfTargets adds the lines of issue 24's targets, those of the parts that
// did not run marked so.
func (r *report) perfTargets(t *targetTable) {
	t.add(r.notifyTarget())
	for _, l := range r.publishLatencyTargets() {
		t.add(l)
	}
	for _, l := range r.relayVsRecordingTargets() {
		t.add(l)
	}
}

// notifyTarget is "committing throughput with the default NOTIFY ≥ 0.9×
// WithoutNotify" at the outbox part's highest concurrency.
func (r *report) notifyTarget() target {
	o := r.outbox
	what := func(workers string) string {
		return fmt.Sprintf("at %s committing throughput with the default NOTIFY ≥ %.1f× WithoutNotify", workers, targetNotifyVsWithout)
	}
	if o == nil {
		return notRunTarget(what(highestOf(r.cfg.workers, "-workers")), "outbox")
	}
	n := slices.Max(o.workers)
	wc, oc := o.cell(obxVariant{1, true}, n), o.cell(obxVariant{1, false}, n)
	with, without := wc.summary(), oc.summary()
	q := with.rate / without.rate
	measured := fmt.Sprintf("%s msgs/s with, %s without: %s ([below](#notify-and-committing-throughput))", mdtable.Thousands(with.rate), mdtable.Thousands(without.rate), cellRatio(wc, oc))
	if q < targetNotifyVsWithout {
		cpu := func(s summary) time.Duration { return s.clientCPU + max(s.serverCPU, 0) }
		byCPU := float64(cpu(without)) / float64(cpu(with))
		measured += fmt.Sprintf("; with NOTIFY p50 %s, p99 %s, CPU %s a message (client + server); without p50 %s, p99 %s, CPU %s: on saturated cores the CPU alone allows %s",
			mdtable.Dur(with.p50), mdtable.Dur(with.p99), mdtable.Dur(cpu(with)), mdtable.Dur(without.p50), mdtable.Dur(without.p99), mdtable.Dur(cpu(without)), mdtable.Ratio(byCPU))
		if byCPU >= targetNotifyVsWithout {
			measured += ", so the commits wait: a commit that notifies takes a server-wide lock until it is flushed"
		}
	}
	return target{what: what(fmt.Sprintf("%d workers", n)), measured: measured, status: verdict(q >= targetNotifyVsWithout), busy: busyOf(wc, oc)}
}

// publishLatencyTargets are "commit-to-publish p50 ≤ 5 ms and p99 ≤ 50 ms",
// one line per message rate of the outbox part's latency runs, with the
// relay woken by NOTIFY.
func (r *report) publishLatencyTargets() []target {
	o := r.outbox
	what := func(rate string) string {
		return fmt.Sprintf("commit-to-publish at %s msgs/s with the defaults: p50 ≤ %s and p99 ≤ %s", rate, mdtable.Dur(targetPublishP50), mdtable.Dur(targetPublishP99))
	}
	if o == nil {
		return []target{notRunTarget(what("each -obxrate"), "outbox")}
	}
	var lines []target
	for _, rate := range o.latencyRates() {
		runs := o.latencyRuns(rate, false)
		lat := pooledLatencies(runs)
		if len(lat) == 0 {
			lines = append(lines, target{what: what(mdtable.Int(rate)), status: notRun, measured: "no latency run at this rate"})
			continue
		}
		p50, p99 := stats.Percentile(lat, 50), stats.Percentile(lat, 99)
		_, achieved := pooledRate(runs)
		// A rate the producers did not reach is not the cell the target
		// names: the latencies are those of a saturated machine.
		reached := achieved >= latencyRateReached*float64(rate)
		ok := reached && p50 <= targetPublishP50 && p99 <= targetPublishP99
		poll := "polling every " + o.poll.String()
		if o.poll != relay.DefaultPoll {
			poll += fmt.Sprintf(" (`-obxpoll`; the default is %s)", relay.DefaultPoll)
		}
		measured := fmt.Sprintf("p50 %s, p99 %s over %s messages, the relay woken by NOTIFY and %s ([below](#commit-to-publish-latency))",
			mdtable.Dur(p50), mdtable.Dur(p99), mdtable.Int(len(lat)), poll)
		if !reached {
			measured += fmt.Sprintf("; **the rate was not reached**: %d producers committed %s msgs/s of the %s asked%s",
				latencyProducers(rate), mdtable.Thousands(achieved), mdtable.Int(rate), r.publishingCapacity())
		}
		if !ok {
			late := len(lat) - countAtMost(lat, targetPublishP99)
			measured += fmt.Sprintf("; p90 %s, max %s; %s of the messages waited over %s",
				mdtable.Dur(stats.Percentile(lat, 90)), mdtable.Dur(lat[len(lat)-1]), mdtable.Int(late), mdtable.Dur(targetPublishP99))
		}
		var busy []float64
		for _, run := range runs {
			busy = append(busy, run.busy)
		}
		lines = append(lines, target{what: what(mdtable.Int(rate)), measured: measured, status: verdict(ok), busy: busy})
	}
	return lines
}

// latencyRateReached is the share of a latency run's rate its producers must
// commit for its latencies to be those of that rate.
const latencyRateReached = 0.95

// publishingCapacity says what the outbox part's first-delivery cells
// commit at their highest concurrency with one outgoing message a delivery,
// with and without NOTIFY and with no relay running: what bounds the
// producers of a latency run, which run beside the relay.
func (r *report) publishingCapacity() string {
	o := r.outbox
	n := slices.Max(o.workers)
	wc, oc := o.cell(obxVariant{1, true}, n), o.cell(obxVariant{1, false}, n)
	if wc == nil || oc == nil {
		return ""
	}
	return fmt.Sprintf(", while the machine commits at most %s msgs/s of deliveries publishing a message at %d workers with no relay running (%s WithoutNotify)",
		mdtable.Thousands(wc.summary().rate), n, mdtable.Thousands(oc.summary().rate))
}

// countAtMost is how many of sorted are at most d.
func countAtMost(sorted []time.Duration, d time.Duration) int {
	i, _ := slices.BinarySearch(sorted, d+1)
	return i
}

// relayVsRecordingTargets are "the relay through each adapter's publisher ≥
// 0.8× the same relay with the recording publisher", one line per broker,
// both from the brokers part: its rounds run the relay through each adapter
// and through the recording publisher (which confirms every message at
// once) side by side.
func (r *report) relayVsRecordingTargets() []target {
	what := func(broker string) string {
		return fmt.Sprintf("the relay through %s's publisher ≥ %.1f× the same relay with the recording publisher", broker, targetRelayVsRecording)
	}
	if r.brokers == nil {
		return []target{notRunTarget(what("each adapter"), "brokers")}
	}
	b := r.brokers
	rec := b.relayCell(recordingName, false)
	if rec == nil || len(rec.samples) == 0 {
		return []target{{what: what("each adapter"), status: notRun, measured: "the brokers part ran no relay with the recording publisher"}}
	}
	recRate := rec.summary().rate
	var lines []target
	for _, name := range b.brokers {
		rl, raw := b.relayCell(name, false), b.relayCell(name, true)
		a, c := rl.summary(), raw.summary()
		q := a.rate / recRate
		measured := fmt.Sprintf("%s msgs/s through the adapter against %s with the recording publisher: %s (per round in brackets), the same part and rounds, one relay each ([below](#publishing-idemrelay-against-a-raw-publisher))",
			mdtable.Thousands(a.rate), mdtable.Thousands(recRate), cellRatio(rl, rec))
		if q < targetRelayVsRecording {
			if c.rate < targetRelayVsRecording*recRate {
				measured += fmt.Sprintf("; bounded by the broker: the raw publisher of the same library, every message confirmed, reaches %s msgs/s, %s of the recording relay",
					mdtable.Thousands(c.rate), mdtable.Ratio(c.rate/recRate))
			} else {
				measured += fmt.Sprintf("; not by the broker: its raw publisher reaches %s msgs/s (%s of the recording relay), the relay %s of that",
					mdtable.Thousands(c.rate), mdtable.Ratio(c.rate/recRate), mdtable.Ratio(a.rate/c.rate))
			}
			measured += sharedCoresBound(rec.summary(), c, a.rate)
		}
		lines = append(lines, target{what: what(brokerTitle(name)), measured: measured, status: verdict(q >= targetRelayVsRecording),
			busy: busyOf(rl, rec)})
	}
	return lines
}

// sharedCoresBound says what the machine's cores allow a relay through a
// broker that runs beside the database on them: the machine's CPU a message
// (its busy share of every core, over the rate) of the relay with the
// recording publisher, which is the database's and the relay's work, plus
// that of the raw publisher, which is the broker's and its client's. A relay
// that overlapped the two perfectly still pays both, so on saturated cores
// it reaches at most one message per their sum. Empty when either run has no
// busy share.
func sharedCoresBound(rec, raw summary, relay float64) string {
	if rec.busy <= 0 || raw.busy <= 0 || rec.rate <= 0 || raw.rate <= 0 {
		return ""
	}
	cores := runtime.NumCPU()
	// cpu is a run's core-seconds a message.
	cpu := func(s summary) float64 { return s.busy * float64(cores) / s.rate }
	most := float64(cores) / (cpu(rec) + cpu(raw))
	dur := func(sec float64) string { return mdtable.Dur(time.Duration(sec * float64(time.Second))) }
	return fmt.Sprintf("; the broker shares the %d cores with the database: the machine's CPU a message is %s with the recording publisher (%.0f%% busy) and %s with the raw publisher (%.0f%% busy), so a relay that overlapped both perfectly reaches at most %s msgs/s, %s of the recording relay; this one reaches %s of that bound",
		cores, dur(cpu(rec)), 100*rec.busy, dur(cpu(raw)), 100*raw.busy,
		mdtable.Thousands(most), mdtable.Ratio(most/rec.rate), mdtable.Ratio(relay/most))
}
