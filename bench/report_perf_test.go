package main

import (
	"strings"
	"testing"
	"time"

	"github.com/idemgen/idemgen/idem/relay"
)

// cellAt is a cell of one round: msgs messages in a second, each latency
// lat, the machine busy busy.
func cellAt(msgs int64, lat time.Duration, busy float64) *cell {
	return &cell{samples: []sample{{msgs: msgs, elapsed: time.Second, trips: 3 * msgs, latencies: []time.Duration{lat}, clientCPU: time.Duration(msgs) * 100 * time.Microsecond,
		serverCPU: time.Duration(msgs) * 200 * time.Microsecond, busy: busy}}}
}

// outboxWith is an outbox part of one round at 1 and 16 workers: the
// committing cells with and without NOTIFY at 16, a latency run at 200
// msgs/s whose messages took lat, and a single relay at relayRate.
func outboxWith(with, without int64, lat []time.Duration, relayRate int) *outboxResults {
	o := &outboxResults{workers: []int{1, 16}, cells: map[obxKey]*cell{}, latency: map[latencyKey][]latencyRun{}, relays: map[int][]relayRun{},
		relayNs: []int{1}, rates: []int{200}, poll: relay.DefaultPoll}
	o.cells[obxKey{obxVariant{1, true}, 16}] = cellAt(with, 20*time.Millisecond, 0.8)
	o.cells[obxKey{obxVariant{1, false}, 16}] = cellAt(without, 10*time.Millisecond, 0.9)
	o.latency[latencyKey{200, false}] = []latencyRun{{msgs: len(lat), elapsed: time.Duration(len(lat)) * time.Second / 200, lat: lat, busy: 0.3}}
	o.relays[1] = []relayRun{{relays: 1, rows: relayRate, elapsed: time.Second, busy: 0.7}}
	return o
}

// checkOnly checks that lines is one line of status want whose target holds
// what and whose measurement, bound or numbers behind hold has, and returns
// it.
func checkOnly(t *testing.T, name string, lines []target, want status, what, has string) target {
	t.Helper()
	if len(lines) != 1 {
		t.Fatalf("%s: %d lines, want one", name, len(lines))
	}
	l := lines[0]
	if l.status != want || !strings.Contains(l.text(), has) || !strings.Contains(l.what, what) {
		t.Errorf("%s: %v %q: %q; want %v, %q with %q", name, l.status, l.what, l.text(), want, what, has)
	}
	return l
}

// text is a line's measurement, bound and numbers behind it, one a line.
func (l target) text() string {
	s := l.measured + "\nbound " + l.bound.String()
	for _, f := range l.why {
		s += "\n" + f.label + ": " + f.value
	}
	return s
}

func repeat(d time.Duration, n int) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = d
	}
	return out
}

func TestNotifyTarget(t *testing.T) {
	cfg := &config{workers: []int{1, 16}}
	for _, c := range []struct {
		name          string
		with, without int64
		want          status
	}{{"0.95×", 950, 1000, met}, {"exactly 0.9×", 900, 1000, met}, {"0.57×", 570, 1000, missed}} {
		r := &report{cfg: cfg, outbox: outboxWith(c.with, c.without, repeat(time.Millisecond, 10), 1000)}
		l := r.notifyTarget()
		if l.status != c.want {
			t.Errorf("%s: %v, want %v (%s)", c.name, l.status, c.want, l.measured)
		}
		if l.what != "committing with the default NOTIFY ≥ 0.9× WithoutNotify at 16 workers" {
			t.Errorf("%s: target %q", c.name, l.what)
		}
		if c.want == missed && (!strings.Contains(l.text(), "with NOTIFY, p50 / p99: 20 ms / 20 ms\nwith NOTIFY, CPU a message, client + server: 300 µs") ||
			l.bound != bound{"1.00×", "CPU a message"}) {
			t.Errorf("%s: a miss without what bounds it: %s", c.name, l.text())
		}
		if len(l.busy) != 2 || l.busy[0] != 0.8 || l.busy[1] != 0.9 {
			t.Errorf("%s: busy %v, want the two cells' 0.8 and 0.9", c.name, l.busy)
		}
	}
	if l := (&report{cfg: cfg}).notifyTarget(); l.status != notRun || !strings.Contains(l.measured, "the outbox part did not run") {
		t.Errorf("without the outbox part: %v, %q; want not run", l.status, l.measured)
	}
}

func TestPublishLatencyTargets(t *testing.T) {
	cfg := &config{workers: []int{1, 16}}
	fast := repeat(time.Millisecond, 100)
	slowTail := append(repeat(time.Millisecond, 98), 80*time.Millisecond, 90*time.Millisecond) // p99 80 ms
	slowMedian := repeat(6*time.Millisecond, 100)
	for _, c := range []struct {
		name string
		lat  []time.Duration
		want status
		has  string
	}{
		{"1 ms", fast, met, "p50 1 ms, p99 1 ms\nbound \nmessages: 100"},
		{"a slow tail", slowTail, missed, "messages that waited over 50 ms: 2"},
		{"a slow median", slowMedian, missed, "p50 6 ms"},
	} {
		r := &report{cfg: cfg, outbox: outboxWith(1000, 1000, c.lat, 1000)}
		l := checkOnly(t, c.name, r.publishLatencyTargets(), c.want, "at 200 msgs/s", c.has)
		if len(l.busy) != 1 || l.busy[0] != 0.3 {
			t.Errorf("%s: busy %v, want the run's 0.3", c.name, l.busy)
		}
	}
	// The producers committed 100 messages in a second of the 200 asked:
	// fast latencies of a rate that was not reached miss the target.
	slow := outboxWith(1000, 1000, fast, 1000)
	slow.latency[latencyKey{200, false}][0].elapsed = time.Second
	l := checkOnly(t, "the rate not reached", (&report{cfg: cfg, outbox: slow}).publishLatencyTargets(), missed, "at 200 msgs/s",
		"p50 1 ms, p99 1 ms; 100 of 200 msgs/s\nbound 1,000 msgs/s (commits without relay)")
	checkOnly(t, "the rate not reached", []target{l}, missed, "at 200 msgs/s",
		"4 producers committed, msgs/s: 100 of the 200 asked\ndeliveries publishing a message committed at 16 workers, no relay running: 1,000 msgs/s")
	checkOnly(t, "without the outbox part", (&report{cfg: cfg}).publishLatencyTargets(), notRun, "p50 ≤ 5 ms", "the outbox part did not run")
}

func TestRelayVsRecordingTargets(t *testing.T) {
	cfg := &config{workers: []int{1, 16}}
	brokers := func(relay, raw int64) *brokersResults {
		b := &brokersResults{brokers: []string{"rabbitmq"}, relayRows: 10000, relay: map[brkKey]*cell{}}
		b.relay[brkKey{"rabbitmq", 0, false}] = cellAt(relay, 0, 0.6)
		b.relay[brkKey{"rabbitmq", 0, true}] = cellAt(raw, 0, 0.5)
		b.relay[brkKey{recordingName, 0, false}] = cellAt(10000, 0, 0.7)
		return b
	}
	for _, c := range []struct {
		name       string
		relay, raw int64
		want       status
		has        string
	}{
		{"0.9×", 9000, 20000, met, "0.90×\nbound \nthrough the adapter, msgs/s: 9,000"},
		{"the broker bounds it", 5000, 6000, missed, "bound 0.60× (raw publisher)"},
		{"the cores bound it", 5000, 20000, missed, "bound 1.05× (shared cores)"},
	} {
		r := &report{cfg: cfg, brokers: brokers(c.relay, c.raw)}
		l := checkOnly(t, c.name, r.relayVsRecordingTargets(), c.want, "relay through RabbitMQ ≥", c.has)
		if len(l.busy) != 2 || l.busy[0] != 0.6 || l.busy[1] != 0.7 {
			t.Errorf("%s: busy %v, want the adapter cell's 0.6 and the recording relay's 0.7", c.name, l.busy)
		}
	}
	checkOnly(t, "without brokers", (&report{cfg: cfg, outbox: outboxWith(1, 1, nil, 1)}).relayVsRecordingTargets(), notRun, "relay through each adapter", "the brokers part")
}

func TestBusyColumn(t *testing.T) {
	for _, c := range []struct {
		busy []float64
		want string
	}{{nil, ""}, {[]float64{0.834}, "83%"}, {[]float64{0.834, 0.831}, "83%"}, {[]float64{0.91, 0.78, 0.8}, "78–91%"}} {
		if got := busyRange(c.busy); got != c.want {
			t.Errorf("busy %v: %q, want %q", c.busy, got, c.want)
		}
	}
	tt := &targetTable{}
	tt.part("A part").add(target{doc: "x", what: "a", measured: "b", status: met, busy: []float64{0.5}})
	tt.add(target{what: "c", measured: "d", status: notRun})
	l := target{doc: "y", what: "e", measured: "f", status: missed, bound: bound{"0.5×", "g h"}, busy: []float64{0.5, 0.7}}
	l.why.add("i", "1")
	tt.add(l)
	want := "| target | measured | bound | busy | |\n| --- | --- | --- | ---: | --- |\n" +
		"| [a](docs/benchmarks.md#x) | b | | 50% | [met](#a-part) |\n" +
		"| c | d | | | not run |\n" +
		"| [e](docs/benchmarks.md#y) | f | 0.5× (g h) | 50–70% | [**missed**](#behind-the-targets-a-part) |\n"
	if got := tt.String(); got != want {
		t.Errorf("table:\n%s\nwant:\n%s", got, want)
	}
}

// TestBatchTargetSetBased checks the targets against bare batched: the
// set-based handler's line where the batch part has its cell, HandleBatch's
// always, and without the part a line not run.
func TestBatchTargetSetBased(t *testing.T) {
	part := func(setBased bool) *batchResults {
		b := &batchResults{size: 100, workers: []int{16}, cells: map[cellKey]*cell{}, cores: 2}
		for _, name := range []string{scBare, scBareBatched, scGenerated, scBatch, scDuplicate, scBatchDup} {
			b.cells[cellKey{name, 16}] = cellAt(1000, time.Millisecond, 0.5)
		}
		b.cells[cellKey{scBareBatched, 16}] = cellAt(10000, time.Millisecond, 0.5)
		if setBased {
			b.cells[cellKey{scBatchSet, 16}] = cellAt(8000, time.Millisecond, 0.6)
		}
		return b
	}
	cfg := &config{workers: []int{1, 16}, batchWorkers: []int{16}}
	againstBatched := func(b *batchResults) map[string]target {
		tt := &targetTable{}
		(&report{cfg: cfg, batch: b}).batchTargets(tt)
		lines := map[string]target{}
		for _, l := range tt.lines {
			switch {
			case strings.Contains(l.what, "bare batched") && strings.Contains(l.what, "set-based"):
				lines[scBatchSet] = l
			case strings.Contains(l.what, "bare batched"):
				lines[scBatch] = l
			}
		}
		return lines
	}
	with := againstBatched(part(true))
	if l := with[scBatchSet]; l.status != met || l.what != "set-based HandleBatch of 100 ≥ 0.6× bare batched at 16 workers" || l.busy[0] != 0.6 || l.bound.value != "" {
		t.Errorf("with the set-based scenario: %v %q %v %v; want met (0.80×) on its cell, no bound", l.status, l.what, l.busy, l.bound)
	}
	for name, lines := range map[string]map[string]target{"with the set-based scenario": with, "without it": againstBatched(part(false))} {
		if l := lines[scBatch]; l.status != missed || l.measured != "0.10×" || l.bound != (bound{"1.00×", "CPU a message"}) ||
			!strings.Contains(l.text(), "HandleBatch, round trips a message: 3.000") {
			t.Errorf("%s: HandleBatch %v %q; want its 0.10×, missed, with what bounds it", name, l.status, l.text())
		}
	}
	if _, ok := againstBatched(part(false))[scBatchSet]; ok {
		t.Error("a set-based line without its cell")
	}
}
