// Package partition keeps the partitions of a time-bucketed inbox
// (partition= and time= in the directive): the inbox is a table partitioned
// by range of its bucket column, the start of the time bucket of each
// message's own timestamp, and each bucket is one partition. Maintain
// creates the partitions of the kept window and a few buckets ahead, and
// drops those wholly past the retention, which is how a partitioned inbox is
// purged: dropping a partition writes almost no WAL and leaves no dead rows,
// where deleting its rows one by one writes every one of them.
//
// The delivery engine (idem/idemimpl) computes the bucket of a message and
// refuses a message outside the kept window; the janitor (idem.Janitor) and
// an inbox's Purge call Maintain.
package partition

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/idem/internal/pgutil"
)

// Bucket is the width of a partition: the time buckets messages are placed
// in, in UTC.
type Bucket string

// The buckets of partition=.
const (
	Hour  Bucket = "hour"
	Day   Bucket = "day"
	Week  Bucket = "week" // ISO weeks: from Monday 00:00 UTC
	Month Bucket = "month"
)

// Valid reports whether b is one of the buckets.
func (b Bucket) Valid() bool { return b == Hour || b == Day || b == Week || b == Month }

// Start returns the start of the bucket that holds t.
func (b Bucket) Start(t time.Time) time.Time {
	t = t.UTC()
	switch b {
	case Hour:
		return t.Truncate(time.Hour)
	case Week:
		day := time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
		back := (int(day.Weekday()) + 6) % 7 // days since Monday
		return day.AddDate(0, 0, -back)
	case Month:
		return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
	default:
		return time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
	}
}

// Next returns the start of the bucket after the one that starts at start.
func (b Bucket) Next(start time.Time) time.Time {
	switch b {
	case Hour:
		return start.Add(time.Hour)
	case Week:
		return start.AddDate(0, 0, 7)
	case Month:
		return start.AddDate(0, 1, 0)
	default:
		return start.AddDate(0, 0, 1)
	}
}

// Longest is the longest a bucket of b lasts: a retention shorter than it
// would drop a bucket's partition while messages of it are still arriving.
func (b Bucket) Longest() time.Duration {
	switch b {
	case Hour:
		return time.Hour
	case Week:
		return 7 * 24 * time.Hour
	case Month:
		return 31 * 24 * time.Hour
	default:
		return 24 * time.Hour
	}
}

// suffixLayout is how a partition's name spells its bucket's start.
func (b Bucket) suffixLayout() string {
	if b == Hour {
		return "2006010215"
	}
	return "20060102"
}

// Ahead is how many buckets after the current one Maintain creates, so that
// a janitor that stops for a while (up to a bucket) leaves deliveries
// working, and a message whose sender's clock runs ahead finds its
// partition.
const Ahead = 2

// Table is a partitioned inbox as Maintain sees it.
type Table struct {
	// Parent is the partitioned table, as SQL writes it.
	Parent string
	Bucket Bucket
	Retain time.Duration
}

// Window returns the oldest time a message may have to be delivered at now:
// a message older than the retention may belong to a partition that was
// dropped, so a copy of it processed before could not be recognised.
func (t Table) Window(now time.Time) time.Time { return now.Add(-t.Retain) }

// Result is what one Maintain did: the partitions it created and dropped
// (their names), and the rows the dropped ones held by the statistics of
// the server (pg_class.reltuples: an estimate, 0 for a partition never
// analysed).
type Result struct {
	Created, Dropped []string
	DroppedRows      int64
}

// lockTimeout bounds how long a statement of Maintain waits for the
// partitioned table's lock: creating and dropping a partition lock the
// parent briefly, and a statement queued behind a long transaction on it
// would hold up every delivery queued behind that statement.
const lockTimeout = "2s"

// Maintain creates the partitions of t's buckets from the one that holds
// the oldest kept time (Window) through Ahead buckets after the one of now,
// and drops each partition of t whose bucket ended before the window
// began. Each partition is created or dropped in a transaction of its own,
// under an advisory lock of the parent, so that several janitors at once do
// each once. A partition that cannot be created or dropped (its lock was not
// granted within lockTimeout, say) does not stop the others: Maintain
// returns the errors joined, with what was done, and the next run tries
// again.
func Maintain(ctx context.Context, db pgutil.DB, t Table, now time.Time) (Result, error) {
	var res Result
	if !t.Bucket.Valid() {
		return res, fmt.Errorf("partition: unknown bucket %q", t.Bucket)
	}
	c, err := db.Acquire(ctx)
	if err != nil {
		return res, err
	}
	defer c.Release()
	conn := c.Conn()

	var schema, name string
	if err := conn.QueryRow(ctx, `SELECT n.nspname, c.relname FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.oid = $1::text::regclass AND c.relkind = 'p'`, t.Parent).Scan(&schema, &name); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return res, fmt.Errorf("partition: %s is not a partitioned table (were its migrations applied?)", t.Parent)
		}
		return res, fmt.Errorf("partition: find %s: %w", t.Parent, err)
	}
	existing, err := children(ctx, conn, t.Parent)
	if err != nil {
		return res, err
	}

	var errs []error
	window := t.Window(now)
	last := t.Bucket.Start(now)
	for range Ahead {
		last = t.Bucket.Next(last)
	}
	for start := t.Bucket.Start(window); !start.After(last); start = t.Bucket.Next(start) {
		part := Name(name, t.Bucket, start)
		if _, ok := existing[part]; ok {
			continue
		}
		qualified := pgx.Identifier{schema, part}.Sanitize()
		ddl := fmt.Sprintf("CREATE TABLE %s PARTITION OF %s FOR VALUES FROM ('%s') TO ('%s')",
			qualified, t.Parent, start.Format(time.RFC3339), t.Bucket.Next(start).Format(time.RFC3339))
		switch done, err := locked(ctx, conn, t.Parent, schema, part, false, ddl); {
		case err != nil:
			errs = append(errs, fmt.Errorf("partition: create %s: %w", part, err))
		case done:
			res.Created = append(res.Created, part)
		}
	}

	for part, rows := range existing {
		start, ok := parseName(name, part, t.Bucket)
		if !ok || t.Bucket.Next(start).After(window) {
			continue
		}
		qualified := pgx.Identifier{schema, part}.Sanitize()
		switch done, err := locked(ctx, conn, t.Parent, schema, part, true, "DROP TABLE "+qualified); {
		case err != nil:
			errs = append(errs, fmt.Errorf("partition: drop %s: %w", part, err))
		case done:
			res.Dropped = append(res.Dropped, part)
			res.DroppedRows += rows
		}
	}
	slices.Sort(res.Dropped)
	return res, errors.Join(errs...)
}

// children returns the partitions of parent by name, with the rows the
// server's statistics give each.
func children(ctx context.Context, conn *pgx.Conn, parent string) (map[string]int64, error) {
	rows, err := conn.Query(ctx, `SELECT c.relname, greatest(c.reltuples, 0)::bigint FROM pg_inherits i
JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = $1::text::regclass`, parent)
	if err != nil {
		return nil, fmt.Errorf("partition: list the partitions of %s: %w", parent, err)
	}
	out := map[string]int64{}
	for rows.Next() {
		var name string
		var n int64
		if err := rows.Scan(&name, &n); err != nil {
			return nil, err
		}
		out[name] = n
	}
	return out, rows.Err()
}

// locked runs ddl in a transaction of its own that holds the advisory lock
// of parent, so that of janitors at once one creates (or drops) each
// partition and the others find it done, and bounds its wait for the
// parent's lock. It runs ddl only where the table name of schema exists as
// exists says, as the catalog shows it once the lock is held (a statement
// of its own, under READ COMMITTED: its snapshot sees what a janitor that
// held the lock before committed), and reports whether it ran it.
func locked(ctx context.Context, conn *pgx.Conn, parent, schema, name string, exists bool, ddl string) (bool, error) {
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return false, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, "SELECT set_config('lock_timeout', '"+lockTimeout+"', true), pg_advisory_xact_lock(hashtext($1))",
		"idem partitions "+parent); err != nil {
		return false, err
	}
	var there bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relname = $2)`, schema, name).Scan(&there); err != nil {
		return false, err
	}
	if there != exists {
		return false, nil
	}
	if _, err := tx.Exec(ctx, ddl); err != nil {
		return false, err
	}
	return true, tx.Commit(ctx)
}

// maxIdentifier is PostgreSQL's limit on identifier length, in bytes.
const maxIdentifier = 63

// Name returns the name of the partition of the bucket that starts at
// start, of the partitioned table called parent: parent_p20261201 (hour
// buckets: parent_p2026120114). A parent whose name leaves no room for the
// suffix is cut short, with a hash of its whole name after it, so that the
// name stays within PostgreSQL's 63 bytes and distinct.
func Name(parent string, b Bucket, start time.Time) string {
	suffix := "_p" + start.UTC().Format(b.suffixLayout())
	if len(parent)+len(suffix) <= maxIdentifier {
		return parent + suffix
	}
	sum := sha256.Sum256([]byte(parent))
	hash := "_" + hex.EncodeToString(sum[:4])
	n := maxIdentifier - len(suffix) - len(hash)
	for n > 0 && parent[n]&0xC0 == 0x80 { // not inside a UTF-8 sequence
		n--
	}
	return parent[:n] + hash + suffix
}

// parseName returns the start of the bucket whose partition of parent is
// called part, and false for a name Name does not give (a partition the
// user attached, which Maintain leaves alone).
func parseName(parent, part string, b Bucket) (time.Time, bool) {
	i := strings.LastIndex(part, "_p")
	if i < 0 {
		return time.Time{}, false
	}
	start, err := time.ParseInLocation(b.suffixLayout(), part[i+2:], time.UTC)
	if err != nil || Name(parent, b, start) != part || b.Start(start) != start {
		return time.Time{}, false
	}
	return start, true
}
