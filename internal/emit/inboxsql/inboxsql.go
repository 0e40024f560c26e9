// Package inboxsql renders the SQL of a handler's inbox: the goose migrations
// that create and change it, from the templates in the repository's
// templates folder, and the names and column types its table declaration
// states (the runtime builds the statements it runs from those). It only renders:
// which migrations a folder needs, their header and their file names are the
// migrate package's (migrate.InboxKind calls Create and Alter).
package inboxsql

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"text/template"

	"github.com/idemgen/idemgen/internal/migrate"
	"github.com/idemgen/idemgen/internal/model"
	"github.com/idemgen/idemgen/templates"
)

var tmpl = template.Must(template.New("").Funcs(template.FuncMap{
	"join": strings.Join,
}).ParseFS(templates.FS, "*.sql.tmpl"))

// KeyColumn is what a generated table declaration (idemimpl.Column) states of
// one key part, from which the runtime builds the statements it runs
// against the table: the part's Go path, its column as SQL writes it, the
// column's type as the migration creates it, and whether the part may be
// NULL.
type KeyColumn struct {
	Field, Name, Type string
	Nullable          bool
}

// KeyColumns returns the key columns of h's table, in key order. names, when
// not nil, are the columns that hold the parts (a mode=entity handler's,
// on its business table); else each part's own column of the inbox, and for
// a partitioned inbox its bucket column last, whose Field is the message's
// time field.
func KeyColumns(h model.Handler, names []string) []KeyColumn {
	cols := make([]KeyColumn, len(h.Key))
	for i, k := range h.Key {
		name := k.Column
		if names != nil {
			name = names[i]
		}
		cols[i] = KeyColumn{Field: k.Path, Name: Quote(name), Type: ColumnType(k), Nullable: k.Null != nil}
	}
	if p := h.Partition; p != nil && names == nil {
		cols = append(cols, KeyColumn{Field: p.Time.Path, Name: model.BucketColumn, Type: "timestamptz"})
	}
	return cols
}

// Create renders the SQL of the migration that creates the inbox in: what
// follows the header migrate writes.
func Create(in model.Inbox) []byte {
	n := names(in)
	d := createData{Consumer: in.Consumer, Table: n.table}
	d.CreatedIndex = Quote(n.createdIndex)
	d.RetentionIndex = Quote(n.retentionIndex)
	d.BRIN = in.RetentionIndex() == model.RetentionBRIN

	type column struct{ name, typ, rest string }
	var cols []column
	for _, c := range in.Key {
		rest := "NOT NULL"
		if c.Nullable {
			rest = ""
		}
		cols = append(cols, column{Quote(c.Name), c.Type, rest})
	}
	if in.Partition != "" {
		cols = append(cols, column{model.BucketColumn, "timestamptz", "NOT NULL"})
	}
	cols = append(cols,
		column{"fingerprint", "bytea", "NOT NULL"},
		column{"status", "text", "NOT NULL DEFAULT 'done'"},
		column{"result", in.ResultType(), ""},
		column{"attempts", "integer", "NOT NULL DEFAULT 1"},
		column{"created_at", "timestamptz", "NOT NULL DEFAULT now()"},
		column{"completed_at", "timestamptz", "DEFAULT now()"},
	)
	nameWidth, typeWidth := 0, 0
	for _, c := range cols {
		nameWidth = max(nameWidth, len(c.name))
		typeWidth = max(typeWidth, len(c.typ))
	}
	for _, c := range cols {
		line := fmt.Sprintf("%-*s %-*s %s", nameWidth, c.name, typeWidth, c.typ, c.rest)
		d.Lines = append(d.Lines, strings.TrimRight(line, " "))
	}
	if in.Unique == model.PartialIndexes {
		d.UniqueIndexes = partialIndexes(in, n)
	} else {
		d.Lines = append(d.Lines, "CONSTRAINT "+uniqueConstraint(in, n))
	}
	d.Lines = append(d.Lines, "CONSTRAINT "+Quote(n.statusCheck)+" CHECK (status IN ('running', 'done'))")
	if in.Guard != nil {
		d.Versions = versionsDDL(in, n)
		d.VersionsTable = n.versionsTable
	}
	if in.Partition != "" {
		d.Partition = in.Partition
	}
	return []byte(render("inbox.sql.tmpl", d))
}

type createData struct {
	Consumer      string
	Table         string // as SQL writes it: quoted where needed, qualified
	Lines         []string
	UniqueIndexes []string
	CreatedIndex  string
	// RetentionIndex is the B-tree index on created_at; BRIN says the
	// inbox has the BRIN index of older inboxes instead (in tests of the
	// migration that replaces it).
	RetentionIndex string
	BRIN           bool
	Versions       string
	VersionsTable  string
	// Partition is the bucket of a partitioned inbox, "" for one that is
	// not partitioned.
	Partition string
}

// Alter renders the SQL of the migration that makes the change c from prev
// to next: what follows the header migrate writes.
func Alter(prev, next model.Inbox, c migrate.Change) []byte {
	d := alterData{}
	t := TableName(next.Table)
	var summary, locks []string
	if c.ReplaceUnique {
		d.Up = append(d.Up, dropUnique(prev)...)
	}
	for _, col := range c.AddColumns {
		d.Up = append(d.Up, fmt.Sprintf("ALTER TABLE %s ADD COLUMN %s %s", t, Quote(col.Name), col.Type))
		summary = append(summary, "adds the nullable key part "+col.Name)
	}
	for _, col := range c.DropNotNull {
		d.Up = append(d.Up, fmt.Sprintf("ALTER TABLE %s ALTER COLUMN %s DROP NOT NULL", t, Quote(col.Name)))
		summary = append(summary, "makes the key part "+col.Name+" nullable")
	}
	for _, col := range c.Widen {
		d.Up = append(d.Up, fmt.Sprintf("ALTER TABLE %s ALTER COLUMN %s TYPE %s", t, Quote(col.Name), col.Type))
		summary = append(summary, fmt.Sprintf("widens the key part %s from %s to %s", col.Name, c.Old[col.Name].Type, col.Type))
		locks = addLock(locks, "rewrites the table under ACCESS EXCLUSIVE")
	}
	if c.ReplaceUnique {
		d.Up = append(d.Up, createUnique(next)...)
		locks = addLock(locks, "holds a SHARE lock while an index builds")
		if prev.Unique != next.Unique {
			summary = append(summary, fmt.Sprintf("enforces unique keys with %s instead of %s", uniqueText(next.Unique), uniqueText(prev.Unique)))
		}
	}
	if c.AddGuard {
		d.Up = append(d.Up, versionsDDL(next, names(next)))
		summary = append(summary, "adds the stale-message guard's versions table")
	}
	if c.ResultJSON {
		d.Up = append(d.Up, fmt.Sprintf("ALTER TABLE %s ALTER COLUMN result TYPE json", t))
		summary = append(summary, "stores results as json, not jsonb")
		locks = addLock(locks, "rewrites the table under ACCESS EXCLUSIVE")
	}

	if c.RetentionBTree {
		n := names(next)
		d.Up = append(d.Up,
			fmt.Sprintf("CREATE INDEX IF NOT EXISTS %s ON %s (created_at)", Quote(n.retentionIndex), t),
			"DROP INDEX IF EXISTS "+qualify(n.schema, n.createdIndex))
		summary = append(summary, "indexes created_at with a B-tree, not BRIN")
		locks = addLock(locks, "holds a SHARE lock while an index builds")
	}

	if c.RetentionBTree {
		n := names(next)
		d.Down = append(d.Down,
			fmt.Sprintf("CREATE INDEX %s ON %s USING brin (created_at) WITH (autosummarize = on)", Quote(n.createdIndex), t),
			"DROP INDEX "+qualify(n.schema, n.retentionIndex))
	}
	if c.ResultJSON {
		d.Down = append(d.Down, fmt.Sprintf("ALTER TABLE %s ALTER COLUMN result TYPE jsonb", t))
	}
	if c.AddGuard {
		d.Down = append(d.Down, "DROP TABLE "+names(next).versionsTable)
	}
	if c.ReplaceUnique {
		d.Down = append(d.Down, dropUnique(next)...)
	}
	for _, col := range c.Widen {
		d.Down = append(d.Down, fmt.Sprintf("ALTER TABLE %s ALTER COLUMN %s TYPE %s", t, Quote(col.Name), c.Old[col.Name].Type))
	}
	for _, col := range c.DropNotNull {
		d.Down = append(d.Down, fmt.Sprintf("ALTER TABLE %s ALTER COLUMN %s SET NOT NULL", t, Quote(col.Name)))
	}
	for _, col := range c.AddColumns {
		d.Down = append(d.Down, fmt.Sprintf("ALTER TABLE %s DROP COLUMN %s", t, Quote(col.Name)))
	}
	if c.ReplaceUnique {
		d.Down = append(d.Down, createUnique(prev)...)
	}
	d.Summary = summaryLines(fmt.Sprintf("Changes the inbox of consumer %s: %s.", next.Consumer, strings.Join(summary, "; ")), locks)
	return []byte(render("alter.sql.tmpl", d))
}

type alterData struct {
	// Summary is the migration's header after idemgen's own lines: what it
	// changes, then what it locks. docs/migrations.md says why.
	Summary  []string
	Up, Down []string
}

// addLock adds what a change locks to locks, once.
func addLock(locks []string, lock string) []string {
	if slices.Contains(locks, lock) {
		return locks
	}
	return append(locks, lock)
}

// summaryLines is the header of an altering migration: what changes, and, if
// anything, what it locks while it runs.
func summaryLines(what string, locks []string) []string {
	if len(locks) == 0 {
		return []string{what}
	}
	return []string{what, "It " + strings.Join(locks, " and ") + " (docs/migrations.md#schema-evolution)."}
}

func uniqueText(u model.Unique) string {
	switch u {
	case model.PartialIndexes:
		return "a partial unique index per null pattern"
	case model.NullsNotDistinct:
		return "UNIQUE NULLS NOT DISTINCT"
	default:
		return "a primary key"
	}
}

// keyColumns lists the columns of in's unique key: the key parts' and, for a
// partitioned inbox, the bucket column, which PostgreSQL requires every
// unique constraint of a partitioned table to hold (each partition then
// enforces it for its bucket: every copy of a message is in one bucket).
func keyColumns(in model.Inbox) string {
	cols := make([]string, len(in.Key))
	for i, c := range in.Key {
		cols[i] = Quote(c.Name)
	}
	if in.Partition != "" {
		cols = append(cols, model.BucketColumn)
	}
	return strings.Join(cols, ", ")
}

// uniqueConstraint is the table constraint of a primary-key or
// nulls-not-distinct inbox.
func uniqueConstraint(in model.Inbox, n inboxNames) string {
	if in.Unique == model.NullsNotDistinct {
		return Quote(n.unique) + " UNIQUE NULLS NOT DISTINCT (" + keyColumns(in) + ")"
	}
	return Quote(n.pkey) + " PRIMARY KEY (" + keyColumns(in) + ")"
}

// partialIndexes returns one unique index per null pattern of the nullable
// parts: the columns that are not NULL in the pattern, under a predicate that
// fixes which ones are.
func partialIndexes(in model.Inbox, n inboxNames) []string {
	nullable := in.Nullable()
	var out []string
	for pattern := range 1 << len(nullable) {
		isNull := map[string]bool{}
		for j, c := range nullable {
			if pattern&(1<<j) != 0 {
				isNull[c.Name] = true
			}
		}
		var cols, preds []string
		for _, c := range in.Key {
			if !isNull[c.Name] {
				cols = append(cols, Quote(c.Name))
			}
			switch {
			case isNull[c.Name]:
				preds = append(preds, Quote(c.Name)+" IS NULL")
			case c.Nullable:
				preds = append(preds, Quote(c.Name)+" IS NOT NULL")
			}
		}
		if in.Partition != "" {
			cols = append(cols, model.BucketColumn)
		}
		target := strings.Join(cols, ", ")
		if target == "" {
			target = "(true)" // every part NULL: at most one such row
		}
		out = append(out, fmt.Sprintf("CREATE UNIQUE INDEX %s ON %s (%s) WHERE %s",
			Quote(n.partial[pattern]), n.table, target, strings.Join(preds, " AND ")))
	}
	return out
}

func createUnique(in model.Inbox) []string {
	n := names(in)
	if in.Unique == model.PartialIndexes {
		return partialIndexes(in, n)
	}
	return []string{"ALTER TABLE " + n.table + " ADD CONSTRAINT " + uniqueConstraint(in, n)}
}

func dropUnique(in model.Inbox) []string {
	n := names(in)
	switch in.Unique {
	case model.PartialIndexes:
		var out []string
		for _, name := range n.partial {
			out = append(out, "DROP INDEX "+qualify(n.schema, name))
		}
		return out
	case model.NullsNotDistinct:
		return []string{"ALTER TABLE " + n.table + " DROP CONSTRAINT " + Quote(n.unique)}
	default:
		return []string{"ALTER TABLE " + n.table + " DROP CONSTRAINT " + Quote(n.pkey)}
	}
}

// versionsDDL creates the guard's table: the last applied version of each
// entity.
func versionsDDL(in model.Inbox, n inboxNames) string {
	return fmt.Sprintf("CREATE TABLE %s (\n    entity     %s NOT NULL PRIMARY KEY,\n    version    bigint NOT NULL,\n    updated_at timestamptz NOT NULL DEFAULT now()\n)",
		n.versionsTable, in.Guard.Type)
}

func render(name string, d any) string {
	var b bytes.Buffer
	if err := tmpl.ExecuteTemplate(&b, name, d); err != nil {
		// The templates are fixed and the data is plain strings: an
		// error here is a bug in idemgen, not in the user's input.
		panic(fmt.Sprintf("idemgen: render %s: %v", name, err))
	}
	return b.String()
}
