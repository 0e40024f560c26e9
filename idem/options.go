package idem

import (
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// DefaultClaimWait is how long a delivery waits, by default, for another
// delivery of the same key that holds the claim, before it gives up with
// ErrInProgress.
const DefaultClaimWait = 2 * time.Second

// An Option configures an Inbox.
type Option func(*options)

type options struct {
	isolation pgx.TxIsoLevel
	claimWait time.Duration
}

// WithIsolation runs the handler's transaction at the given isolation level
// instead of the server's default_transaction_isolation.
func WithIsolation(level pgx.TxIsoLevel) Option {
	return func(o *options) { o.isolation = level }
}

// WithClaimWait bounds how long a delivery waits for a concurrent delivery of
// the same key to commit or roll back (a lock_timeout on the claim only; the
// handler's own statements keep the session's setting). When the bound
// passes, Handle returns ErrInProgress and holds the connection no longer.
// d <= 0 means do not wait at all.
func WithClaimWait(d time.Duration) Option {
	return func(o *options) { o.claimWait = d }
}

// lockTimeout renders the claim wait as a lock_timeout value. PostgreSQL reads
// 0 as "no timeout", so "do not wait" becomes the smallest timeout it has.
func (o options) lockTimeout() string {
	ms := o.claimWait.Milliseconds()
	if ms < 1 {
		ms = 1
	}
	return strconv.FormatInt(ms, 10) + "ms"
}
