// Package batches holds what idem's broker adapters share when they deliver
// a batch to an idem.BatchHandler.
package batches

import (
	"context"
	"fmt"

	"github.com/idemgen/idemgen/idem"
)

// Deliver is h.DeliverBatch(ctx, msgs), with an error for every message
// when h does not return one result per message (so that none is acked on
// a result it did not get). adapter names the caller in that error.
func Deliver[M any](ctx context.Context, adapter string, h idem.BatchHandler[M], msgs []M) []idem.Result[idem.None] {
	results := h.DeliverBatch(ctx, msgs)
	if len(results) == len(msgs) {
		return results
	}
	err := fmt.Errorf("%s: DeliverBatch returned %d results for %d messages", adapter, len(results), len(msgs))
	results = make([]idem.Result[idem.None], len(msgs))
	for i := range results {
		results[i].Err = err
	}
	return results
}
