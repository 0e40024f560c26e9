package idem

import "context"

// Handler is what a broker adapter's consumer calls for each decoded
// message: it delivers msg and reports the outcome, the result dropped. What
// the consumer then does with the delivery is ActionFor(err).
//
// Every generated wrapper, every [Inbox] and every [ExternalInbox] satisfy
// it, whatever their result type, so that an adapter takes a wrapper
// directly and user code can wrap or decorate handlers uniformly (see
// [HandlerFunc]).
type Handler[M any] interface {
	Deliver(ctx context.Context, msg M) (Outcome, error)
}

// HandlerFunc adapts a function to a [Handler], for decorators: a handler
// that logs, counts or traces around another one.
type HandlerFunc[M any] func(ctx context.Context, msg M) (Outcome, error)

// Deliver calls f.
func (f HandlerFunc[M]) Deliver(ctx context.Context, msg M) (Outcome, error) {
	return f(ctx, msg)
}

// Deliver is Handle with the result dropped: it makes an Inbox a
// [Handler] of M.
func (in *Inbox[M, R]) Deliver(ctx context.Context, msg M) (Outcome, error) {
	_, o, err := in.Handle(ctx, msg)
	return o, err
}
