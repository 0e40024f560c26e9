// Package audit reads a database to tell how idemgen's consumers are doing:
// per consumer the inbox's row count, its oldest row against the retention,
// claims still running past their lease (mode=external), rows that took more
// than one attempt, and the outbox rows the consumer wrote that are not
// published yet or dead; and, on a business table the user names, the
// duplicate query (GROUP BY the columns that should be unique, HAVING
// count(*) > 1), which finds work that was done twice.
//
// The consumers come from the model (what idemgen loaded from the Go
// packages): the database alone does not know a consumer's retention or
// lease. Run returns a Report; the command line renders it.
package audit

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/internal/emit/inboxsql"
	"github.com/idemgen/idemgen/internal/model"
)

// OutboxTable is the runtime's outbox table (migrations/00001_idem_outbox.sql).
const OutboxTable = "idem_outbox"

// DefaultLimit is how many doubled groups a report lists when Doubles.Limit
// is 0.
const DefaultLimit = 20

// ErrNotFound is wrapped by Run's error for a schema, table or column that is
// not in the database.
var ErrNotFound = errors.New("not found")

// Config says what to audit besides the consumers.
type Config struct {
	// Schema is where unqualified table names (the inboxes', the outbox's,
	// the business table's) are looked up; "" is the connection's
	// current_schema(), the first schema of its search_path that exists.
	Schema string
	// Now is the time ages, retention and leases are measured against; the
	// zero value is the server's now() at the start of the audit (tests fix
	// it to make the report stable).
	Now time.Time
	// Doubles, when not nil, runs the duplicate query on a business table.
	Doubles *DoublesQuery
}

// DoublesQuery is the scheduled check that proves a handler no longer
// doubles work: rows of Table that share the values of Columns, which one
// piece of work should have written once.
type DoublesQuery struct {
	// Table is the business table, name or schema.name.
	Table string
	// Columns are the columns whose values identify one piece of work.
	Columns []string
	// TimeColumn, when set, restricts the query to the rows whose
	// TimeColumn is at or after Now - Since (Since must then be positive).
	TimeColumn string
	Since      time.Duration
	// Limit bounds the groups listed (the totals count them all); 0 is
	// DefaultLimit.
	Limit int
}

// Report is the result of an audit.
type Report struct {
	// Schema is the schema unqualified names were looked up in.
	Schema string
	// Now is the time the report is measured against.
	Now time.Time
	// Consumers are sorted by consumer name.
	Consumers []Consumer
	// Outbox is nil when the schema has no outbox table (no handler
	// publishes).
	Outbox *Outbox
	// Doubles is nil when no duplicate query was asked for.
	Doubles *Doubles
}

// Doubled reports whether the duplicate query found doubled work.
func (r Report) Doubled() bool { return r.Doubles != nil && r.Doubles.Groups > 0 }

// Consumer is what the audit found in one consumer's inbox.
type Consumer struct {
	Consumer string
	Package  string // the Go package of its handler
	Func     string // the handler
	Mode     model.Mode
	// Table is the inbox table as the directive names it; Schema is the
	// schema it was found in.
	Table  string
	Schema string
	Retain time.Duration
	// Lease is the claim's lease (mode=external); 0 in mode=tx.
	Lease time.Duration

	// Rows is the number of rows in the inbox.
	Rows int64
	// Oldest is the creation time of the oldest row, zero without rows;
	// OldestAge is Now - Oldest.
	Oldest    time.Time
	OldestAge time.Duration
	// PastRetention counts the rows a purge would delete: created more
	// than Retain before Now (in mode=external, not running).
	PastRetention int64
	// Running counts the rows being worked on. In mode=tx an inbox row is
	// visible once committed, so this is 0 unless something else wrote the
	// table.
	Running int64
	// Expired counts the running claims whose lease ran out before Now
	// (mode=external): their worker is gone or stuck, and the sweeper or
	// the next delivery takes them over. OldestExpired is the earliest of
	// their lease ends.
	Expired       int64
	OldestExpired time.Time
	// Released counts the claims given back after a failed attempt, waiting
	// for a redelivery (mode=external).
	Released int64
	// Retried counts the rows with attempts > 1, MaxAttempts is the highest
	// attempts of any row.
	Retried     int64
	MaxAttempts int64
	// Outbox is what the consumer's handler wrote to the outbox, zero when
	// there is no outbox table.
	Outbox OutboxCounts
}

// OutboxCounts are the rows of the outbox not yet published.
type OutboxCounts struct {
	// Pending counts the rows waiting for the relay (neither published nor
	// dead); OldestPending is the creation time of the oldest of them, zero
	// without any, and OldestPendingAge is Now - OldestPending.
	Pending          int64
	OldestPending    time.Time
	OldestPendingAge time.Duration
	// Dead counts the rows dead-lettered after too many publish attempts.
	Dead int64
}

// Outbox is the whole outbox: every consumer's rows, also those of consumers
// that are not among the audited packages.
type Outbox struct {
	Table  string
	Schema string
	OutboxCounts
}

// Doubles is the result of the duplicate query.
type Doubles struct {
	// Table, Columns, TimeColumn and Since are the query's; Schema is the
	// schema the table was found in; From is Now - Since (zero without a
	// TimeColumn).
	Table      string
	Schema     string
	Columns    []string
	TimeColumn string
	Since      time.Duration
	From       time.Time
	Limit      int
	// Groups counts the distinct values of Columns found more than once;
	// Rows counts their rows, and Extra the rows beyond the first of each
	// group: the work done more than once.
	Groups int64
	Rows   int64
	Extra  int64
	// Top lists at most Limit groups, most rows first.
	Top []Group
}

// Group is one set of values of the columns found in several rows.
type Group struct {
	// Values are the columns' values as text, nil for NULL.
	Values []*string
	Count  int64
}

// Querier is what the audit reads through: a pgx connection or transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Run audits the consumers of prog in the database q reads. Every query is a
// read; run it in a read-only transaction (as the command line does) for one
// snapshot. A schema, table or column that is not there is an error wrapping
// ErrNotFound, naming it.
func Run(ctx context.Context, q Querier, prog model.Program, cfg Config) (Report, error) {
	var r Report
	var current *string
	var now time.Time
	if err := q.QueryRow(ctx, "SELECT current_schema(), now()").Scan(&current, &now); err != nil {
		return r, fmt.Errorf("read the current schema: %w", err)
	}
	r.Schema = cfg.Schema
	if r.Schema == "" {
		if current == nil {
			return r, fmt.Errorf("no schema of the connection's search_path exists (%w); name one with -schema", ErrNotFound)
		}
		r.Schema = *current
	}
	if ok, err := schemaExists(ctx, q, r.Schema); err != nil {
		return r, err
	} else if !ok {
		return r, fmt.Errorf("schema %q %w", r.Schema, ErrNotFound)
	}
	r.Now = cfg.Now
	if r.Now.IsZero() {
		r.Now = now
	}

	outboxCols, err := columns(ctx, q, r.Schema, OutboxTable)
	if err != nil {
		return r, err
	}
	var perConsumer map[string]OutboxCounts
	if outboxCols != nil {
		if err := need(outboxCols, r.Schema, OutboxTable, "the outbox", "consumer", "created_at", "dead_at"); err != nil {
			return r, err
		}
		r.Outbox = &Outbox{Table: OutboxTable, Schema: r.Schema}
		_, keepsPublished := find(outboxCols, "published_at")
		if perConsumer, r.Outbox.OutboxCounts, err = outbox(ctx, q, r.Schema, keepsPublished, r.Now); err != nil {
			return r, err
		}
	}

	for _, pkg := range prog.Packages {
		for _, h := range pkg.Handlers {
			if h.Outbox && r.Outbox == nil {
				return r, fmt.Errorf("consumer %s publishes through the outbox, but table %s.%s %w (are the migrations applied, in this schema?)",
					h.Consumer, r.Schema, OutboxTable, ErrNotFound)
			}
			c, err := consumer(ctx, q, h, r.Schema, r.Now)
			if err != nil {
				return r, err
			}
			c.Outbox = perConsumer[h.Consumer]
			r.Consumers = append(r.Consumers, c)
		}
	}
	slices.SortFunc(r.Consumers, func(a, b Consumer) int { return strings.Compare(a.Consumer, b.Consumer) })

	if cfg.Doubles != nil {
		d, err := doubles(ctx, q, *cfg.Doubles, r.Schema, r.Now)
		if err != nil {
			return r, err
		}
		r.Doubles = &d
	}
	return r, nil
}

// column is a column of a table as information_schema lists it.
type column struct {
	name     string
	dataType string
}

// splitTable cuts a table name into its schema (def when it has none) and
// its own name.
func splitTable(table, def string) (schema, name string) {
	if i := strings.LastIndexByte(table, '.'); i >= 0 {
		return table[:i], table[i+1:]
	}
	return def, table
}

// sqlName is schema.name as SQL writes it.
func sqlName(schema, name string) string {
	return inboxsql.Quote(schema) + "." + inboxsql.Quote(name)
}

func schemaExists(ctx context.Context, q Querier, schema string) (bool, error) {
	var ok bool
	err := q.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM information_schema.schemata WHERE schema_name = $1)", schema).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("look up schema %q: %w", schema, err)
	}
	return ok, nil
}

// columns returns the columns of schema.table in order, nil when there is
// no such table (or the role may not see it).
func columns(ctx context.Context, q Querier, schema, table string) ([]column, error) {
	rows, err := q.Query(ctx, `SELECT column_name, data_type FROM information_schema.columns
WHERE table_schema = $1 AND table_name = $2 ORDER BY ordinal_position`, schema, table)
	if err != nil {
		return nil, fmt.Errorf("look up table %s.%s: %w", schema, table, err)
	}
	cols, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (column, error) {
		var c column
		err := row.Scan(&c.name, &c.dataType)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("look up table %s.%s: %w", schema, table, err)
	}
	if len(cols) == 0 {
		return nil, nil
	}
	return cols, nil
}

// find returns the column called name.
func find(cols []column, name string) (column, bool) {
	i := slices.IndexFunc(cols, func(c column) bool { return c.name == name })
	if i < 0 {
		return column{}, false
	}
	return cols[i], true
}

// need checks that cols, the columns of schema.table (what), include names.
func need(cols []column, schema, table, what string, names ...string) error {
	for _, n := range names {
		if _, ok := find(cols, n); !ok {
			return fmt.Errorf("table %s.%s (%s) has no column %q (%w); is it idemgen's, with its migrations applied?", schema, table, what, n, ErrNotFound)
		}
	}
	return nil
}

// missingColumn says that schema.table has no column name, listing those it
// has (and the one meant, when only the case differs).
func missingColumn(schema, table, flag, name string, cols []column) error {
	var names []string
	for _, c := range cols {
		names = append(names, c.name)
		if strings.EqualFold(c.name, name) {
			return fmt.Errorf("table %s.%s has no column %q (%w); did you mean %q? (%s)", schema, table, name, ErrNotFound, c.name, flag)
		}
	}
	return fmt.Errorf("table %s.%s has no column %q (%w); its columns are %s (%s)", schema, table, name, ErrNotFound, strings.Join(names, ", "), flag)
}

// seconds is d as the float8 of make_interval(secs => ...).
func seconds(d time.Duration) float64 { return d.Seconds() }

// The per-consumer queries. $1 is the audit's now, $2 the retention in
// seconds. Purge deletes by created_at (tx) and, in mode=external, only rows
// that are not running: the rows past retention are what it would delete.
const (
	txInboxQuery = `SELECT count(*),
       min(created_at),
       count(*) FILTER (WHERE created_at < $1::timestamptz - make_interval(secs => $2::float8)),
       count(*) FILTER (WHERE status = 'running'),
       0::bigint, NULL::timestamptz, 0::bigint,
       count(*) FILTER (WHERE attempts > 1),
       coalesce(max(attempts), 0)::bigint
FROM %s`
	externalInboxQuery = `SELECT count(*),
       min(created_at),
       count(*) FILTER (WHERE status <> 'running' AND created_at < $1::timestamptz - make_interval(secs => $2::float8)),
       count(*) FILTER (WHERE status = 'running'),
       count(*) FILTER (WHERE status = 'running' AND lease_until < $1::timestamptz),
       min(lease_until) FILTER (WHERE status = 'running' AND lease_until < $1::timestamptz),
       count(*) FILTER (WHERE status = 'released'),
       count(*) FILTER (WHERE attempts > 1),
       coalesce(max(attempts), 0)::bigint
FROM %s`
)

func consumer(ctx context.Context, q Querier, h model.Handler, defSchema string, now time.Time) (Consumer, error) {
	schema, name := splitTable(h.Table, defSchema)
	c := Consumer{Consumer: h.Consumer, Package: h.Package, Func: h.Func, Mode: h.Mode, Table: h.Table, Schema: schema, Retain: h.Retain, Lease: h.Lease}
	if c.Mode == "" {
		c.Mode = model.ModeTx
	}
	cols, err := columns(ctx, q, schema, name)
	if err != nil {
		return c, err
	}
	if cols == nil {
		return c, fmt.Errorf("inbox table %s.%s of consumer %s %w (are its migrations applied, in this schema?)", schema, name, h.Consumer, ErrNotFound)
	}
	what := "inbox of " + h.Consumer
	query := txInboxQuery
	required := []string{"created_at", "status", "attempts"}
	if h.External() {
		query = externalInboxQuery
		required = append(required, "lease_until")
	}
	if err := need(cols, schema, name, what, required...); err != nil {
		return c, err
	}
	var oldest, oldestExpired *time.Time
	err = q.QueryRow(ctx, fmt.Sprintf(query, sqlName(schema, name)), now, seconds(h.Retain)).Scan(
		&c.Rows, &oldest, &c.PastRetention, &c.Running, &c.Expired, &oldestExpired, &c.Released, &c.Retried, &c.MaxAttempts)
	if err != nil {
		return c, fmt.Errorf("audit the inbox %s.%s of consumer %s: %w", schema, name, h.Consumer, err)
	}
	if oldest != nil {
		c.Oldest, c.OldestAge = *oldest, now.Sub(*oldest)
	}
	if oldestExpired != nil {
		c.OldestExpired = *oldestExpired
	}
	return c, nil
}

// outboxQuery counts the outbox rows by consumer: pending (the relay's
// backlog) and dead. Since the migration 00002 the relay deletes a row once
// published, so every row is one or the other; a table without that
// migration still keeps its published rows, which the WHERE clause of
// keepingPublished leaves out. The idem_outbox_due and idem_outbox_dead
// partial indexes cover both sets.
const (
	outboxQuery = `SELECT consumer,
       count(*) FILTER (WHERE dead_at IS NULL),
       min(created_at) FILTER (WHERE dead_at IS NULL),
       count(*) FILTER (WHERE dead_at IS NOT NULL)
FROM %s
%sGROUP BY consumer
ORDER BY consumer`
	keepingPublished = "WHERE published_at IS NULL\n"
)

// outbox reads the outbox's counts; keepsPublished says that the table still
// has published_at (the layout of the migration 00001).
func outbox(ctx context.Context, q Querier, schema string, keepsPublished bool, now time.Time) (map[string]OutboxCounts, OutboxCounts, error) {
	var total OutboxCounts
	where := ""
	if keepsPublished {
		where = keepingPublished
	}
	rows, err := q.Query(ctx, fmt.Sprintf(outboxQuery, sqlName(schema, OutboxTable), where))
	if err != nil {
		return nil, total, fmt.Errorf("audit the outbox %s.%s: %w", schema, OutboxTable, err)
	}
	defer rows.Close()
	by := map[string]OutboxCounts{}
	for rows.Next() {
		var name string
		var c OutboxCounts
		var oldest *time.Time
		if err := rows.Scan(&name, &c.Pending, &oldest, &c.Dead); err != nil {
			return nil, total, fmt.Errorf("audit the outbox %s.%s: %w", schema, OutboxTable, err)
		}
		if oldest != nil {
			c.OldestPending, c.OldestPendingAge = *oldest, now.Sub(*oldest)
			if total.OldestPending.IsZero() || oldest.Before(total.OldestPending) {
				total.OldestPending, total.OldestPendingAge = c.OldestPending, c.OldestPendingAge
			}
		}
		total.Pending += c.Pending
		total.Dead += c.Dead
		by[name] = c
	}
	if err := rows.Err(); err != nil {
		return nil, total, fmt.Errorf("audit the outbox %s.%s: %w", schema, OutboxTable, err)
	}
	return by, total, nil
}

// timeTypes are the data types a time window's column may have.
var timeTypes = []string{"timestamp with time zone", "timestamp without time zone", "date"}

func doubles(ctx context.Context, q Querier, dq DoublesQuery, defSchema string, now time.Time) (Doubles, error) {
	schema, name := splitTable(dq.Table, defSchema)
	d := Doubles{Table: dq.Table, Schema: schema, Columns: dq.Columns, TimeColumn: dq.TimeColumn, Since: dq.Since, Limit: dq.Limit}
	if d.Limit <= 0 {
		d.Limit = DefaultLimit
	}
	if len(dq.Columns) == 0 {
		return d, errors.New("the duplicate query needs the columns that identify one piece of work (-columns)")
	}
	if dq.TimeColumn != "" && dq.Since <= 0 {
		return d, fmt.Errorf("a time window on %s needs a positive -since, not %v", dq.TimeColumn, dq.Since)
	}
	if dq.TimeColumn == "" && dq.Since != 0 {
		return d, errors.New("-since needs -time-column, the column the window applies to")
	}
	if schema != defSchema {
		if ok, err := schemaExists(ctx, q, schema); err != nil {
			return d, err
		} else if !ok {
			return d, fmt.Errorf("schema %q of table %s %w (-table)", schema, dq.Table, ErrNotFound)
		}
	}
	cols, err := columns(ctx, q, schema, name)
	if err != nil {
		return d, err
	}
	if cols == nil {
		return d, fmt.Errorf("table %s.%s %w (-table)", schema, name, ErrNotFound)
	}
	var group, sel []string
	for _, c := range dq.Columns {
		if _, ok := find(cols, c); !ok {
			return d, missingColumn(schema, name, "-columns", c, cols)
		}
		if slices.Contains(group, inboxsql.Quote(c)) {
			return d, fmt.Errorf("column %q is named twice (-columns)", c)
		}
		group = append(group, inboxsql.Quote(c))
		sel = append(sel, inboxsql.Quote(c)+"::text")
	}
	where := ""
	args := []any{d.Limit}
	if dq.TimeColumn != "" {
		tc, ok := find(cols, dq.TimeColumn)
		if !ok {
			return d, missingColumn(schema, name, "-time-column", dq.TimeColumn, cols)
		}
		if !slices.Contains(timeTypes, tc.dataType) {
			return d, fmt.Errorf("column %q of table %s.%s is %s, not a timestamp or date (-time-column)", tc.name, schema, name, tc.dataType)
		}
		d.From = now.Add(-dq.Since)
		where = "WHERE " + inboxsql.Quote(tc.name) + " >= $2::timestamptz\n"
		args = append(args, d.From)
	}
	// Seed 003's query, with the totals of every group beside the first
	// Limit of them.
	query := fmt.Sprintf(`SELECT %s, count(*) AS runs, count(*) OVER () AS groups, sum(count(*)) OVER ()::bigint AS rows
FROM %s
%sGROUP BY %s
HAVING count(*) > 1
ORDER BY runs DESC, %s
LIMIT $1`, strings.Join(sel, ", "), sqlName(schema, name), where, strings.Join(group, ", "), strings.Join(group, ", "))
	rows, err := q.Query(ctx, query, args...)
	if err != nil {
		return d, fmt.Errorf("query doubled rows of %s.%s: %w", schema, name, err)
	}
	defer rows.Close()
	for rows.Next() {
		g := Group{Values: make([]*string, len(dq.Columns))}
		dest := make([]any, 0, len(dq.Columns)+3)
		for i := range g.Values {
			dest = append(dest, &g.Values[i])
		}
		dest = append(dest, &g.Count, &d.Groups, &d.Rows)
		if err := rows.Scan(dest...); err != nil {
			return d, fmt.Errorf("query doubled rows of %s.%s: %w", schema, name, err)
		}
		d.Top = append(d.Top, g)
	}
	if err := rows.Err(); err != nil {
		return d, fmt.Errorf("query doubled rows of %s.%s: %w", schema, name, err)
	}
	d.Extra = d.Rows - d.Groups
	return d, nil
}
