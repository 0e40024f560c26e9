package rabbitmq

import (
	"context"
	"errors"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/consumer"
	"github.com/idemgen/idemgen/idem/internal/consume"
)

type fuzzOrder struct {
	OrderID string `json:"order_id"`
	Amount  int64  `json:"amount"`
}

// headerValue gives v the Go type kind picks among those an AMQP table
// holds.
func headerValue(kind uint8, s string, n int64) any {
	switch kind % 10 {
	case 0:
		return s
	case 1:
		return []byte(s)
	case 2:
		return int32(n)
	case 3:
		return n
	case 4:
		return n%2 == 0
	case 5:
		return float64(n) / 3
	case 6:
		return time.Unix(n%1e10, 0)
	case 7:
		return amqp.Table{"reason": s, "count": n}
	case 8:
		return []any{amqp.Table{"reason": "expired", "count": n}, s}
	default:
		return nil
	}
}

// FuzzDeliveryToMessage feeds arbitrary deliveries (body, message id, any
// header of any type, the attempt, x-delivery-count and x-death headers,
// the redelivered flag) through the consumer's mapping onto idem.Message:
// attemptOf, headerStrings and decode. No input may panic; the attempt is at
// least 1; a delivery is decoded (carrying its id, attempt and text headers)
// or rejected with idem.ErrUndecodablePayload, which dead-letters it.
func FuzzDeliveryToMessage(f *testing.F) {
	f.Add([]byte(`{"order_id":"o-1","amount":5}`), "m-1", "traceparent", "00-abc", uint8(0), int64(0), int64(0), false)
	f.Add([]byte(`{"order_id":`), "", "x-death", "expired", uint8(8), int64(3), int64(-1), true)
	f.Add([]byte(`[1,2]`), "\xff", HeaderAttempt, "7", uint8(0), int64(1), int64(2), true)
	f.Add([]byte(`{}`), "m", HeaderAttempt, "", uint8(3), int64(9223372036854775807), int64(9223372036854775807), true)
	f.Add(make([]byte, 2000), "m", "x-delivery-count", "", uint8(2), int64(-5), int64(0), false)
	c := NewConsumer[idem.Message[fuzzOrder]]("amqp://guest:guest@127.0.0.1:5672/", Topology{Queue: "fuzz"},
		idem.HandlerFunc[idem.Message[fuzzOrder]](func(context.Context, idem.Message[fuzzOrder]) (idem.Outcome, error) { return idem.Processed, nil }),
		consumer.WithMaxBodySize(1024))
	if c.err != nil {
		f.Fatal(c.err)
	}
	f.Fuzz(func(t *testing.T, body []byte, id, hk, hs string, kind uint8, n, count int64, redelivered bool) {
		d := amqp.Delivery{Body: body, MessageId: id, Redelivered: redelivered, Headers: amqp.Table{
			hk: headerValue(kind, hs, n), "x-delivery-count": count,
		}}
		attempt := attemptOf(&d)
		if attempt < 1 {
			t.Fatalf("attemptOf = %d for headers %v", attempt, d.Headers)
		}
		msg, err := consume.Decode[idem.Message[fuzzOrder]](d.Body, c.o.MaxBody, c.o.Decode, d.MessageId, attempt, func() map[string]string { return headerStrings(d.Headers) })
		if err != nil {
			if !errors.Is(err, idem.ErrUndecodablePayload) || idem.ActionFor(err) != idem.DeadLetter {
				t.Fatalf("decode: %v: not ErrUndecodablePayload, or not dead-lettered", err)
			}
			return
		}
		if msg.ID != id || msg.Attempt != attempt {
			t.Fatalf("decode: id %q attempt %d, want %q %d", msg.ID, msg.Attempt, id, attempt)
		}
		for k, v := range headerStrings(d.Headers) {
			if msg.Headers[k] != v {
				t.Fatalf("header %q = %q, want %q", k, msg.Headers[k], v)
			}
		}
	})
}
