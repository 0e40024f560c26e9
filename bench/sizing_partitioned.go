package main

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/bench/internal/mdtable"
	"github.com/idemgen/idemgen/bench/internal/stats"
	"github.com/idemgen/idemgen/examples/telemetry"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemimpl"
)

// The sizing part's partitioned inbox: the inbox of examples/telemetry,
// partitioned by the day of each reading's own time (partition=day
// time=TakenAt retain=336h), in a schema of its own.
//
//   - WAL per delivery: cfg.walMsgs readings of today delivered through the
//     generated wrapper, and as many stored by the handler's INSERT alone
//     (no deduplication), counted as the plain inbox's (walMeter), each
//     cfg.walRepeats times, the median.
//   - bytes per row: the day that has just passed the retention gets its
//     partition (named as the janitor names it) and copies of the rows the
//     deliveries wrote (new keys of the same shape) until the inbox holds
//     cfg.sizeRows rows; after VACUUM ANALYZE, the sizes of every
//     partition's heap, indexes and TOAST, over the rows.
//   - the purge: one RunOnce of idem.Janitor drops that day's partition,
//     timed; its WAL is that of the transactions whose commit removes the
//     partition's files (walMeter.dropped) and of every record touching the
//     schema's relations meanwhile.

// partitionedInboxName is the partitioned inbox as the report shows it.
const partitionedInboxName = "partitioned by day (partition=day time=TakenAt, examples/telemetry); the janitor drops a day's partition past retain="

// sizePartitionedInbox measures the partitioned inbox.
func sizePartitionedInbox(ctx context.Context, cfg *config) (inboxSizing, error) {
	in := inboxSizing{name: partitionedInboxName, dropped: true}
	s, admin, err := newMigratedSchema(ctx, cfg.db, telemetry.Migrations())
	if err != nil {
		return in, err
	}
	defer s.drop()
	defer admin.Close()
	pool, err := s.namedPool(ctx, 1, "idembench-worker", nil)
	if err != nil {
		return in, err
	}
	defer pool.Close()
	record := telemetry.NewRecordReadingIdem(pool)
	if _, err := record.Purge(ctx); err != nil { // the partitions of the window at now
		return in, fmt.Errorf("create the partitions: %w", err)
	}
	in.retain = record.Maintenance().Retain
	now := time.Now()
	next := idemimpl.Day.Start(now.Add(-in.retain)) // the oldest day kept
	oldest := next.AddDate(0, 0, -1)                // the day that just expired
	if _, err := admin.Exec(ctx, fmt.Sprintf(`CREATE TABLE %s_p%s PARTITION OF %s FOR VALUES FROM ('%s') TO ('%s')`,
		telemetryInbox, oldest.Format("20060102"), telemetryInbox, oldest.Format(time.RFC3339), next.Format(time.RFC3339))); err != nil {
		return in, fmt.Errorf("create the expired day's partition: %w", err)
	}
	// Every partition is there now: the meter counts them all.
	wal, err := newWALMeter(ctx, admin, s.name)
	if err != nil {
		return in, err
	}
	var withWrapper, bare []float64
	n := cfg.walMsgs
	for rep := range cfg.walRepeats {
		reading := func(kind string, i int) telemetry.Reading {
			return telemetry.Reading{ReadingID: "r-" + kind + strconv.Itoa(rep) + "-" + strconv.Itoa(i), DeviceID: "dev-" + strconv.Itoa(i%1000), TakenAt: time.Now(), Value: float64(i)}
		}
		perMsg, err := walOf(ctx, wal, n, func(i int) error {
			outcome, err := record.Handle(ctx, reading("w", i))
			if err == nil && outcome != idem.Processed {
				err = fmt.Errorf("outcome %v, want %v", outcome, idem.Processed)
			}
			return err
		})
		if err != nil {
			return in, fmt.Errorf("partitioned inbox, a delivery: %w", err)
		}
		withWrapper = append(withWrapper, perMsg)
		if perMsg, err = walOf(ctx, wal, n, func(i int) error {
			msg := reading("b", i)
			_, err := pool.Exec(ctx, `INSERT INTO readings (reading_id, device_id, taken_at, value) VALUES ($1, $2, $3, $4)`, msg.ReadingID, msg.DeviceID, msg.TakenAt, msg.Value)
			return err
		}); err != nil {
			return in, fmt.Errorf("partitioned inbox, the INSERT alone: %w", err)
		}
		bare = append(bare, perMsg)
	}
	in.walFirst, in.walBare = stats.Median(withWrapper), stats.Median(bare)

	// The copies, in the expired day: every column but the key and the
	// times from a row the deliveries wrote.
	if _, err := admin.Exec(ctx, `WITH src AS (SELECT row_number() OVER () - 1 AS i, * FROM `+telemetryInbox+`), n AS (SELECT count(*) AS c FROM src)
		INSERT INTO `+telemetryInbox+` (key_reading_id, bucket, fingerprint, status, result, attempts, created_at, completed_at)
		SELECT 'r-x' || (100000 + g), $2::timestamptz, src.fingerprint, src.status, src.result, src.attempts,
		       $2::timestamptz + g * interval '1 ms', $2::timestamptz + g * interval '1 ms'
		FROM n, generate_series(1, $1::int - (SELECT c FROM n)::int) g JOIN src ON src.i = g % (SELECT c FROM n)`, cfg.sizeRows, oldest); err != nil {
		return in, fmt.Errorf("fill the partitioned inbox: %w", err)
	}
	if _, err := admin.Exec(ctx, "VACUUM ANALYZE "+telemetryInbox); err != nil {
		return in, err
	}
	if in.size, err = measurePartitioned(ctx, admin, telemetryInbox); err != nil {
		return in, err
	}
	expired := in.size.rows - int64(cfg.walRepeats*n)

	jpool, err := s.namedPool(ctx, 1, "idembench-janitor", nil)
	if err != nil {
		return in, err
	}
	defer jpool.Close()
	j, err := idem.NewJanitor(jpool, []idem.Maintained{telemetry.NewRecordReadingIdem(jpool)}, idem.WithJanitorLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return in, err
	}
	before, err := wal.position(ctx)
	if err != nil {
		return in, err
	}
	t0 := time.Now()
	if in.purge, err = j.RunOnce(ctx); err != nil {
		return in, fmt.Errorf("the janitor's drop: %w", err)
	}
	in.took = time.Since(t0)
	after, err := wal.position(ctx)
	if err != nil {
		return in, err
	}
	if in.purgeWAL, _, err = wal.between(ctx, before, after); err != nil {
		return in, err
	}
	var left int64
	if err := admin.QueryRow(ctx, `SELECT count(*) FROM `+telemetryInbox).Scan(&left); err != nil {
		return in, err
	}
	in.purged = in.size.rows - left
	dropped := in.purge.Dropped[telemetryInbox]
	logf("sizing: the janitor dropped %v (%d rows) in %s, %s of WAL", dropped, in.purged, in.took.Round(time.Millisecond), mdtable.IEC(float64(in.purgeWAL)))
	if len(dropped) != 1 || in.purged != expired {
		return in, fmt.Errorf("the janitor dropped %v, %d rows; want the one partition of %s, its %d rows", dropped, in.purged, oldest.Format(time.DateOnly), expired)
	}
	return in, nil
}

// walOf runs deliver n times and returns the schema's WAL per run.
func walOf(ctx context.Context, wal *walMeter, n int, deliver func(i int) error) (float64, error) {
	before, err := wal.position(ctx)
	if err != nil {
		return 0, err
	}
	for i := range n {
		if err := deliver(i); err != nil {
			return 0, err
		}
	}
	after, err := wal.position(ctx)
	if err != nil {
		return 0, err
	}
	total, _, err := wal.between(ctx, before, after)
	return float64(total) / float64(n), err
}

// measurePartitioned reads the rows of the partitioned table and the sizes
// of its partitions: their heaps together, each of the parent's indexes over
// every partition, and their TOAST tables.
func measurePartitioned(ctx context.Context, pool *pgxpool.Pool, table string) (tableSize, error) {
	return measureWith(ctx, pool, table, `
		WITH leaves AS (SELECT relid FROM pg_partition_tree($1::regclass) WHERE isleaf)
		SELECT 'heap (' || count(*) || ' partitions)', 'heap', sum(pg_relation_size(c.oid))::bigint, sum(pg_total_relation_size(c.oid))::bigint
		FROM leaves l JOIN pg_class c ON c.oid = l.relid
		UNION ALL
		SELECT 'TOAST', 'TOAST', COALESCE(sum(pg_relation_size(c.reltoastrelid) + COALESCE((SELECT sum(pg_relation_size(indexrelid)) FROM pg_index WHERE indrelid = c.reltoastrelid), 0)), 0)::bigint, 0
		FROM leaves l JOIN pg_class c ON c.oid = l.relid WHERE c.reltoastrelid <> 0
		UNION ALL
		(SELECT p.relname, 'index', sum(pg_relation_size(x.indexrelid))::bigint, 0
		 FROM leaves l JOIN pg_index x ON x.indrelid = l.relid JOIN pg_class p ON p.oid = pg_partition_root(x.indexrelid)
		 GROUP BY p.relname ORDER BY p.relname)`)
}
