package jetstream

import (
	"context"
	"errors"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/consumer"
	"github.com/idemgen/idemgen/idem/internal/consume"
)

type fuzzOrder struct {
	OrderID string `json:"order_id"`
	Amount  int64  `json:"amount"`
}

// fuzzMsg is a JetStream message with the data and headers a fuzz input
// gives; the consumer's mapping reads nothing else.
type fuzzMsg struct {
	jetstream.Msg
	data []byte
	h    nats.Header
}

func (m fuzzMsg) Data() []byte         { return m.data }
func (m fuzzMsg) Headers() nats.Header { return m.h }

// FuzzMsgToMessage feeds arbitrary messages (data, the Nats-Msg-Id header,
// any header with any values) through the consumer's mapping onto
// idem.Message: headerStrings and decode. No input may panic; a message is
// decoded (carrying its id, attempt and the first value of each header) or
// rejected with idem.ErrUndecodablePayload, which dead-letters it.
func FuzzMsgToMessage(f *testing.F) {
	f.Add([]byte(`{"order_id":"o-1","amount":5}`), "m-1", "traceparent", "00-abc", "", 1)
	f.Add([]byte(`{"order_id":`), "", "", "", "second", 3)
	f.Add([]byte(`"just a string"`), "\xff", "Nats-Msg-Id", "\x00", "\xfe", 0)
	f.Add(make([]byte, 2000), "m", "h", "v", "w", -1)
	c := NewConsumer[idem.Message[fuzzOrder]](nil, Topology{Stream: "fuzz", Consumer: "fuzz"},
		idem.HandlerFunc[idem.Message[fuzzOrder]](func(context.Context, idem.Message[fuzzOrder]) (idem.Outcome, error) { return idem.Processed, nil }),
		consumer.WithMaxBodySize(1024))
	f.Fuzz(func(t *testing.T, data []byte, id, hk, hv, hv2 string, attempt int) {
		h := nats.Header{}
		if id != "" {
			h.Set(jetstream.MsgIDHeader, id)
		}
		if hk != "" {
			h[hk] = []string{hv, hv2}
		}
		msg := fuzzMsg{data: data, h: h}
		mid := msg.Headers().Get(jetstream.MsgIDHeader)
		m, err := consume.Decode[idem.Message[fuzzOrder]](msg.Data(), c.o.MaxBody, c.o.Decode, mid, attempt, func() map[string]string { return headerStrings(msg.Headers()) })
		if err != nil {
			if !errors.Is(err, idem.ErrUndecodablePayload) || idem.ActionFor(err) != idem.DeadLetter {
				t.Fatalf("decode: %v: not ErrUndecodablePayload, or not dead-lettered", err)
			}
			return
		}
		if m.ID != mid || m.Attempt != attempt {
			t.Fatalf("decode: id %q attempt %d, want %q %d", m.ID, m.Attempt, mid, attempt)
		}
		for k, v := range h {
			if m.Headers[k] != v[0] {
				t.Fatalf("header %q = %q, want the first value %q", k, m.Headers[k], v[0])
			}
		}
	})
}
