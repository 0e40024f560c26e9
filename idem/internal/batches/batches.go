// Package batches holds what idem's broker adapters share when they deliver
// a batch to an idem.BatchHandler.
package batches

import (
	"context"
	"fmt"
	"time"

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

// Collect returns first and what ch sends after it, at most max in all:
// what ch holds already, then what arrives within linger of the first,
// until ctx ends or stop closes (a nil stop never does). open is false once
// ch is closed.
func Collect[T any](ctx context.Context, stop <-chan struct{}, ch <-chan T, first T, max int, linger time.Duration) (batch []T, open bool) {
	batch = append(make([]T, 0, max), first)
	var expired <-chan time.Time
	if linger > 0 {
		t := time.NewTimer(linger)
		defer t.Stop()
		expired = t.C
	}
	for len(batch) < max {
		select {
		case v, ok := <-ch:
			if !ok {
				return batch, false
			}
			batch = append(batch, v)
			continue
		default:
		}
		if expired == nil {
			return batch, true
		}
		select {
		case v, ok := <-ch:
			if !ok {
				return batch, false
			}
			batch = append(batch, v)
		case <-expired:
			return batch, true
		case <-ctx.Done():
			return batch, true
		case <-stop:
			return batch, true
		}
	}
	return batch, true
}
