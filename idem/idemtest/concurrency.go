package idemtest

import (
	"context"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Warm opens n connections of pool at once and returns them to it, so that
// concurrent deliveries do not queue behind connection setup: a cold pool
// serialises the first deliveries, and a check-then-act consumer then passes
// a concurrency test it should fail.
func Warm(t testing.TB, pool *pgxpool.Pool, n int) {
	t.Helper()
	conns := make([]*pgxpool.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for range n {
		c, err := pool.Acquire(context.Background())
		if err != nil {
			t.Fatalf("idemtest: open %d connections: %v", n, err)
		}
		conns = append(conns, c)
	}
}

// AtOnce calls f(0) to f(n-1) in n goroutines released together once all of
// them are running, and waits for them to return.
func AtOnce(n int, f func(i int)) {
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			ready.Done()
			<-start
			f(i)
		}()
	}
	ready.Wait()
	close(start)
	done.Wait()
}
