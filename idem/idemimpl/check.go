package idemimpl

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/generated/outboxdb"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/internal/pgutil"
)

// Check verifies that the database holds the inbox table as the consumer's
// migrations leave it. It checks the table (partitioned, for a partitioned
// inbox) and its key columns with their types. It checks the unique
// constraint or indexes that make a second delivery of a key a duplicate,
// and the stale-message guard's versions table. For a publishing inbox, it
// checks the outbox table too. What is missing or differs is an error
// wrapping [idem.ErrNotMigrated] that names it and the migration to apply.
// An error reaching the database is returned as it is.
//
// The broker adapters call it when they start. Call it at start-up where
// you call the wrapper yourself (an HTTP handler, a job). Without it, a
// missing migration shows only at the first delivery, as a retryable error.
func (in *Inbox[M, R]) Check(ctx context.Context) error {
	t := in.table
	cols := append(keyColumnWants(t.Columns), inboxColumns...)
	wants := []tableWant{{name: t.Name, migration: t.Migration, partitioned: t.Partition != "",
		columns: cols, arbiters: keyArbiters(t.Columns)}}
	if t.Versions != "" {
		wants = append(wants, tableWant{name: t.Versions, migration: t.Migration, later: true,
			columns:  []columnWant{{name: "entity", typ: t.EntityType}, {name: "version", typ: "bigint"}},
			arbiters: [][]indexWant{{{columns: []string{"entity"}}}}})
	}
	return checkTables(ctx, in.db, t.Consumer, wants, in.publishing, t.OutboxMigration)
}

// Check verifies that the database holds the claims table as the
// consumer's migrations leave it. It checks the table, its idempotency key
// column and primary key, and the key columns with their types. What is
// missing or differs is an error wrapping [idem.ErrNotMigrated] that names
// it and the migration to apply. An error reaching the database is returned
// as it is. The broker adapters call it when they start. Call it at
// start-up where you call the wrapper yourself.
func (x *ExternalInbox[M, R]) Check(ctx context.Context) error {
	t := x.table
	cols := append([]columnWant{{name: "idem_key", typ: "text"}}, keyColumnWants(t.Columns)...)
	cols = append(cols, externalColumns...)
	want := tableWant{name: t.Name, migration: t.Migration, columns: cols,
		arbiters: [][]indexWant{{{columns: []string{"idem_key"}}}}}
	return checkTables(ctx, x.db, t.Consumer, []tableWant{want}, false, "")
}

// Check verifies that the database holds the handler's business table with
// its key columns and the fingerprint column that idemgen's migration adds.
// It checks the unique constraint whose violation means "duplicate":
// Constraint, or the one over exactly the key columns. For a publishing
// handler, it checks the outbox table too. What is missing or differs is an
// error wrapping [idem.ErrNotMigrated] that names it and what to apply. The
// business table and its constraint come from the user's migrations. An
// error reaching the database is returned as it is. The broker adapters
// call it when they start. Call it at start-up where you call the wrapper
// yourself.
func (in *EntityInbox[M, R]) Check(ctx context.Context) error {
	t := in.table
	var cols []columnWant
	for _, c := range t.Columns {
		cols = append(cols, columnWant{name: unquote(c.Name), own: true})
	}
	cols = append(cols, columnWant{name: FingerprintColumn, typ: "bytea", defaultHas: FingerprintSetting})
	arbiter := indexWant{columns: columnNames(t.Columns)}
	if t.Constraint != "" {
		arbiter = indexWant{name: unquote(t.Constraint)}
	}
	want := tableWant{name: t.Name, migration: t.Migration, own: true, columns: cols,
		arbiters: [][]indexWant{{arbiter}}}
	return checkTables(ctx, in.db, t.Consumer, []tableWant{want}, in.publishing, t.OutboxMigration)
}

// Check verifies that the database answers. A mode=natural consumer records
// nothing, so it needs no table of idemgen's. The broker adapters call it
// when they start, as for every wrapper.
func (in *NaturalInbox[M, R]) Check(ctx context.Context) error {
	return checkTables(ctx, in.db, in.table.Consumer, nil, false, "")
}

// tableWant is what Check expects of one table.
type tableWant struct {
	name string // as SQL writes it: schema-qualified and quoted where needed
	// migration is the migration that creates the table, relative to the
	// package's directory ("" when the declaration does not say).
	migration string
	// own: the table is the handler's, created by the user's migrations
	// (mode=entity); migration only adds its fingerprint column.
	own bool
	// later: the table may be created by a later migration of the
	// consumer's than migration (the guard's versions table).
	later       bool
	partitioned bool
	columns     []columnWant
	// arbiters are the ways the table may enforce one row per key: every
	// index of one of them must be there.
	arbiters [][]indexWant
}

// columnWant is a column Check expects.
type columnWant struct {
	name string // unquoted
	typ  string // its SQL type; "" for any
	// nullable: the key part may be NULL, so the column must accept it.
	nullable bool
	// defaultHas is text the column's default must contain; "" for any.
	defaultHas string
	// own: the column is the user's (a mode=entity key column), not
	// created by the table's migration.
	own bool
}

// indexWant is a unique index (a primary key's or unique constraint's
// included) Check expects.
type indexWant struct {
	// name, when set, is the index's (the constraint's) name, over any
	// columns; else the index is the one over exactly columns, in any
	// order, with predicate and nullsNotDistinct as given.
	name             string
	columns          []string // unquoted
	predicate        string   // the WHERE of a partial index, as SQL writes it; "" for none
	nullsNotDistinct bool
}

// The columns other than the key's that an inbox's statements use, and
// those of a claims table.
var (
	inboxColumns = []columnWant{
		{name: "fingerprint", typ: "bytea"}, {name: "status", typ: "text"}, {name: "result"},
		{name: "attempts", typ: "integer"}, {name: "created_at", typ: "timestamptz"}, {name: "completed_at", typ: "timestamptz"},
	}
	externalColumns = []columnWant{
		{name: "fingerprint", typ: "bytea"}, {name: "status", typ: "text"}, {name: "fence", typ: "bigint"},
		{name: "attempts", typ: "integer"}, {name: "lease_until", typ: "timestamptz"}, {name: "result"},
		{name: "created_at", typ: "timestamptz"}, {name: "updated_at", typ: "timestamptz"}, {name: "done_at", typ: "timestamptz"},
	}
)

// keyColumnWants returns the columns Check expects of a table's key columns.
func keyColumnWants(cols []Column) []columnWant {
	wants := make([]columnWant, len(cols))
	for i, c := range cols {
		wants[i] = columnWant{name: unquote(c.Name), typ: c.Type, nullable: c.Nullable}
	}
	return wants
}

func columnNames(cols []Column) []string {
	names := make([]string, len(cols))
	for i, c := range cols {
		names[i] = unquote(c.Name)
	}
	return names
}

// keyArbiters returns the ways an inbox over cols may enforce one row per
// key, as its migrations create them. With every part required, it is a
// primary key over the columns. With a nullable part, it is one UNIQUE NULLS
// NOT DISTINCT constraint over them (PostgreSQL 15 and newer), or a partial
// unique index per null pattern, over the columns not NULL in it.
func keyArbiters(cols []Column) [][]indexWant {
	var nullable []Column
	for _, c := range cols {
		if c.Nullable {
			nullable = append(nullable, c)
		}
	}
	all := columnNames(cols)
	if len(nullable) == 0 {
		return [][]indexWant{{{columns: all}}}
	}
	var partial []indexWant
	for pattern := range 1 << len(nullable) {
		isNull := map[string]bool{}
		for j, c := range nullable {
			if pattern&(1<<j) != 0 {
				isNull[c.Name] = true
			}
		}
		var in, preds []string
		for _, c := range cols {
			switch {
			case isNull[c.Name]:
				preds = append(preds, c.Name+" IS NULL")
			case c.Nullable:
				preds = append(preds, c.Name+" IS NOT NULL")
				in = append(in, unquote(c.Name))
			default:
				in = append(in, unquote(c.Name))
			}
		}
		partial = append(partial, indexWant{columns: in, predicate: strings.Join(preds, " AND ")})
	}
	return [][]indexWant{{{columns: all, nullsNotDistinct: true}}, partial}
}

// checkTables checks wants, in order, and the outbox table when publishing,
// on one connection of db, and returns the first difference it finds.
func checkTables(ctx context.Context, db idem.DB, consumer string, wants []tableWant, publishing bool, outboxMigration string) error {
	pooled, err := db.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("idem: consumer %s: check its tables: acquire a connection: %w", consumer, err)
	}
	defer pooled.Release()
	conn := pooled.Conn()
	if len(wants) == 0 {
		if err := conn.Ping(ctx); err != nil {
			return fmt.Errorf("idem: consumer %s: check the database: %w", consumer, err)
		}
		return nil
	}
	for _, w := range wants {
		facts, found, err := readTable(ctx, conn, w)
		if err != nil {
			return fmt.Errorf("idem: consumer %s: check the table %s: %w", consumer, w.name, err)
		}
		if msg := w.compare(facts, found); msg != "" {
			return notMigrated("idem: consumer " + consumer + ": " + msg)
		}
	}
	if publishing {
		return checkOutbox(ctx, conn, consumer, outboxMigration)
	}
	return nil
}

// checkOutbox checks that the outbox table is there with every migration
// this runtime's statements need. It runs the relay's own check of it
// (OutboxLayout).
func checkOutbox(ctx context.Context, conn *pgx.Conn, consumer, migration string) error {
	missing, err := outboxdb.New(conn).OutboxLayout(ctx)
	switch {
	case pgutil.HasSQLState(err, pgerrcode.UndefinedTable):
		apply := "apply the migrations of github.com/idemgen/idemgen/migrations"
		if migration != "" {
			apply = "apply " + migration
		}
		return notMigrated(fmt.Sprintf("idem: consumer %s: table idem_outbox does not exist: %s", consumer, apply))
	case err != nil:
		return fmt.Errorf("idem: consumer %s: check the table idem_outbox: %w", consumer, err)
	case missing == "":
		return nil
	}
	_, name, _ := strings.Cut(missing, "_")
	apply := "apply the runtime's migration " + missing + ".sql of github.com/idemgen/idemgen/migrations"
	if migration != "" {
		apply = "apply its copy " + path.Join(path.Dir(migration), "*_"+name+".sql")
	}
	return notMigrated(fmt.Sprintf("idem: consumer %s: table idem_outbox lacks the outbox migration %s: %s", consumer, name, apply))
}

// tableFacts is what the catalog says of a table.
type tableFacts struct {
	Kind    string        `json:"kind"` // pg_class.relkind: r a table, p a partitioned one
	Columns []columnFacts `json:"columns"`
	Indexes []indexFacts  `json:"indexes"`
	// Types are the types of the wanted columns as format_type spells
	// them, in the order of the query's $2 ("" for a column of any type).
	Types []string `json:"types"`
}

// columnFacts is what the catalog says of a column.
type columnFacts struct {
	Name    string `json:"name"`
	Type    string `json:"type"`
	NotNull bool   `json:"not_null"`
	Default string `json:"default"`
}

// indexFacts is what the catalog says of a unique index.
type indexFacts struct {
	Name             string   `json:"name"`
	Columns          []string `json:"columns"`
	Expressions      bool     `json:"expressions"`
	Predicate        string   `json:"predicate"`
	NullsNotDistinct bool     `json:"nulls_not_distinct"`
}

// catalogQuery reads what Check compares of table $1, as SQL writes it. It
// finds the table through the search_path, as the statements' own names
// are. It returns the table's kind, its columns with their types (without
// modifiers) and defaults, and its valid unique indexes. Those include the
// indexes of primary keys and unique constraints, which share their names.
// Each index comes with its columns, its predicate and its NULLS NOT
// DISTINCT. That flag exists from PostgreSQL 15 on; to_jsonb reads it, so
// the query also runs on older servers. The query also spells the wanted
// types $2 as format_type does: timestamptz is "timestamp with time zone".
// No row means no such table.
const catalogQuery = `
SELECT json_build_object(
    'kind', c.relkind,
    'columns', coalesce((
        SELECT json_agg(json_build_object(
                   'name', a.attname,
                   'type', format_type(a.atttypid, NULL),
                   'not_null', a.attnotnull,
                   'default', pg_get_expr(d.adbin, d.adrelid))
               ORDER BY a.attnum)
        FROM pg_attribute a
        LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
        WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped), '[]'),
    'indexes', coalesce((
        SELECT json_agg(json_build_object(
                   'name', x.relname,
                   'columns', (SELECT coalesce(json_agg(a.attname ORDER BY k.i), '[]')
                               FROM unnest(i.indkey) WITH ORDINALITY AS k(n, i)
                               JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.n),
                   'expressions', i.indexprs IS NOT NULL,
                   'predicate', pg_get_expr(i.indpred, i.indrelid),
                   'nulls_not_distinct', coalesce((to_jsonb(i) ->> 'indnullsnotdistinct')::boolean, false))
               ORDER BY x.relname)
        FROM pg_index i
        JOIN pg_class x ON x.oid = i.indexrelid
        WHERE i.indrelid = c.oid AND i.indisunique AND i.indisvalid), '[]'),
    'types', (
        SELECT coalesce(json_agg(coalesce(format_type(to_regtype(nullif(w.t, '')), NULL), '') ORDER BY w.n), '[]')
        FROM unnest($2::text[]) WITH ORDINALITY AS w(t, n)))::text
FROM pg_class c
WHERE c.oid = to_regclass($1::text)`

// readTable reads the catalog's facts of w's table; found is false when
// there is no such table.
func readTable(ctx context.Context, conn *pgx.Conn, w tableWant) (facts tableFacts, found bool, err error) {
	types := make([]string, len(w.columns))
	for i, c := range w.columns {
		types[i] = c.typ
	}
	var doc string
	err = conn.QueryRow(ctx, catalogQuery, w.name, types).Scan(&doc)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return facts, false, nil
	case err != nil:
		return facts, false, err
	}
	if err := json.Unmarshal([]byte(doc), &facts); err != nil {
		return facts, false, fmt.Errorf("read the catalog's answer: %w", err)
	}
	return facts, true, nil
}

// compare returns what differs between w and the facts of its table ("" when
// nothing does), and what to do about it.
func (w tableWant) compare(facts tableFacts, found bool) string {
	apply, from := "apply the consumer's idemgen migrations", "apply the consumer's idemgen migrations"
	if w.migration != "" {
		from = "apply the consumer's migrations from " + w.migration + " on"
		apply = "apply " + w.migration
		if w.later {
			apply = from
		}
	}
	if !found {
		if w.own {
			return fmt.Sprintf("table %s does not exist: it is the handler's own table, which your migrations create (before %s, which adds its %s column)",
				w.name, cmp.Or(w.migration, "idemgen's migration"), FingerprintColumn)
		}
		return fmt.Sprintf("table %s does not exist: %s", w.name, apply)
	}
	var ours, users []string // what idemgen's migrations make, and what the user's do
	if w.partitioned && facts.Kind != "p" {
		ours = append(ours, "it is not partitioned (PARTITION BY RANGE (bucket))")
	}
	for i, c := range w.columns {
		problem := c.compare(facts, i)
		switch {
		case problem == "":
		case c.own:
			users = append(users, problem)
		default:
			ours = append(ours, problem)
		}
	}
	if !slices.ContainsFunc(w.arbiters, facts.hasAll) {
		problem := "no " + describeArbiter(w.arbiters[0]) + ", which makes a second delivery of a key a duplicate"
		if len(w.arbiters) > 1 {
			problem = "neither " + describeArbiter(w.arbiters[0]) + " nor " + describeArbiter(w.arbiters[1]) + ", which make a second delivery of a key a duplicate"
		}
		if w.own {
			users = append(users, problem)
		} else {
			ours = append(ours, problem)
		}
	}
	var parts []string
	if len(users) > 0 {
		parts = append(parts, strings.Join(users, "; ")+": your migrations must create it (constraint= in the directive names the unique constraint)")
	}
	if len(ours) > 0 {
		fix := from + ", or undo what was changed by hand"
		if w.own {
			fix = apply
		}
		parts = append(parts, strings.Join(ours, "; ")+": "+fix)
	}
	if len(parts) == 0 {
		return ""
	}
	return "table " + w.name + ": " + strings.Join(parts, "; and ")
}

// compare returns what differs between c and the column of the facts ("" when
// nothing does); i is c's index in the wanted types.
func (c columnWant) compare(facts tableFacts, i int) string {
	k := slices.IndexFunc(facts.Columns, func(col columnFacts) bool { return col.Name == c.name })
	if k < 0 {
		if c.typ != "" {
			return fmt.Sprintf("no column %s (%s)", c.name, c.typ)
		}
		return "no column " + c.name
	}
	col := facts.Columns[k]
	switch {
	case c.typ != "" && i < len(facts.Types) && facts.Types[i] != "" && col.Type != facts.Types[i]:
		return fmt.Sprintf("column %s is %s, not %s", c.name, col.Type, c.typ)
	case c.nullable && col.NotNull:
		return fmt.Sprintf("column %s is NOT NULL, but its key part may be NULL", c.name)
	case c.defaultHas != "" && !strings.Contains(col.Default, c.defaultHas):
		return fmt.Sprintf("column %s has no default that reads the setting %s", c.name, c.defaultHas)
	}
	return ""
}

// hasAll reports whether the table has every index of arbiter.
func (facts tableFacts) hasAll(arbiter []indexWant) bool {
	for _, want := range arbiter {
		if !slices.ContainsFunc(facts.Indexes, func(ix indexFacts) bool {
			if want.name != "" {
				return ix.Name == want.name
			}
			return sameSet(ix.Columns, want.columns) && ix.Expressions == (len(want.columns) == 0) &&
				normalPredicate(ix.Predicate) == normalPredicate(want.predicate) &&
				(!want.nullsNotDistinct || ix.NullsNotDistinct)
		}) {
			return false
		}
	}
	return true
}

// describeArbiter names an arbiter in messages.
func describeArbiter(arbiter []indexWant) string {
	first := arbiter[0]
	switch {
	case first.name != "":
		return "unique constraint or index " + first.name
	case first.nullsNotDistinct:
		return "UNIQUE NULLS NOT DISTINCT constraint over (" + strings.Join(first.columns, ", ") + ")"
	case first.predicate != "":
		var each []string
		for _, ix := range arbiter {
			target := strings.Join(ix.columns, ", ")
			if target == "" {
				target = "(true)" // every part NULL: at most one such row
			}
			each = append(each, "("+target+") WHERE "+ix.predicate)
		}
		return "unique index per null pattern of the nullable key parts, over " + strings.Join(each, ", ")
	}
	return "unique constraint or index over exactly (" + strings.Join(first.columns, ", ") + ")"
}

// sameSet reports whether a and b hold the same names, in any order.
func sameSet(a, b []string) bool {
	return len(a) == len(b) && !slices.ContainsFunc(a, func(s string) bool { return !slices.Contains(b, s) })
}

// normalPredicate drops the parentheses PostgreSQL puts around each
// condition of an index's predicate when it prints it.
func normalPredicate(p string) string {
	return strings.Join(strings.Fields(strings.NewReplacer("(", " ", ")", " ").Replace(p)), " ")
}

// notMigrated is the error of a Check that found a table, column or
// index missing or different: its text, and errors.Is ErrNotMigrated.
type notMigrated string

func (e notMigrated) Error() string { return string(e) }

// Is reports whether target is idem.ErrNotMigrated.
func (e notMigrated) Is(target error) bool { return target == idem.ErrNotMigrated }
