package idem

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"
)

// DB is what a generated wrapper's constructor needs of the database. *pgxpool.Pool satisfies it, and so does a wrapper of one
// that a user writes: to instrument or limit the connections the runtime
// takes, to choose a pool per tenant or region, or, in a test, to count or
// fail acquires.
//
// Its one method is all the runtime uses:
//
//   - Acquire, for each delivery: the claim, the handler and the commit run in
//     one transaction, which must stay on one connection for its whole
//     length, and the runtime works on that connection itself (it reads its
//     transaction status, and closes it when a rollback fails, so that the
//     pool discards it rather than hand out a connection in an unknown
//     state). That takes a *pgx.Conn, which only a *pgxpool.Conn gives for
//     the time of a delivery and takes back on Release; hence the concrete
//     result type, which also lets *pgxpool.Pool satisfy DB as it is. Purge
//     acquires a connection for each batch it deletes, as the pool's own
//     Exec would.
//
// Nothing else is asked of it: no Exec, Query or Begin, which a delivery
// does on its acquired connection, and no Close, which is the owner's.
//
// When several deliveries of one key are in flight in this process at once
// through one DB, all but the first wait for a connection only within the
// claim wait ([WithClaimWait]). DBs are told apart with ==, so a DB whose
// dynamic type is not comparable counts as a DB of its own for each wrapper
// built on it.
type DB interface {
	Acquire(ctx context.Context) (*pgxpool.Conn, error)
}

var _ DB = (*pgxpool.Pool)(nil)
