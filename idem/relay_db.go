package idem

import (
	"context"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/generated/outboxdb"
	"github.com/idemgen/idemgen/idem/internal/pgutil"
)

// acquiringDB gives the relay's queries (outboxdb.DBTX) what a
// *pgxpool.Pool's Exec, Query and QueryRow do, for any [DB]: each statement
// runs on a connection acquired for it and released once its result is
// read, so that a relay takes the same DB as the inboxes do.
type acquiringDB struct{ db DB }

var _ outboxdb.DBTX = acquiringDB{}

func (a acquiringDB) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return pgutil.Exec(ctx, a.db, sql, args...)
}

func (a acquiringDB) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	c, err := a.db.Acquire(ctx)
	if err != nil {
		return pgutil.Fail(err), err
	}
	rows, err := c.Query(ctx, sql, args...)
	if err != nil {
		c.Release()
		return pgutil.Fail(err), err
	}
	return &releasingRows{Rows: rows, c: c}, nil
}

func (a acquiringDB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	c, err := a.db.Acquire(ctx)
	if err != nil {
		return pgutil.Fail(err)
	}
	return releasingRow{row: c.QueryRow(ctx, sql, args...), c: c}
}

// releasingRows releases its connection when the rows are done: read to
// their end or closed.
type releasingRows struct {
	pgx.Rows
	c    *pgxpool.Conn
	once sync.Once
}

func (r *releasingRows) release() { r.once.Do(r.c.Release) }

func (r *releasingRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.release()
	return false
}

func (r *releasingRows) Close() {
	r.Rows.Close()
	r.release()
}

// releasingRow releases its connection once scanned.
type releasingRow struct {
	row pgx.Row
	c   *pgxpool.Conn
}

func (r releasingRow) Scan(dest ...any) error {
	defer r.c.Release()
	return r.row.Scan(dest...)
}
