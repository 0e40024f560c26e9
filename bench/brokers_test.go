package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/idemgen/idemgen/bench/internal/mdtable"
	"github.com/idemgen/idemgen/idem/idemtest"
)

// TestBrokersPart runs the brokers part tiny against the real RabbitMQ and
// NATS (and kfake, in-process) and the real PostgreSQL: every cell must
// measure its messages (the checks inside the cells, one inbox key per
// message, nothing left unacked, the destination holding exactly the
// backlog, run too), the Watermill comparison must deliver every message
// once on each side, and the report must hold every table without a
// missing number.
func TestBrokersPart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cfg := &config{
		db: idemtest.DatabaseURL(t), rounds: 1, workers: []int{1, 3}, accounts: 100,
		duration: time.Second, warmup: 500 * time.Millisecond, obxRates: []int{100},
		brokers: brokerNames, brkMsgs: 200, peerMsgs: 60,
		amqpURL: envOr("IDEMGEN_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/"),
		natsURL: envOr("IDEMGEN_TEST_NATS_URL", "nats://127.0.0.1:4222"),
	}
	res, err := runBrokers(ctx, cfg)
	if err != nil {
		t.Fatalf("the brokers part: %v\n(it needs RabbitMQ at %s and NATS with JetStream at %s; set IDEMGEN_TEST_AMQP_URL or IDEMGEN_TEST_NATS_URL to point elsewhere)", err, cfg.amqpURL, cfg.natsURL)
	}
	for _, b := range brokerNames {
		for _, n := range cfg.workers {
			for _, raw := range []bool{false, true} {
				c := res.consumeCell(b, n, raw)
				if len(c.samples) != 1 || c.samples[0].msgs != 180 || !(c.samples[0].rate() > 0) {
					t.Errorf("%s consume %s at %d: samples %+v; want one of 180 measured messages (200 less the first tenth)", b, rawName(raw), n, c.samples)
					continue
				}
				t.Logf("%s consume %s at %d: %.0f msgs/s", b, rawName(raw), n, c.samples[0].rate())
			}
		}
		for _, raw := range []bool{false, true} {
			c := res.relayCell(b, raw)
			if len(c.samples) != 1 || c.samples[0].msgs != 200 || !(c.samples[0].rate() > 0) {
				t.Errorf("%s %s: samples %+v; want one of 200 messages", b, relayName(raw), c.samples)
				continue
			}
			t.Logf("%s %s: %.0f msgs/s", b, relayName(raw), c.samples[0].rate())
		}
	}
	if c := res.relayCell(recordingName, false); len(c.samples) != 1 || c.samples[0].msgs != 200 || !(c.samples[0].rate() > 0) {
		t.Errorf("relay.Relay with the recording publisher: samples %+v; want one of 200 messages", c.samples)
	}
	for si, side := range peerSides {
		for _, mode := range peerModes {
			runs := res.peer.runs[peerKey{si, mode}]
			want := 60
			if mode == modeSteady {
				want = 100 // 1s at 100 msgs/s after the warm-up
			}
			if len(runs) != 1 || runs[0].msgs != want || len(runs[0].lat) != want || runs[0].dups != 0 || !(runs[0].rate() > 0) {
				t.Errorf("%s %s: runs %+v; want one of %d messages, each received once", side.name, mode, runs, want)
				continue
			}
			lat := runs[0].lat
			t.Logf("%s %s: %.0f msgs/s, first latency %s", side.name, mode, runs[0].rate(), lat[0])
		}
	}
	md := string((&report{cfg: cfg, brokers: res}).markdown())
	checkTargets(t, md)
	for _, want := range []string{"## Brokers", "### Consuming", "### Publishing", "### Against Watermill's outbox", "RabbitMQ", "NATS JetStream", "Kafka (kfake, in-process)", "### Behind the targets: Brokers"} {
		if !strings.Contains(md, want) {
			t.Errorf("the report lacks %q", want)
		}
	}
	for _, bad := range []string{"NaN", "Inf", "| – |", "%!"} {
		if strings.Contains(md, bad) {
			t.Errorf("the report holds %q:\n%s", bad, md)
		}
	}
}

// TestProgress checks the timing of a consume cell: the first tenth is the
// warm-up, the measurement ends at the last message, and a failure ends the
// wait.
func TestProgress(t *testing.T) {
	p := newProgress(20)
	for range 2 {
		p.add()
	}
	time.Sleep(5 * time.Millisecond)
	for range 18 {
		p.add()
	}
	select {
	case <-p.done:
	default:
		t.Fatal("20 of 20 messages: not done")
	}
	if p.tWarm.IsZero() || !p.tEnd.After(p.tWarm) || p.tEnd.Sub(p.tWarm) < 5*time.Millisecond {
		t.Fatalf("warm-up ended %v, last message %v; want the 5ms pause inside", p.tWarm, p.tEnd)
	}
	f := newProgress(10)
	f.fail(context.Canceled)
	f.fail(context.DeadlineExceeded)
	select {
	case <-f.done:
	default:
		t.Fatal("a failure did not end the wait")
	}
	if f.failed != context.Canceled {
		t.Fatalf("failed %v, want the first failure", f.failed)
	}
}

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"amqp://guest:guest@127.0.0.1:5672/": "amqp://guest@127.0.0.1:5672/",
		"amqp://127.0.0.1:5672/":             "amqp://127.0.0.1:5672/",
		"nats://127.0.0.1:4222":              "nats://127.0.0.1:4222",
	} {
		if got := redactURL(in); got != want {
			t.Errorf("redactURL(%q) = %q, want %q", in, got, want)
		}
	}
	if got := mdtable.Ratio(0.0061); got != "0.006×" {
		t.Errorf("mdtable.Ratio(0.0061) = %q, want 0.006×", got)
	}
}
