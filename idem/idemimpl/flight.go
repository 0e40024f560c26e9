package idemimpl

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/internal/pgutil"
)

// Deliveries of one key that are in flight in this process at once, through
// one pool. The first one takes a connection as every delivery does, waiting
// for one as long as its context allows (that is the pool's back-pressure);
// the others would wait for a connection only to wait again on the first
// one's claim, and with a small pool the wait for a connection can be as long
// as the first delivery's handler: they take their connection within the
// claim wait, and the claim wait is what is left of it (see acquire).

// A flight is keyed by the DB (Inbox.flightDB) as well as the key, since
// the wait it bounds is for a connection of that DB.
type flightKey struct {
	db       any
	consumer string
	key      string
}

var flights = struct {
	sync.Mutex
	n map[flightKey]int
}{n: map[flightKey]int{}}

// enterFlight records a delivery of k and reports whether another one is in
// flight already.
func enterFlight(k flightKey) (contended bool) {
	flights.Lock()
	n := flights.n[k]
	flights.n[k] = n + 1
	flights.Unlock()
	return n > 0
}

func leaveFlight(k flightKey) {
	flights.Lock()
	if n := flights.n[k]; n > 1 {
		flights.n[k] = n - 1
	} else {
		delete(flights.n, k)
	}
	flights.Unlock()
}

// keyID renders key parts as one comparable string: a single string part as
// itself (no allocation: the common case), others quoted and typed by
// formatKey, so that two different keys of one consumer never share one.
func keyID(key []any) string {
	if len(key) == 1 {
		if s, ok := key[0].(string); ok {
			return s
		}
	}
	return pgutil.FormatKey(nil, key)
}

// acquire takes the delivery's connection and returns the claim's
// lock_timeout. A contended delivery (another delivery of its key is in
// flight in this process) gets ErrInProgress when no connection comes within
// the claim wait, and a lock_timeout of what is left of it, so that its whole
// wait stays within the claim wait.
func (in *Inbox[M, R]) acquire(ctx context.Context, contended bool) (*pgxpool.Conn, any, error) {
	if !contended {
		c, err := in.db.Acquire(ctx)
		if err != nil {
			return nil, nil, fmt.Errorf("idem: acquire a connection: %w", err)
		}
		return c, in.lockWait, nil
	}
	began := time.Now()
	wait := max(in.claimWait, time.Millisecond)
	actx, cancel := context.WithTimeout(ctx, wait)
	c, err := in.db.Acquire(actx)
	timedOut := actx.Err() != nil && ctx.Err() == nil
	cancel()
	switch {
	case err != nil && timedOut:
		return nil, nil, fmt.Errorf("%w (waited %v for a connection while another delivery of the key, in this process, held one; see docs/poolers.md, Sizing the pool)",
			idem.ErrInProgress, wait)
	case err != nil:
		return nil, nil, fmt.Errorf("idem: acquire a connection: %w", err)
	}
	waited := time.Since(began)
	if waited < time.Millisecond {
		return c, in.lockWait, nil
	}
	return c, lockTimeout(in.claimWait - waited), nil
}
