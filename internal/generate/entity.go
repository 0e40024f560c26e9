package generate

import (
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/idemgen/idemgen/internal/diag"
	"github.com/idemgen/idemgen/internal/migrate"
	"github.com/idemgen/idemgen/internal/model"
)

// checkEntityTables checks the business tables of the mode=entity handlers
// whose migrations go to dir against what the folder's own migrations (the
// user's, not idemgen's) say of them, where they say it:
//
//   - two mode=entity consumers cannot share a table (one fingerprint
//     column, one constraint: each would take the other's rows for its
//     duplicates);
//   - when a migration of the folder creates the table (CREATE TABLE), every
//     column of columns= must be created by it or added by a later ALTER
//     TABLE ... ADD COLUMN of the folder, and that migration must come
//     before idemgen's, which alters the table (goose runs them in version
//     order).
//
// A table the folder does not create (another folder's, or one that exists
// already) is checked when the migrations run: the generated test applies
// them and fails on a missing table or column, and the runtime says at the
// first duplicate when no unique constraint covers the columns.
func checkEntityTables(prog model.Program, dir migrate.Dir, diags *diag.List) {
	owner := map[string]model.Handler{}
	for _, pkg := range prog.Packages {
		for _, h := range pkg.Handlers {
			if !h.EntityMode() || h.MigrationsDir != dir.Path || h.Entity == nil || h.Entity.Table == "" {
				continue
			}
			t := normalName(h.Entity.Table)
			if other, dup := owner[t]; dup {
				diags.Errorf(h.Entity.TablePos, "consumer %s and consumer %s (%s:%d) are both mode=entity on table %s: its rows can be the markers of one consumer only; give one of them another table, or use mode=tx for it",
					h.Consumer, other.Consumer, filepath.Base(other.Pos.File), other.Pos.Line, h.Entity.Table)
				continue
			}
			owner[t] = h
			checkEntityTable(h, dir, diags)
		}
	}
}

var (
	createTableRE = regexp.MustCompile(`(?is)\bcreate\s+(?:unlogged\s+)?table\s+(?:if\s+not\s+exists\s+)?([a-z0-9_."]+)\s*\(`)
	addColumnRE   = regexp.MustCompile(`(?is)\balter\s+table\s+(?:if\s+exists\s+)?(?:only\s+)?([a-z0-9_."]+)\s+add\s+(?:column\s+)?(?:if\s+not\s+exists\s+)?([a-z0-9_"]+)`)
	renameRE      = regexp.MustCompile(`(?is)\balter\s+table\s+(?:if\s+exists\s+)?(?:only\s+)?([a-z0-9_."]+)\s+rename\b`)
)

// tableConstraintWords start the elements of a CREATE TABLE that are not
// columns.
var tableConstraintWords = map[string]bool{"constraint": true, "primary": true, "unique": true, "check": true, "foreign": true, "exclude": true, "like": true}

func checkEntityTable(h model.Handler, dir migrate.Dir, diags *diag.List) {
	table := normalName(h.Entity.Table)
	var ours int64 // the version of idemgen's migration of this consumer
	for _, f := range dir.Files {
		if consumer, _, ok, _ := (migrate.EntityKind{}).Read(f.Content); ok && consumer == h.Consumer {
			ours = f.Version
		}
	}
	var created *migrate.File
	columns := map[string]bool{}
	renamed := false
	for i, f := range dir.Files {
		if _, _, ok, _ := (migrate.EntityKind{}).Read(f.Content); ok || strings.HasPrefix(string(f.Content), migrate.Header) {
			continue // idemgen's
		}
		up := upSection(string(f.Content))
		for _, m := range createTableRE.FindAllStringSubmatchIndex(up, -1) {
			if normalName(up[m[2]:m[3]]) != table || created != nil {
				continue
			}
			created = &dir.Files[i]
			for _, col := range tableColumns(up[m[1]:]) {
				columns[col] = true
			}
		}
		if created == nil {
			continue
		}
		for _, m := range addColumnRE.FindAllStringSubmatch(up, -1) {
			if normalName(m[1]) == table {
				columns[normalName(m[2])] = true
			}
		}
		for _, m := range renameRE.FindAllStringSubmatch(up, -1) {
			renamed = renamed || normalName(m[1]) == table
		}
	}
	if created == nil {
		return
	}
	at := diag.Pos{File: filepath.Join(dir.Path, created.Name), Line: 1, Col: 1}
	if ours != 0 && created.Version > ours {
		diags.Errorf(at, "migration %s creates %s, the table of mode=entity consumer %s, after idemgen's migration (version %d) that adds its fingerprint column: goose runs them in version order, so that ALTER TABLE would find no table; "+
			"create the table in a migration numbered before %05d (if neither was applied anywhere yet, swap their versions and run idemgen -rehash)", created.Name, h.Entity.Table, h.Consumer, ours, ours)
	}
	if renamed {
		return // columns may be renamed: leave them to the generated test
	}
	for _, col := range h.Entity.Columns {
		if !columns[col] {
			diags.Errorf(h.Entity.ColumnsPos, "column %s of columns= is not a column of %s as migration %s creates it (it has %s); columns= names the columns that hold the key parts, in key order",
				col, h.Entity.Table, created.Name, strings.Join(slices.Sorted(maps.Keys(columns)), ", "))
		}
	}
}

// upSection is the part of a goose migration before its Down annotation.
func upSection(sql string) string {
	if i := strings.Index(sql, "-- +goose Down"); i >= 0 {
		return sql[:i]
	}
	return sql
}

// tableColumns reads the column names of a CREATE TABLE's element list,
// which body starts just inside of.
func tableColumns(body string) []string {
	var cols []string
	depth, start := 0, 0
	element := func(s string) {
		fields := strings.Fields(strings.TrimSpace(stripComments(s)))
		if len(fields) > 0 && !tableConstraintWords[strings.ToLower(fields[0])] {
			cols = append(cols, normalName(fields[0]))
		}
	}
	for i, r := range body {
		switch r {
		case '(':
			depth++
		case ')':
			if depth == 0 {
				element(body[start:i])
				return cols
			}
			depth--
		case ',':
			if depth == 0 {
				element(body[start:i])
				start = i + 1
			}
		}
	}
	return cols
}

func stripComments(s string) string {
	var lines []string
	for _, l := range strings.Split(s, "\n") {
		if i := strings.Index(l, "--"); i >= 0 {
			l = l[:i]
		}
		lines = append(lines, l)
	}
	return strings.Join(lines, "\n")
}

// normalName folds a SQL name as PostgreSQL does for the plain names
// idemgen accepts: quotes removed, lower case.
func normalName(s string) string { return strings.ToLower(strings.ReplaceAll(s, `"`, "")) }
