package main

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/bench/internal/mdtable"
	"github.com/idemgen/idemgen/bench/internal/stats"
	"github.com/idemgen/idemgen/examples/telemetry"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemimpl"
)

// The purge part's partitioned layout: the inbox of examples/telemetry is
// partitioned by the day of each reading's own time (partition=day
// time=TakenAt retain=336h). The day that has just passed the retention is
// given a partition (as the janitor made it then) with purgeRows rows, and
// the oldest kept day a hundredth of that; the workers deliver new readings
// through the generated wrapper, first without the purge, then while one
// RunOnce of idem.Janitor drops the expired day's partition. The same
// measurements as the DELETE-based purge: its time, the WAL written
// meanwhile, the workers' latencies with and without.

// partitionedPurge is what the partitioned layout measured.
type partitionedPurge struct {
	rows, keep      int
	seed            time.Duration
	without, during []time.Duration
	took            time.Duration
	report          idem.JanitorReport
	left, keptLeft  int64 // inbox rows after the drop; of them, the next day's seeded
	delivered       int64 // rows the workers' deliveries wrote
	// WAL: the server's WAL position moved walDuring bytes while the
	// janitor ran and walWithout while the workers delivered without it
	// (over deliveredWithout deliveries; deliveredDuring during the drop).
	walWithout, walDuring             int64
	deliveredWithout, deliveredDuring int64
}

// telemetryInbox is the inbox table of examples/telemetry.
const telemetryInbox = "idem_telemetry_reading"

// walPosition is the server's current WAL position.
func walPosition(ctx context.Context, db interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) (string, error) {
	var lsn string
	err := db.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&lsn)
	return lsn, err
}

// walSince is the WAL written since lsn, in bytes.
func walSince(ctx context.Context, db interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, lsn string) (int64, error) {
	var n int64
	err := db.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::text::pg_lsn)::bigint`, lsn).Scan(&n)
	return n, err
}

// runPurgePartitioned runs the partitioned layout in a fresh schema.
func runPurgePartitioned(ctx context.Context, cfg *config) (*partitionedPurge, error) {
	s, admin, err := newMigratedSchema(ctx, cfg.db, telemetry.Migrations())
	if err != nil {
		return nil, err
	}
	defer s.drop()
	defer admin.Close()
	res := &partitionedPurge{rows: cfg.purgeRows, keep: cfg.purgeRows / 100}
	now := time.Now()

	jpool, err := s.namedPool(ctx, 1, "idembench-janitor", nil)
	if err != nil {
		return nil, err
	}
	defer jpool.Close()
	quiet := idem.WithJanitorLogger(slog.New(slog.DiscardHandler))
	inbox := telemetry.NewRecordReadingIdem(jpool)
	if _, err := inbox.Purge(ctx); err != nil { // the partitions of the window at now
		return nil, fmt.Errorf("create the partitions: %w", err)
	}
	retain := inbox.Maintenance().Retain
	next := idemimpl.Day.Start(now.Add(-retain)) // the oldest day kept
	oldest := next.AddDate(0, 0, -1)             // the day that just expired
	// Its partition, named as the janitor names it (which is how the
	// janitor finds it again).
	if _, err := admin.Exec(ctx, fmt.Sprintf(`CREATE TABLE %s_p%s PARTITION OF %s FOR VALUES FROM ('%s') TO ('%s')`,
		telemetryInbox, oldest.Format("20060102"), telemetryInbox, oldest.Format(time.RFC3339), next.Format(time.RFC3339))); err != nil {
		return nil, fmt.Errorf("create the expired day's partition: %w", err)
	}

	logf("purge (partitioned): seeding %d rows in the expired day %s and %d in the next", res.rows, oldest.Format(time.DateOnly), res.keep)
	started := time.Now()
	for _, seed := range []struct {
		prefix string
		day    time.Time
		n      int
	}{{"expired-", oldest, res.rows}, {"kept-", next, res.keep}} {
		if _, err := admin.Exec(ctx, `INSERT INTO `+telemetryInbox+` (key_reading_id, bucket, fingerprint, status, created_at)
			SELECT $1 || g, $2::timestamptz, '\x01'::bytea || sha256(g::text::bytea), 'done', $2::timestamptz + g * interval '1 ms'
			FROM generate_series(1, $3::int) g`, seed.prefix, seed.day, seed.n); err != nil {
			return nil, fmt.Errorf("seed the rows of %s: %w", seed.day.Format(time.DateOnly), err)
		}
	}
	if _, err := admin.Exec(ctx, `VACUUM ANALYZE `+telemetryInbox); err != nil {
		return nil, err
	}
	res.seed = time.Since(started)

	pool, err := s.namedPool(ctx, cfg.purgeWorkers, "idembench-worker", nil)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	record := telemetry.NewRecordReadingIdem(pool)
	var seq, processed atomic.Int64
	deliver := func(stop <-chan struct{}) ([]time.Duration, error) {
		return deliverUntil(ctx, stop, cfg.purgeWorkers, func(w int) (time.Duration, bool, error) {
			n := seq.Add(1)
			msg := telemetry.Reading{ReadingID: "r-" + strconv.FormatInt(n, 10), DeviceID: "dev-" + strconv.FormatInt(n%1000, 10),
				TakenAt: time.Now(), Value: float64(n)}
			t0 := time.Now()
			outcome, err := record.Handle(ctx, msg)
			if err != nil || outcome != idem.Processed {
				return 0, false, fmt.Errorf("worker %d: %v, %v", w, outcome, err)
			}
			processed.Add(1)
			return time.Since(t0), true, nil
		})
	}

	logf("purge (partitioned): %d workers deliver for %s without the purge", cfg.purgeWorkers, cfg.purgeBaseline)
	lsn, err := walPosition(ctx, admin)
	if err != nil {
		return nil, err
	}
	stop := make(chan struct{})
	time.AfterFunc(cfg.purgeBaseline, func() { close(stop) })
	if res.without, err = deliver(stop); err != nil {
		return nil, err
	}
	if res.walWithout, err = walSince(ctx, admin, lsn); err != nil {
		return nil, err
	}
	res.deliveredWithout = processed.Load()

	j, err := idem.NewJanitor(jpool, []idem.Maintained{inbox}, quiet)
	if err != nil {
		return nil, err
	}
	logf("purge (partitioned): the janitor drops the day of %s while %d workers deliver", oldest.Format(time.DateOnly), cfg.purgeWorkers)
	stop = make(chan struct{})
	var janErr error
	var walErr error
	go func() {
		defer close(stop)
		// The workers run for a moment first, so that the drop meets them.
		time.Sleep(500 * time.Millisecond)
		var lsn string
		if lsn, walErr = walPosition(ctx, admin); walErr != nil {
			return
		}
		before := processed.Load()
		t0 := time.Now()
		res.report, janErr = j.RunOnce(ctx)
		res.took = time.Since(t0)
		res.walDuring, walErr = walSince(ctx, admin, lsn)
		res.deliveredDuring = processed.Load() - before
		// And for as long after it, so that the workers' latencies cover
		// what the drop leaves behind (a new plan, a cold cache).
		time.Sleep(500 * time.Millisecond)
	}()
	res.during, err = deliver(stop)
	if err != nil {
		return nil, err
	}
	if janErr != nil {
		return nil, janErr
	}
	if walErr != nil {
		return nil, walErr
	}
	res.delivered = processed.Load()
	if err := admin.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE key_reading_id LIKE 'kept-%') FROM `+telemetryInbox).Scan(&res.left, &res.keptLeft); err != nil {
		return nil, err
	}
	dropped := res.report.Dropped[telemetryInbox]
	logf("purge (partitioned): dropped %v (%d rows by the statistics) in %s, %s of WAL meanwhile; p99 %s without, %s during; %d rows left (%d kept + %d delivered)",
		dropped, res.report.Purged[telemetryInbox], res.took.Round(time.Millisecond), mdtable.IEC(float64(res.walDuring)),
		mdtable.Dur(stats.Percentile(res.without, 99)), mdtable.Dur(stats.Percentile(res.during, 99)), res.left, res.keptLeft, res.delivered)
	if len(dropped) != 1 || res.keptLeft != int64(res.keep) || res.left != int64(res.keep)+res.delivered {
		return nil, fmt.Errorf("the janitor dropped %v, want the one partition of %s; %d rows left, want %d kept + %d delivered",
			dropped, oldest.Format(time.DateOnly), res.left, res.keep, res.delivered)
	}
	return res, nil
}
