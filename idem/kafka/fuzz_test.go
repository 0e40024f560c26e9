package kafka

import (
	"context"
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/consumer"
	"github.com/idemgen/idemgen/idem/internal/consume"
)

type fuzzOrder struct {
	OrderID string `json:"order_id"`
	Amount  int64  `json:"amount"`
}

// FuzzRecordToMessage feeds arbitrary records (value, key, the
// idem-message-id and attempt headers, any other header) through the
// consumer's mapping onto idem.Message: messageID, attempt, headerStrings and
// decode. No input may panic; the attempt is at least 1; a record is decoded
// (carrying its id, attempt and headers) or rejected with
// idem.ErrUndecodablePayload, which dead-letters it.
func FuzzRecordToMessage(f *testing.F) {
	f.Add([]byte(`{"order_id":"o-1","amount":5}`), []byte("o-1"), "m-1", true, "3", "traceparent", []byte("00-abc"), 0)
	f.Add([]byte(`{"order_id":`), []byte(nil), "", false, "", "", []byte(nil), 2)
	f.Add([]byte(`null`), []byte("\xff"), "\x00", true, "-7", HeaderAttempt, []byte("9223372036854775807"), 1<<30)
	f.Add(make([]byte, 2000), []byte("k"), "m", true, "99999999999999999999", "h", []byte{0xff}, -1)
	c := NewConsumer[idem.Message[fuzzOrder]]([]string{"127.0.0.1:1"}, "fuzz", []string{"fuzz"},
		idem.HandlerFunc[idem.Message[fuzzOrder]](func(context.Context, idem.Message[fuzzOrder]) (idem.Outcome, error) { return idem.Processed, nil }),
		consumer.WithMaxBodySize(1024))
	if c.err != nil {
		f.Fatal(c.err)
	}
	f.Fuzz(func(t *testing.T, value, key []byte, id string, withID bool, attemptHdr, hk string, hv []byte, retries int) {
		r := &kgo.Record{Value: value, Key: key, Topic: "fuzz", Headers: []kgo.RecordHeader{{Key: HeaderAttempt, Value: []byte(attemptHdr)}, {Key: hk, Value: hv}}}
		if withID {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: HeaderMessageID, Value: []byte(id)})
		}
		pos := position{topic: r.Topic, partition: r.Partition, offset: r.Offset}
		c.mu.Lock()
		c.retries[pos] = max(retries%1000, 0)
		c.mu.Unlock()
		attempt := c.attempt(r, pos)
		if attempt < 1 {
			t.Fatalf("attempt = %d for headers %v", attempt, r.Headers)
		}
		mid := messageID(r)
		msg, err := consume.Decode[idem.Message[fuzzOrder]](r.Value, c.o.MaxBody, c.o.Decode, mid, attempt, func() map[string]string { return headerStrings(r.Headers) })
		if err != nil {
			if !errors.Is(err, idem.ErrUndecodablePayload) || idem.ActionFor(err) != idem.DeadLetter {
				t.Fatalf("decode: %v: not ErrUndecodablePayload, or not dead-lettered", err)
			}
			return
		}
		if msg.ID != mid || msg.Attempt != attempt {
			t.Fatalf("decode: id %q attempt %d, want %q %d", msg.ID, msg.Attempt, mid, attempt)
		}
		for k, v := range headerStrings(r.Headers) {
			if msg.Headers[k] != v {
				t.Fatalf("header %q = %q, want %q", k, msg.Headers[k], v)
			}
		}
	})
}
