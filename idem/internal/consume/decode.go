package consume

import (
	"fmt"
	"reflect"

	"github.com/idemgen/idemgen/idem"
)

// Envelope is implemented by *idem.Message[T], so that Decode fills its Body
// and gives it the delivery's id, attempt and headers.
type Envelope interface {
	SetDelivery(id string, attempt int, headers map[string]string)
	BodyTarget() any
}

var _ Envelope = (*idem.Message[struct{}])(nil)

// Decode turns the payload of a delivery into a handler's message M, the
// same way in every adapter: a payload over maxBytes is not decoded; decode
// fills M, or, when M is an Envelope such as idem.Message, its Body, and
// then the envelope gets the broker's message id, the attempt and the
// headers (headers is called only then). Every error wraps
// idem.ErrUndecodablePayload, so idem.ActionFor dead-letters the delivery.
func Decode[M any](payload []byte, maxBytes int, decode func(data []byte, v any) error,
	id string, attempt int, headers func() map[string]string) (M, error) {
	var msg M
	if len(payload) > maxBytes {
		return msg, fmt.Errorf("%w: the payload is %d bytes, more than the %d of WithMaxBodySize", idem.ErrUndecodablePayload, len(payload), maxBytes)
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
		return msg, fmt.Errorf("%w: %w", idem.ErrUndecodablePayload, err)
	}
	if isEnvelope {
		var h map[string]string
		if headers != nil {
			h = headers()
		}
		env.SetDelivery(id, attempt, h)
	}
	return msg, nil
}
