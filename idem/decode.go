package idem

import (
	"fmt"
	"reflect"
)

// DecodeDelivery turns the payload of a broker delivery into a handler's
// message M, the same way in every adapter: a payload over maxBytes is not
// decoded; decode (json.Unmarshal by default in the adapters) fills M, or,
// when M is an [Envelope] such as [Message], its Body, and then the envelope
// gets the broker's message id, the attempt and the headers (headers is
// called only then). Every error wraps [ErrUndecodablePayload], so
// [ActionFor] dead-letters the delivery.
//
// For broker adapters (idem/rabbitmq, idem/jetstream, idem/kafka, or your
// own).
func DecodeDelivery[M any](payload []byte, maxBytes int, decode func(data []byte, v any) error,
	id string, attempt int, headers func() map[string]string) (M, error) {
	var msg M
	if len(payload) > maxBytes {
		return msg, fmt.Errorf("%w: the payload is %d bytes, more than the %d of WithMaxBodySize", ErrUndecodablePayload, len(payload), maxBytes)
	}
	target := any(&msg)
	if v := reflect.ValueOf(&msg).Elem(); v.Kind() == reflect.Pointer {
		// A pointer message (*Order, *idem.Message[Order]) is allocated
		// here, so that an envelope behind the pointer is one too.
		v.Set(reflect.New(v.Type().Elem()))
		target = v.Interface()
	}
	env, isEnvelope := target.(Envelope)
	if isEnvelope {
		target = env.BodyTarget()
	}
	if err := decode(payload, target); err != nil {
		return msg, fmt.Errorf("%w: %w", ErrUndecodablePayload, err)
	}
	if isEnvelope {
		env.SetDelivery(id, attempt, headers())
	}
	return msg, nil
}
