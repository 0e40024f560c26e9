package consume

import (
	"context"
	"time"
)

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
