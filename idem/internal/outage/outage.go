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

// Log throttles the records of failures, per destination: at most one
// record of a failure per interval, and one when a failure that was
// recorded ends. A failure that begins and ends within an interval of the
// last record (a destination that flaps) writes nothing then; its count goes
// into the next record. The zero value is not usable; create it with New.
// Safe for concurrent use.
type Log struct {
	every time.Duration
	now   func() time.Time

	mu    sync.Mutex
	dests map[string]*dest
}

// dest is what the Log knows of a destination.
type dest struct {
	last    time.Time // of the last record
	carried int       // failures in no record yet, from failures that ended unrecorded
	f       *failure  // the failure under way; nil while the destination works
}

// failure is a destination's failure while it lasts.
type failure struct {
	since     time.Time
	first     error
	total     int  // failures since it began
	unlogged  int  // failures since the last record
	announced bool // a record said it began
}

// New returns a Log that writes a record at most every interval per
// destination (DefaultEvery when 0).
func New(every time.Duration) *Log {
	if every <= 0 {
		every = DefaultEvery
	}
	return &Log{every: every, now: time.Now, dests: map[string]*dest{}}
}

// Fail records a failure of n items (rows, deliveries) at destination. The
// first failure of an outage is logged at level, with msg and attrs, unless
// the destination's last record is less than an interval old; later ones
// only add to the count, written as one summary record per interval.
func (o *Log) Fail(ctx context.Context, l *slog.Logger, level slog.Level, destination string, n int, err error, msg string, attrs ...any) {
	now := o.now()
	o.mu.Lock()
	d := o.dests[destination]
	if d == nil {
		d = &dest{}
		o.dests[destination] = d
	}
	if d.f == nil {
		d.f = &failure{since: now, first: err}
	}
	f := d.f
	f.total += n
	f.unlogged += n
	if !d.last.IsZero() && now.Sub(d.last) < o.every {
		o.mu.Unlock()
		return
	}
	count := f.unlogged + d.carried
	f.unlogged, d.carried, d.last = 0, 0, now
	first := !f.announced
	f.announced = true
	total, since, firstErr := f.total, f.since, f.first
	o.mu.Unlock()
	if first {
		l.Log(ctx, level, msg, append(attrs, "destination", destination, "failed", count, "err", err)...)
		return
	}
	l.Log(ctx, level, msg+" (still failing; one record per interval)", "destination", destination,
		"failed", count, "failed_total", total, "failing_for", now.Sub(since).Round(time.Millisecond),
		"first_err", firstErr, "err", err, "interval", o.every)
}

// OK records a success at destination: when it ends a failure that a
// record announced, one record at level Info says so.
func (o *Log) OK(ctx context.Context, l *slog.Logger, destination string, msg string) {
	now := o.now()
	o.mu.Lock()
	d := o.dests[destination]
	if d == nil || d.f == nil {
		o.mu.Unlock()
		return
	}
	f := d.f
	d.f = nil
	if !f.announced {
		d.carried += f.unlogged
		o.mu.Unlock()
		return
	}
	d.last = now
	o.mu.Unlock()
	l.Log(ctx, slog.LevelInfo, msg, "destination", destination, "failed", f.unlogged, "failed_total", f.total,
		"failed_for", now.Sub(f.since).Round(time.Millisecond), "first_err", f.first)
}
