// Package ops holds what an operator does to a database when something went
// wrong; idemgen's outbox and claims commands run it. Dead and Revive list
// the outbox rows dead-lettered after too many publish attempts and make
// them due again. Running and Release list the running claims of
// mode=external consumers and release one whose worker is gone or stuck.
//
// Every function works on one connection and refuses a server that is not
// a primary (pg_is_in_recovery()). A standby cannot take the writes, and
// what it lists may lag behind the primary. The command line only parses
// flags and prints what these functions return.
package ops

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrNotPrimary is wrapped by the error of every function of the package
// when the server is a standby (in recovery).
var ErrNotPrimary = errors.New("the server is not a primary")

// ErrNotFound is wrapped by the error for a table, a consumer, a row or a
// claim that is not in the database.
var ErrNotFound = errors.New("not found")

// kindError is an error of a kind callers branch on (ErrNotFound...) whose
// message says it without the kind's own words.
type kindError struct {
	kind error
	msg  string
}

func (e *kindError) Error() string { return e.msg }
func (e *kindError) Unwrap() error { return e.kind }

// errorf returns an error wrapping kind with the message format makes; the
// format takes no %w.
func errorf(kind error, format string, a ...any) error {
	return &kindError{kind: kind, msg: fmt.Sprintf(format, a...)}
}

// RowQuerier is what RequirePrimary asks through: a pgx connection, pool
// or transaction.
type RowQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// RequirePrimary returns an error wrapping ErrNotPrimary when the server q
// talks to is in recovery: a hot standby, or a server still replaying its
// WAL. It also returns the server's now().
func RequirePrimary(ctx context.Context, q RowQuerier) (time.Time, error) {
	var standby bool
	var now time.Time
	if err := q.QueryRow(ctx, "SELECT pg_is_in_recovery(), now()").Scan(&standby, &now); err != nil {
		return now, fmt.Errorf("ask the server whether it is a primary: %w", err)
	}
	if standby {
		return now, fmt.Errorf("%w: pg_is_in_recovery() is true, it is a standby that takes no writes and may lag behind the primary; "+
			"give the primary's URL (with several hosts, add target_session_attrs=read-write)", ErrNotPrimary)
	}
	return now, nil
}
