package idem

import "context"

// Handler is what a broker adapter's consumer calls for each decoded
// message: it delivers msg and reports the outcome, the result dropped. What
// the consumer then does with the delivery is ActionFor(err).
//
// Every generated wrapper satisfies
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

// None is the result type of handlers that return only an error: their inbox
// rows store no result.
//
// A generated wrapper whose handler has no result is built on it: its Handle
// returns no result, and its DeliverBatch returns a Result[None] per message.
type None struct{}

// Result is the outcome of one message of a batch (HandleBatch): what Handle
// would have returned for it. Ack the message exactly when Err is nil.
type Result[R any] struct {
	Value   R
	Outcome Outcome
	Err     error
}

// BatchHandler is a [Handler] that also delivers many messages at once, as
// broker adapters do with what their broker hands them together (a
// JetStream fetch, a Kafka poll, a RabbitMQ prefetch): DeliverBatch returns
// one Result per message, in input order, and each message is acked or
// nacked by its own (ActionFor(r.Err)). Every generated tx-mode wrapper
// satisfies it.
type BatchHandler[M any] interface {
	Handler[M]
	DeliverBatch(ctx context.Context, msgs []M) []Result[None]
}
