package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/idemgen/idemgen/idem/internal/wait"
)

// The wait of WithReplicated: a claimed batch is published once a standby
// has flushed the WAL up to the claim.
//
// A failover of an asynchronously replicated database loses the commits
// that the promoted standby had not received. A message the relay published
// from such a commit outlives it. The delivery that wrote it runs again on
// the new primary and writes the row again. The message id is the same
// (derived from the delivery's key); the payload may not be (a new charge
// id). The next consumer then gets two messages under one key, or one about
// an effect that no longer exists. Under WithReplicated the relay reads the
// WAL insert position right after the claim, in its transaction: past the
// commit record of every row it could see. It hands the batch to the
// publisher only once a standby streaming from the primary reports a flush
// position at or past it.

// replicationPoint is where a claim was in the WAL: its insert position
// (pg_lsn as text) and the primary's timeline then.
type replicationPoint struct{ lsn, timeline string }

// replicationPointSQL reads the point, in the claim's transaction, after
// the claim. A commit is visible once its commit record is inserted (with
// synchronous_commit off, before it is flushed), so the insert position
// after the claim is past every claimed row's commit. The timeline is the
// first 8 hex digits of the WAL file name at that position.
const replicationPointSQL = `SELECT pg_current_wal_insert_lsn()::text,
       substr(pg_walfile_name(pg_current_wal_insert_lsn()), 1, 8)`

// standbyFlushSQL reads whether a physical standby streaming from the
// server reports a flush position at or past $1 (pg_stat_replication's
// flush_lsn), how many stream, how many report a position, the furthest
// position reported, and the server's timeline. A role without
// pg_read_all_stats sees a walsender's state and positions as NULL: it is
// counted as streaming and not reporting (as a standby before its first
// reply is). Logical walsenders (those connected to a database) are not
// standbys a failover promotes. The statistics views are not in sqlc's
// catalog, hence a constant here.
const standbyFlushSQL = `SELECT substr(pg_walfile_name(pg_current_wal_insert_lsn()), 1, 8),
       count(*)::integer,
       count(r.flush_lsn)::integer,
       coalesce(max(r.flush_lsn) >= $1::text::pg_lsn, false),
       coalesce(max(r.flush_lsn)::text, '')
FROM pg_stat_replication AS r
JOIN pg_stat_activity AS a ON a.pid = r.pid
WHERE coalesce(r.state, 'streaming') = 'streaming'
  AND a.datid IS NULL`

// standbys is what standbyFlushSQL read.
type standbys struct {
	timeline           string
	streaming, reports int
	flushed            bool
	flushLSN           string
}

// Bounds of the replication wait's polling: the first poll comes at once,
// the next after replicatedPollMin, doubled up to replicatedPollMax.
const (
	replicatedPollMin = time.Millisecond
	replicatedPollMax = 20 * time.Millisecond
	// replicatedWarnAfter is how long a batch waits before the wait is
	// logged (then once per outage.DefaultEvery while it lasts).
	replicatedWarnAfter = time.Second
)

// replicationKey is the outage log's destination of the replication wait.
const replicationKey = "replication"

// Why a replication wait goes on, as its log records say.
var (
	errNoStandby     = errors.New("no standby streams from the primary: nothing is published until one does")
	errNoFlushShown  = errors.New("standbys stream, but none shows its flush position: the relay's role needs pg_read_all_stats (or pg_monitor) to read pg_stat_replication.flush_lsn")
	errStandbyBehind = errors.New("no standby has flushed the claim's WAL position yet")
	// errFailedOver ends a wait: the database failed over since the claim,
	// whose commits may be lost; the new primary's relays publish what it
	// has.
	errFailedOver = errors.New("idem: relay: the database failed over (a new timeline) after the claim; the batch is not published from this claim")
)

// waitReplicated waits until a standby reports f's claim point flushed
// (nil), ctx ends (its cause), or the database is found on another
// timeline (errFailedOver). A database it cannot reach is polled again: a
// restart keeps the timeline and the claim. The keeper renews the lease
// meanwhile, and ends ctx if it cannot.
func (r *Relay) waitReplicated(ctx context.Context, f *flight) error {
	began := time.Now()
	delay := replicatedPollMin
	warned := false
	for {
		st, err := r.standbyFlush(ctx, f.point.lsn)
		switch {
		case err == nil && st.timeline != f.point.timeline:
			return fmt.Errorf("%w (claimed on timeline %s at %s, now timeline %s)", errFailedOver, f.point.timeline, f.point.lsn, st.timeline)
		case err == nil && st.flushed:
			if warned {
				r.outages.OK(ctx, r.o.logger, replicationKey, "idem relay: a standby has flushed the claimed rows; publishing")
			}
			return nil
		case ctx.Err() != nil:
			return context.Cause(ctx)
		}
		if waited := time.Since(began); waited >= replicatedWarnAfter {
			why := err
			switch {
			case err != nil:
			case st.streaming == 0:
				why = errNoStandby
			case st.reports == 0:
				why = errNoFlushShown
			default:
				why = errStandbyBehind
			}
			r.outages.Fail(ctx, r.o.logger, slog.LevelWarn, replicationKey, len(f.rows), why,
				"idem relay waits for a standby to flush the claimed rows before it publishes them (WithReplicated)",
				"relay", r.o.id, "rows", len(f.rows), "claim_lsn", f.point.lsn, "standbys", st.streaming,
				"flush_lsn", st.flushLSN, "waited", waited.Round(time.Millisecond))
			warned = true
		}
		if !wait.Sleep(ctx, delay) {
			return context.Cause(ctx)
		}
		delay = min(2*delay, replicatedPollMax)
	}
}

// standbyFlush runs standbyFlushSQL on a connection of the relay's DB.
func (r *Relay) standbyFlush(ctx context.Context, lsn string) (standbys, error) {
	var st standbys
	err := acquiringDB{r.db}.QueryRow(ctx, standbyFlushSQL, lsn).Scan(&st.timeline, &st.streaming, &st.reports, &st.flushed, &st.flushLSN)
	if err != nil {
		return st, fmt.Errorf("idem: relay %s: read the standbys' flush positions: %w", r.o.id, err)
	}
	return st, nil
}
