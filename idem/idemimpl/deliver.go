package idemimpl

import (
	"context"

	"github.com/idemgen/idemgen/idem"
)

// Deliver is Handle with the result dropped: it makes an Inbox a
// [idem.Handler] of M.
func (in *Inbox[M, R]) Deliver(ctx context.Context, msg M) (idem.Outcome, error) {
	_, o, err := in.Handle(ctx, msg)
	return o, err
}
