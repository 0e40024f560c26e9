package consumer_test

import (
	"context"
	"time"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/consumer"
	"github.com/idemgen/idemgen/idem/rabbitmq"
)

type order struct {
	OrderID string `json:"order_id"`
}

// The shared options and an adapter's own mix in one call. A key in
// progress (a worker that died holding a mode=external claim with lease=10m)
// is waited for up to WithMaxWait, beyond the budget of failures that
// WithMaxAttempts and the retry delay set.
func ExampleWithMaxWait() {
	var h idem.Handler[order] = idem.HandlerFunc[order](func(ctx context.Context, o order) (idem.Outcome, error) {
		return idem.Processed, nil
	})
	c := rabbitmq.NewConsumer("amqp://guest:guest@127.0.0.1:5672/", rabbitmq.Topology{Queue: "orders", RetryDelay: 5 * time.Second}, h,
		consumer.WithWorkers(8),
		consumer.WithMaxAttempts(10),         // failures: 10 attempts, 5s apart
		consumer.WithMaxWait(30*time.Minute), // a key in progress: 3 leases of 10m
		consumer.WithBatch(1, 0),             // one Deliver per delivery
		rabbitmq.WithPrefetch(16),
	)
	_ = c // c.Run(ctx) consumes until ctx ends
}
