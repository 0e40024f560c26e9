package jetstream_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgen/idemgen/idem/idemtest/brokertest"
	idemjs "github.com/idemgen/idemgen/idem/jetstream"
)

// The tests run against a real NATS server with JetStream:
// IDEMGEN_TEST_NATS_URL, the local server at 127.0.0.1:4222, or a throwaway
// nats-server started from the machine (brokertest.NATSURL says which, and
// Main stops it).
func TestMain(m *testing.M) { os.Exit(brokertest.Main(m)) }

var natsURL = brokertest.NATSURL

// connect opens a NATS connection that reconnects forever, closed when the
// test ends, and its JetStream.
func connect(t testing.TB, url string, opts ...nats.Option) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	opts = append([]nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond), nats.Name(t.Name())}, opts...)
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// uniqueName returns a name no other test run uses, for streams, consumers
// and subjects (letters, digits, "_" and "-" only).
func uniqueName(t testing.TB) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := strings.NewReplacer("/", "-", " ", "-", ".", "-").Replace(t.Name())
	return "idemtest-" + name + "-" + hex.EncodeToString(b[:])
}

// topology is a fresh topology for the test: stream, subject, durable
// consumer, dead-letter subject and stream all named uniquely.
func topology(t testing.TB) idemjs.Topology {
	name := uniqueName(t)
	return idemjs.Topology{Stream: name, Subjects: []string{name + ".orders"}, Consumer: "billing", AckWait: 5 * time.Second}
}

// declare declares top and deletes its streams (and so the consumer) when
// the test ends.
func declare(t testing.TB, url string, top idemjs.Topology) {
	t.Helper()
	_, js := connect(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := idemjs.Declare(ctx, js, top); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		nc, err := nats.Connect(url)
		if err != nil {
			t.Errorf("delete the streams of %s: %v", top.Stream, err)
			return
		}
		defer nc.Close()
		js, _ := jetstream.New(nc)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, s := range []string{top.Stream, top.DeadLetterStreamName()} {
			if err := js.DeleteStream(ctx, s); err != nil {
				t.Errorf("delete stream %s: %v", s, err)
			}
		}
	})
}

// publish publishes data to subject with id as Nats-Msg-Id (none when id is
// empty) and returns the PubAck.
func publish(t testing.TB, js jetstream.JetStream, subject, id string, data []byte) *jetstream.PubAck {
	t.Helper()
	m := &nats.Msg{Subject: subject, Data: data, Header: nats.Header{}}
	if id != "" {
		m.Header.Set(jetstream.MsgIDHeader, id)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ack, err := js.PublishMsg(ctx, m)
	if err != nil {
		t.Fatalf("publish %q to %s: %v", id, subject, err)
	}
	return ack
}

// streamMsgs returns every message stream holds, in order.
func streamMsgs(t testing.TB, js jetstream.JetStream, stream string) []*jetstream.RawStreamMsg {
	t.Helper()
	// Each request has 5s of its own: thousands of them, one at a time, on
	// a loaded machine take longer than any one budget for them all.
	const perRequest = 5 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), perRequest)
	s, err := js.Stream(ctx, stream)
	cancel()
	if err != nil {
		t.Fatalf("stream %s: %v", stream, err)
	}
	info := s.CachedInfo()
	var out []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		ctx, cancel := context.WithTimeout(context.Background(), perRequest)
		m, err := s.GetMsg(ctx, seq)
		cancel()
		if err != nil {
			t.Fatalf("stream %s message %d: %v", stream, seq, err)
		}
		out = append(out, m)
	}
	return out
}

// consumerInfo returns the durable consumer's state.
func consumerInfo(t testing.TB, js jetstream.JetStream, top idemjs.Topology) *jetstream.ConsumerInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := js.Consumer(ctx, top.Stream, top.Consumer)
	if err != nil {
		t.Fatalf("consumer %s: %v", top.Consumer, err)
	}
	return c.CachedInfo()
}

// settled reports whether the durable consumer has nothing pending and
// nothing unacked.
func settled(t testing.TB, js jetstream.JetStream, top idemjs.Topology) bool {
	ci := consumerInfo(t, js, top)
	return ci.NumPending == 0 && ci.NumAckPending == 0
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The consumer's database side, its recorded handler, its logs and the
// helpers that run it are the adapters' shared ones (idem/idemtest/brokertest):
// an inbox keyed on the Nats-Msg-Id (key=ID of an idem.Message[order]) and a
// charge per order, counted in charged.

type (
	order    = brokertest.Order
	recorder = brokertest.Recorder
)

var (
	charges            = brokertest.NewCharges("test.jetstream.charge", "idem_js_charge")
	chargeInbox        = charges.Inbox
	database           = charges.Database
	queryInt           = brokertest.QueryInt
	newLogs            = brokertest.NewLogs
	checkAttemptLogged = brokertest.CheckAttemptLogged
	run                = brokertest.Run
	waitFor            = brokertest.WaitFor
	describe           = brokertest.Describe
)
