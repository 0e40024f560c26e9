// Package outage keeps the log of a failure that repeats (a broker that
// refuses connections, a database that is down) readable: the first failure
// is logged in full, then at most one summary record per interval while the
// failure lasts (how many failed, the first error, the destination), and one
// record when it recovers. The relay and the broker adapters' consumers use
// it for their failing batches and retries.
package outage

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// DefaultEvery is the interval between two summary records of a failure
// that lasts.
const DefaultEvery = 10 * time.Second

// Log throttles the records of failures, per destination. The zero value is
// not usable; create it with New. Safe for concurrent use.
type Log struct {
	every time.Duration
	now   func() time.Time

	mu    sync.Mutex
	dests map[string]*failure
}

// failure is a destination's failure while it lasts.
type failure struct {
	since    time.Time
	first    error
	total    int // failures since it began
	unlogged int // failures since the last record
	logged   time.Time
}

// New returns a Log that writes a summary at most every interval (DefaultEvery
// when 0).
func New(every time.Duration) *Log {
	if every <= 0 {
		every = DefaultEvery
	}
	return &Log{every: every, now: time.Now, dests: map[string]*failure{}}
}

// Fail records a failure of n items (rows, deliveries) at destination. The
// first failure of an outage is logged at once at level, with msg and
// attrs; later ones only add to the count, written as one summary record
// per interval.
func (o *Log) Fail(ctx context.Context, l *slog.Logger, level slog.Level, destination string, n int, err error, msg string, attrs ...any) {
	now := o.now()
	o.mu.Lock()
	f := o.dests[destination]
	if f == nil {
		f = &failure{since: now, first: err, logged: now, total: n}
		o.dests[destination] = f
		o.mu.Unlock()
		l.Log(ctx, level, msg, append(attrs, "destination", destination, "err", err)...)
		return
	}
	f.total += n
	f.unlogged += n
	if now.Sub(f.logged) < o.every {
		o.mu.Unlock()
		return
	}
	count, total, since, first := f.unlogged, f.total, f.since, f.first
	f.unlogged, f.logged = 0, now
	o.mu.Unlock()
	l.Log(ctx, level, msg+" (still failing; one record per interval)", "destination", destination,
		"failed", count, "failed_total", total, "failing_for", now.Sub(since).Round(time.Millisecond),
		"first_err", first, "err", err, "interval", o.every)
}

// OK records a success at destination: when it ends a failure, one record
// says so at level Info.
func (o *Log) OK(ctx context.Context, l *slog.Logger, destination string, msg string) {
	o.mu.Lock()
	f := o.dests[destination]
	if f == nil {
		o.mu.Unlock()
		return
	}
	delete(o.dests, destination)
	o.mu.Unlock()
	l.Log(ctx, slog.LevelInfo, msg, "destination", destination, "failed_total", f.total,
		"failed_for", o.now().Sub(f.since).Round(time.Millisecond), "first_err", f.first)
}

// Failing reports whether destination is failing.
func (o *Log) Failing(destination string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.dests[destination] != nil
}
