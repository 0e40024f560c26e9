package consume

import (
	"sync"
	"time"
)

// Waits remembers, in this process, the deliveries that waited for a key in
// progress, by the broker's position of the message (a stream sequence, a
// partition offset): how many of their deliveries were waits, which the
// broker counts and WithMaxAttempts does not, and since when they wait.
// Safe for concurrent use.
type Waits[K comparable] struct {
	mu    sync.Mutex
	waits map[K]wait
}

type wait struct {
	n     int
	since time.Time
}

// NewWaits returns an empty Waits.
func NewWaits[K comparable]() *Waits[K] { return &Waits[K]{waits: map[K]wait{}} }

// Of returns how many deliveries of k were waits and since when it waits
// (zero: it does not).
func (w *Waits[K]) Of(k K) (n int, since time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	v := w.waits[k]
	return v.n, v.since
}

// Wait records one more wait of k.
func (w *Waits[K]) Wait(k K, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	v := w.waits[k]
	if v.since.IsZero() {
		v.since = now
	}
	v.n++
	w.waits[k] = v
}

// Forget drops k: it was settled for good.
func (w *Waits[K]) Forget(k K) {
	w.mu.Lock()
	delete(w.waits, k)
	w.mu.Unlock()
}

// Prune drops what waits since before cutoff (another consumer settled
// it), so that the map stays small.
func (w *Waits[K]) Prune(cutoff time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for k, v := range w.waits {
		if v.since.Before(cutoff) {
			delete(w.waits, k)
		}
	}
}
