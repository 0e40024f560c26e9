package rabbitmq

import (
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

// TestAttemptOf: the attempt counts the retries (x-idem-attempt, or the
// x-death expiries without it) and the redeliveries of the copy
// (x-delivery-count, or the redelivered flag without it).
func TestAttemptOf(t *testing.T) {
	death := func(reason string, count int64) amqp.Table {
		return amqp.Table{"queue": "q.retry", "reason": reason, "count": count}
	}
	for _, c := range []struct {
		name string
		d    amqp.Delivery
		want int
	}{
		{"first delivery", amqp.Delivery{}, 1},
		{"redelivered, classic queue", amqp.Delivery{Redelivered: true}, 2},
		{"quorum queue, third delivery", amqp.Delivery{Redelivered: true, Headers: amqp.Table{"x-delivery-count": int64(2)}}, 3},
		{"a retry copy", amqp.Delivery{Headers: amqp.Table{HeaderAttempt: int32(3)}}, 3},
		{"a retry copy redelivered", amqp.Delivery{Redelivered: true, Headers: amqp.Table{HeaderAttempt: int32(3)}}, 4},
		{"a retry copy, quorum, delivered twice more", amqp.Delivery{Redelivered: true, Headers: amqp.Table{HeaderAttempt: int32(3), "x-delivery-count": int32(2)}}, 5},
		{"through a TTL queue without the header", amqp.Delivery{Headers: amqp.Table{"x-death": []any{death("expired", 2), death("rejected", 5)}}}, 3},
		{"the header wins over x-death", amqp.Delivery{Headers: amqp.Table{HeaderAttempt: int32(2), "x-death": []any{death("expired", 7)}}}, 2},
	} {
		if got := attemptOf(&c.d); got != c.want {
			t.Errorf("%s: attempt %d; want %d", c.name, got, c.want)
		}
	}
}
