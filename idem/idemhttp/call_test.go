package idemhttp

import (
	"context"
	"testing"

	"github.com/idemgen/idemgen/idem"
)

type benchMsg struct{ ID string }

type benchResult struct{ N int }

// withResult and withoutResult have the two shapes of a generated
// wrapper's Handle.
type withResult struct{}

func (withResult) Deliver(context.Context, benchMsg) (idem.Outcome, error) {
	return idem.Processed, nil
}

func (withResult) Handle(_ context.Context, m benchMsg) (benchResult, idem.Outcome, error) {
	return benchResult{N: len(m.ID)}, idem.Duplicate, nil
}

type withoutResult struct{}

func (withoutResult) Deliver(context.Context, benchMsg) (idem.Outcome, error) {
	return idem.Processed, nil
}

func (withoutResult) Handle(context.Context, benchMsg) (idem.Outcome, error) {
	return idem.Duplicate, nil
}

type noneResult struct{ withResult }

func (noneResult) Handle(context.Context, benchMsg) (idem.None, idem.Outcome, error) {
	return idem.None{}, idem.Processed, nil
}

// TestHandleOf finds the result of a wrapper with one, none for a wrapper
// without one (or whose result is idem.None), and serves any other
// idem.Handler through Deliver.
func TestHandleOf(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		what      string
		h         idem.Handler[benchMsg]
		result    any
		hasResult bool
		outcome   idem.Outcome
	}{
		{"a wrapper with a result", withResult{}, benchResult{N: 3}, true, idem.Duplicate},
		{"a wrapper without one", withoutResult{}, nil, false, idem.Duplicate},
		{"a result of idem.None", noneResult{}, idem.None{}, false, idem.Processed},
		{"a decorator", idem.HandlerFunc[benchMsg](withResult{}.Deliver), nil, false, idem.Processed},
	} {
		r, has, o, err := handleOf(c.h)(ctx, benchMsg{ID: "abc"})
		if r != c.result || has != c.hasResult || o != c.outcome || err != nil {
			t.Errorf("%s: %v, %v, %v, %v; want %v, %v, %v", c.what, r, has, o, err, c.result, c.hasResult, c.outcome)
		}
	}
}

// BenchmarkHandleOf is what finding a wrapper's result through reflect
// costs a request, against a direct call.
func BenchmarkHandleOf(b *testing.B) {
	ctx := context.Background()
	msg := benchMsg{ID: "abc"}
	b.Run("reflect", func(b *testing.B) {
		h := handleOf[benchMsg](withResult{})
		for b.Loop() {
			_, _, _, _ = h(ctx, msg)
		}
	})
	b.Run("direct", func(b *testing.B) {
		w := withResult{}
		for b.Loop() {
			r, o, err := w.Handle(ctx, msg)
			_, _, _ = any(r), o, err
		}
	})
}
