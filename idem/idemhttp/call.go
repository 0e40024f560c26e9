package idemhttp

import (
	"context"
	"reflect"

	"github.com/idemgen/idemgen/idem"
)

// handleFunc runs one request's message: the result to answer with (and
// whether there is one), the outcome and the error.
type handleFunc[M any] func(ctx context.Context, msg M) (result any, hasResult bool, o idem.Outcome, err error)

// noResult is the Handle of a generated wrapper whose handler has no
// result.
type noResult[M any] interface {
	Handle(ctx context.Context, msg M) (idem.Outcome, error)
}

var (
	contextType = reflect.TypeFor[context.Context]()
	outcomeType = reflect.TypeFor[idem.Outcome]()
	errorType   = reflect.TypeFor[error]()
	noneType    = reflect.TypeFor[idem.None]()
)

// handleOf returns how Handler runs a message through h, which the
// compiler has checked is an idem.Handler of M. A generated wrapper has a
// Handle method besides Deliver, of one of two shapes:
//
//	Handle(ctx, msg M) (R, idem.Outcome, error) // a handler with a result
//	Handle(ctx, msg M) (idem.Outcome, error)    // a handler without one
//
// The first is found by its shape, once, with reflect, since its R is not a
// type parameter of Handler: every generated wrapper then serves, whatever
// its result type. The result is only encoded as JSON, which needs no
// static type. Any other idem.Handler (a decorator) is served through
// Deliver, without a result.
func handleOf[M any](h idem.Handler[M]) handleFunc[M] {
	if nr, ok := h.(noResult[M]); ok {
		return func(ctx context.Context, msg M) (any, bool, idem.Outcome, error) {
			o, err := nr.Handle(ctx, msg)
			return nil, false, o, err
		}
	}
	if m := reflect.ValueOf(h).MethodByName("Handle"); m.IsValid() && hasResultShape[M](m.Type()) {
		hasResult := m.Type().Out(0) != noneType
		return func(ctx context.Context, msg M) (any, bool, idem.Outcome, error) {
			out := m.Call([]reflect.Value{reflect.ValueOf(&ctx).Elem(), reflect.ValueOf(&msg).Elem()})
			err, _ := out[2].Interface().(error)
			return out[0].Interface(), hasResult, idem.Outcome(out[1].Uint()), err
		}
	}
	return func(ctx context.Context, msg M) (any, bool, idem.Outcome, error) {
		o, err := h.Deliver(ctx, msg)
		return nil, false, o, err
	}
}

// hasResultShape reports whether t is func(context.Context, M) (R,
// idem.Outcome, error), a method value's type.
func hasResultShape[M any](t reflect.Type) bool {
	return t.NumIn() == 2 && t.In(0) == contextType && t.In(1) == reflect.TypeFor[M]() && !t.IsVariadic() &&
		t.NumOut() == 3 && t.Out(1) == outcomeType && t.Out(2) == errorType
}
