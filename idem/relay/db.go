package relay

import (
	"context"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/generated/outboxdb"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/internal/pgutil"
)

// acquiringDB gives the relay's queries (outboxdb.DBTX) what a
// *pgxpool.Pool's Exec, Query and QueryRow do, for any [idem.DB]: each statement
// runs on a connection acquired for it and released once its result is
// read, so that a relay takes the same DB as the inboxes do.
type acquiringDB struct{ db idem.DB }

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

// relaxedCommit makes the transaction of a relay's round trip commit without
// waiting for its WAL flush. What a crash could then lose is a claim (the
// row is claimed again) or a mark (the row is published again, as when a
// relay dies before it marks): at least once still holds, and no round trip
// of the relay waits for the disk.
const relaxedCommit = "SELECT set_config('synchronous_commit', 'off', true)"

// localCommit is the commit of a round trip under WithReplicated: flushed on
// the primary, not waited for on a standby. A claim's replication point is
// before its commit record, so this flush sends the standbys every claimed
// row's commit at once, rather than when the WAL writer next flushes (up
// to wal_writer_delay later).
const localCommit = "SELECT set_config('synchronous_commit', 'local', true)"

// pipelined marks c's rows published (c nil: none) and claims the next batch
// with token, in one round trip: sqlc's MarkPublished and Claim (or
// ClaimOrdered) are queued on one batch (queueDB) after the commit setting,
// the batch runs as one transaction, and their results are read back in
// order (resultsDB), so that the claim sees the marks. Under WithReplicated
// the claim's replication point is read after it, in the same transaction.
// It returns how many of c's rows were marked, the claimed rows and their
// point. A round trip that fails once sent may have committed its claim:
// its token is kept, for releaseLost.
func (r *Relay) pipelined(ctx context.Context, c *confirmed, token claimToken) (int64, []claimedRow, replicationPoint, error) {
	var mark outboxdb.MarkPublishedParams
	var point replicationPoint
	var b pgx.Batch
	if r.o.replicated {
		b.Queue(localCommit)
	} else {
		b.Queue(relaxedCommit)
	}
	queue := outboxdb.New(queueDB{&b})
	if c != nil {
		mark = outboxdb.MarkPublishedParams{MessageIds: c.ids(), ClaimToken: c.token}
		_, _ = queue.MarkPublished(ctx, mark)
	}
	_, _ = r.claimWith(ctx, queue, token)
	if r.o.replicated {
		b.Queue(replicationPointSQL)
	}
	failed := func(err error) error {
		if c != nil {
			return r.markFailed(c, err)
		}
		return fmt.Errorf("idem: relay %s: claim: %w", r.o.id, err)
	}
	conn, err := r.db.Acquire(ctx)
	if err != nil {
		return 0, nil, point, failed(err)
	}
	defer conn.Release()
	sent := func(err error) error {
		r.lostClaims = append(r.lostClaims, token)
		return failed(err)
	}
	br := conn.SendBatch(ctx, &b)
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return 0, nil, point, sent(err)
	}
	read := outboxdb.New(resultsDB{br})
	var n int64
	if c != nil {
		if n, err = read.MarkPublished(ctx, mark); err != nil {
			_ = br.Close()
			return 0, nil, point, sent(err)
		}
	}
	rows, err := r.claimWith(ctx, read, token)
	if err == nil && r.o.replicated {
		if err = br.QueryRow().Scan(&point.lsn, &point.timeline); err != nil {
			err = fmt.Errorf("idem: relay %s: read the claim's WAL position (WithReplicated): %w", r.o.id, err)
		}
	}
	if closeErr := br.Close(); err == nil && closeErr != nil {
		err = failed(closeErr)
	}
	if err != nil {
		r.lostClaims = append(r.lostClaims, token)
		return 0, nil, point, err
	}
	return n, rows, point, nil
}

// queueDB is an outboxdb.DBTX that queues each statement on a batch instead
// of running it: a query returns no row and no error. Called again on a
// resultsDB of the sent batch, the same queries read their results.
type queueDB struct{ b *pgx.Batch }

func (q queueDB) Exec(_ context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	q.b.Queue(sql, args...)
	return pgconn.CommandTag{}, nil
}

func (q queueDB) Query(_ context.Context, sql string, args ...any) (pgx.Rows, error) {
	q.b.Queue(sql, args...)
	return pgutil.Fail(nil), nil
}

func (q queueDB) QueryRow(_ context.Context, sql string, args ...any) pgx.Row {
	q.b.Queue(sql, args...)
	return pgutil.Fail(nil)
}

// resultsDB is an outboxdb.DBTX that reads the next result of a sent batch
// for each statement, in the order they were queued (by queueDB).
type resultsDB struct{ br pgx.BatchResults }

func (d resultsDB) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	return d.br.Exec()
}

func (d resultsDB) Query(context.Context, string, ...any) (pgx.Rows, error) { return d.br.Query() }

func (d resultsDB) QueryRow(context.Context, string, ...any) pgx.Row { return d.br.QueryRow() }
