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

// notRunTarget is the line of a target whose cells did not run: doc is the
// anchor of its explanation, parts the parts it reads that were not
// selected.
func notRunTarget(doc, what string, parts ...string) target {
	return target{doc: doc, what: what, status: notRun,
		measured: fmt.Sprintf("the %s %s did not run (`-parts`)", strings.Join(parts, " and "), plural(len(parts), "part"))}
}

// highestOf names the highest of the concurrencies ns, those of flag, for
// a line whose part did not run.
func highestOf(ns []int, flag string) string {
	if len(ns) == 0 {
		return "the highest " + flag
	}
	return fmt.Sprintf("%d workers", slices.Max(ns))
}

// notifyTarget is "committing throughput with the default NOTIFY ≥ 0.9×
// WithoutNotify" at the outbox part's highest concurrency.
func (r *report) notifyTarget() target {
	o := r.outbox
	what := func(workers string) string {
		return fmt.Sprintf("committing with the default NOTIFY ≥ %.1f× WithoutNotify at %s", targetNotifyVsWithout, workers)
	}
	if o == nil {
		return notRunTarget("notify-and-committing-throughput", what(highestOf(r.cfg.workers, "-workers")), "outbox")
	}
	n := slices.Max(o.workers)
	wc, oc := o.cell(obxVariant{1, true}, n), o.cell(obxVariant{1, false}, n)
	with, without := wc.summary(), oc.summary()
	q := with.rate / without.rate
	l := target{doc: "notify-and-committing-throughput", what: what(fmt.Sprintf("%d workers", n)), measured: cellRatio(wc, oc), status: verdict(q >= targetNotifyVsWithout), busy: busyOf(wc, oc)}
	l.why.add("with NOTIFY, msgs/s", "%s", mdtable.Thousands(with.rate))
	l.why.add("WithoutNotify, msgs/s", "%s", mdtable.Thousands(without.rate))
	if q < targetNotifyVsWithout {
		byCPU := float64(cpuPerMsg(without)) / float64(cpuPerMsg(with))
		for _, c := range []struct {
			name string
			s    summary
		}{{"with NOTIFY", with}, {"WithoutNotify", without}} {
			l.why.add(c.name+", p50 / p99", "%s / %s", mdtable.Dur(c.s.p50), mdtable.Dur(c.s.p99))
			l.why.add(c.name+", CPU a message, client + server", "%s", mdtable.Dur(cpuPerMsg(c.s)))
		}
		l.why.add("what the CPU a message allows on saturated cores, with ÷ without", "%s", mdtable.Ratio(byCPU))
		l.bound = bound{mdtable.Ratio(byCPU), "CPU a message"}
	}
	return l
}

// publishLatencyTargets are "commit-to-publish p50 ≤ 5 ms and p99 ≤ 50 ms",
// one line per message rate of the outbox part's latency runs, with the
// relay woken by NOTIFY and its default poll.
func (r *report) publishLatencyTargets() []target {
	o := r.outbox
	what := func(rate string) string {
		return fmt.Sprintf("commit-to-publish at %s msgs/s: p50 ≤ %s, p99 ≤ %s", rate, mdtable.Dur(targetPublishP50), mdtable.Dur(targetPublishP99))
	}
	const doc = "commit-to-publish-latency"
	if o == nil {
		return []target{notRunTarget(doc, what("each -obxrate"), "outbox")}
	}
	var lines []target
	for _, rate := range o.latencyRates() {
		runs := o.latencyRuns(rate, false)
		lat := pooledLatencies(runs)
		if len(lat) == 0 {
			lines = append(lines, target{doc: doc, what: what(mdtable.Int(rate)), status: notRun, measured: "no latency run at this rate"})
			continue
		}
		p50, p99 := stats.Percentile(lat, 50), stats.Percentile(lat, 99)
		_, achieved := pooledRate(runs)
		// A rate the producers did not reach is not the cell the target
		// names: the latencies are those of a saturated machine.
		reached := achieved >= latencyRateReached*float64(rate)
		ok := reached && p50 <= targetPublishP50 && p99 <= targetPublishP99
		l := target{doc: doc, what: what(mdtable.Int(rate)), measured: fmt.Sprintf("p50 %s, p99 %s", mdtable.Dur(p50), mdtable.Dur(p99)), status: verdict(ok)}
		l.why.add("messages", "%s", mdtable.Int(len(lat)))
		l.why.add("the relay, woken by NOTIFY, polls every", "%s", o.poll)
		if o.poll != relay.DefaultPoll {
			l.why.add("the default poll, which -obxpoll changed", "%s", relay.DefaultPoll)
		}
		if !reached {
			l.measured += fmt.Sprintf("; %s of %s msgs/s", mdtable.Thousands(achieved), mdtable.Int(rate))
			l.why.add(fmt.Sprintf("%d producers committed, msgs/s", latencyProducers(rate)), "%s of the %s asked", mdtable.Thousands(achieved), mdtable.Int(rate))
			if most, ok := r.publishingCapacity(&l.why); ok {
				l.bound = bound{mdtable.Thousands(most) + " msgs/s", "commits without relay"}
			}
		}
		if !ok {
			late := len(lat) - countAtMost(lat, targetPublishP99)
			l.why.add("p90", "%s", mdtable.Dur(stats.Percentile(lat, 90)))
			l.why.add("max", "%s", mdtable.Dur(lat[len(lat)-1]))
			l.why.add("messages that waited over "+mdtable.Dur(targetPublishP99), "%s", mdtable.Int(late))
		}
		for _, run := range runs {
			l.busy = append(l.busy, run.busy)
		}
		lines = append(lines, l)
	}
	return lines
}

// latencyRateReached is the share of a latency run's rate its producers must
// commit for its latencies to be those of that rate.
const latencyRateReached = 0.95

// publishingCapacity adds to why what the outbox part's first-delivery
// cells commit at their highest concurrency with one outgoing message a
// delivery, with and without NOTIFY and with no relay running: what bounds
// the producers of a latency run, which run beside the relay. It returns
// the rate with NOTIFY, ok when the cells ran.
func (r *report) publishingCapacity(why *facts) (float64, bool) {
	o := r.outbox
	n := slices.Max(o.workers)
	wc, oc := o.cell(obxVariant{1, true}, n), o.cell(obxVariant{1, false}, n)
	if wc == nil || oc == nil {
		return 0, false
	}
	most := wc.summary().rate
	why.add(fmt.Sprintf("deliveries publishing a message committed at %d workers, no relay running", n), "%s msgs/s", mdtable.Thousands(most))
	why.add("the same, WithoutNotify", "%s msgs/s", mdtable.Thousands(oc.summary().rate))
	return most, true
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
		return fmt.Sprintf("relay through %s ≥ %.1f× the relay with a recording publisher", broker, targetRelayVsRecording)
	}
	const doc = "the-relay-through-a-broker"
	if r.brokers == nil {
		return []target{notRunTarget(doc, what("each adapter"), "brokers")}
	}
	b := r.brokers
	rec := b.relayCell(recordingName, false)
	if rec == nil || len(rec.samples) == 0 {
		return []target{{doc: doc, what: what("each adapter"), status: notRun, measured: "the brokers part ran no relay with the recording publisher"}}
	}
	recRate := rec.summary().rate
	var lines []target
	for _, name := range b.brokers {
		rl, raw := b.relayCell(name, false), b.relayCell(name, true)
		a, c := rl.summary(), raw.summary()
		q := a.rate / recRate
		l := target{doc: doc, what: what(brokerShort(name)), measured: cellRatio(rl, rec), status: verdict(q >= targetRelayVsRecording), busy: busyOf(rl, rec)}
		l.why.add("through the adapter, msgs/s", "%s", mdtable.Thousands(a.rate))
		l.why.add("with the recording publisher, msgs/s", "%s", mdtable.Thousands(recRate))
		if q < targetRelayVsRecording {
			// The lower of two bounds: the broker's own rate (the raw
			// publisher's), and the cores it shares with the database.
			l.why.add("the raw publisher, every message confirmed, msgs/s", "%s", mdtable.Thousands(c.rate))
			l.why.add("the raw publisher ÷ the recording relay", "%s", mdtable.Ratio(c.rate/recRate))
			l.why.add("the relay ÷ the raw publisher", "%s", mdtable.Ratio(a.rate/c.rate))
			l.bound = bound{mdtable.Ratio(c.rate / recRate), "raw publisher"}
			if most, ok := sharedCores(rec.summary(), c, &l.why); ok {
				l.why.add("the relay ÷ that bound", "%s", mdtable.Ratio(a.rate/most))
				if most < c.rate {
					l.bound = bound{mdtable.Ratio(most / recRate), "shared cores"}
				}
			}
		}
		lines = append(lines, l)
	}
	return lines
}

// sharedCores adds to why what the machine's cores allow a relay through a
// broker that runs beside the database on them: the machine's CPU a message
// (its busy share of every core, over the rate) of the relay with the
// recording publisher, which is the database's and the relay's work, plus
// that of the raw publisher, which is the broker's and its client's. A relay
// that overlapped the two perfectly still pays both, so on saturated cores
// it reaches at most one message per their sum. It returns that rate, ok
// when both runs have a busy share.
func sharedCores(rec, raw summary, why *facts) (float64, bool) {
	if rec.busy <= 0 || raw.busy <= 0 || rec.rate <= 0 || raw.rate <= 0 {
		return 0, false
	}
	cores := runtime.NumCPU()
	// cpu is a run's core-seconds a message.
	cpu := func(s summary) float64 { return s.busy * float64(cores) / s.rate }
	most := float64(cores) / (cpu(rec) + cpu(raw))
	dur := func(sec float64) string { return mdtable.Dur(time.Duration(sec * float64(time.Second))) }
	why.add(fmt.Sprintf("the machine's CPU a message, recording publisher (%s busy, %d cores)", mdtable.Percent(rec.busy), cores), "%s", dur(cpu(rec)))
	why.add(fmt.Sprintf("the machine's CPU a message, raw publisher (%s busy)", mdtable.Percent(raw.busy)), "%s", dur(cpu(raw)))
	why.add("what the shared cores allow a relay that overlapped both perfectly", "%s msgs/s", mdtable.Thousands(most))
	why.add("that bound ÷ the recording relay", "%s", mdtable.Ratio(most/rec.rate))
	return most, true
}
