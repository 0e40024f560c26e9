// Package wait holds the runtime's waits: a sleep that ends with its context
// and the jittered backoff of a retry.
package wait

import (
	"context"
	"math/rand/v2"
	"time"
)

// Sleep waits d or until ctx ends; it reports whether ctx is still live.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Backoff is the wait before the n-th retry (n >= 1) of something that
// failed: 50ms doubled per failure up to max, less up to a fifth of jitter.
// The jitter keeps workers that failed together from retrying together.
func Backoff(n int, max time.Duration) time.Duration {
	d := 50 * time.Millisecond
	for i := 1; i < n && d < max; i++ {
		d *= 2
	}
	d = min(d, max)
	return d - time.Duration(rand.Int64N(int64(d)/5+1))
}
