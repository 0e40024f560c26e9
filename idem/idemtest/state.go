package idemtest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// A state is what the tables of a test schema hold, by table, as text: the
// effect the scenarios judge a handler by. It leaves out idemgen's own
// tables (inboxes and claims tables, which carry an "idemgen ..." comment,
// their guards' versions tables, the outbox, whose rows Suite.Outbox
// checks) and goose's version table.
type state map[string]tableState

// tableState is what one table holds: its rows as text, in no order.
type tableState struct {
	columns []string
	rows    [][]string
}

// nullValue stands for NULL among a row's values: text never holds a NUL.
const nullValue = "\x00"

// notState are the tables of a test schema that are not the handler's
// effect, whatever their comment.
var notState = []string{"goose_db_version", "idem_outbox"}

// readState reads the state of schema, without the tables in skip and
// their versions tables.
func readState(ctx context.Context, pool *pgxpool.Pool, schema string, skip ...string) (state, error) {
	rows, err := pool.Query(ctx, `
SELECT c.relname, coalesce(obj_description(c.oid, 'pg_class'), '') LIKE 'idemgen %'
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1
  AND c.relkind IN ('r', 'p')
  AND NOT c.relispartition
ORDER BY c.relname`, schema)
	if err != nil {
		return nil, fmt.Errorf("list the tables of schema %s: %w", schema, err)
	}
	type relation struct {
		name    string
		idemgen bool
	}
	tables, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (relation, error) {
		var t relation
		return t, row.Scan(&t.name, &t.idemgen)
	})
	if err != nil {
		return nil, fmt.Errorf("list the tables of schema %s: %w", schema, err)
	}
	own := append(slices.Clone(notState), skip...)
	for _, t := range tables {
		if t.idemgen {
			own = append(own, t.name)
		}
	}
	s := state{}
	for _, t := range tables {
		// An inbox's stale-message guard keeps its versions in
		// <inbox>_versions, which is idemgen's as well.
		name := t.name
		base := strings.TrimSuffix(name, "_versions")
		if slices.Contains(own, name) || (base != name && slices.Contains(own, base)) {
			continue
		}
		table, err := readTable(ctx, pool, pgx.Identifier{schema, name}.Sanitize())
		if err != nil {
			return nil, fmt.Errorf("read table %s: %w", name, err)
		}
		s[name] = table
	}
	return s, nil
}

// readTable reads every row of table as text, as psql shows it: the simple
// protocol returns each value in its text form.
func readTable(ctx context.Context, pool *pgxpool.Pool, table string) (tableState, error) {
	rows, err := pool.Query(ctx, "SELECT * FROM "+table, pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		return tableState{}, err
	}
	defer rows.Close()
	var t tableState
	for _, f := range rows.FieldDescriptions() {
		t.columns = append(t.columns, f.Name)
	}
	for rows.Next() {
		raw := rows.RawValues()
		row := make([]string, len(raw))
		for i, v := range raw {
			if v == nil {
				row[i] = nullValue
			} else {
				row[i] = string(v)
			}
		}
		t.rows = append(t.rows, row)
	}
	return t, rows.Err()
}

// volatileByDefinition returns, per table of schema, the columns whose
// values differ between two runs that do the same: identity and serial
// columns (a sequence is not rolled back with its transaction), columns
// whose default reads the clock or a random source, and columns of foreign
// keys to any of those.
func volatileByDefinition(ctx context.Context, pool *pgxpool.Pool, schema string) (map[string]map[string]bool, error) {
	volatile := map[string]map[string]bool{}
	add := func(table, column string) bool {
		if volatile[table][column] {
			return false
		}
		if volatile[table] == nil {
			volatile[table] = map[string]bool{}
		}
		volatile[table][column] = true
		return true
	}
	rows, err := pool.Query(ctx, `
SELECT c.relname, a.attname
FROM pg_attribute a
JOIN pg_class c ON c.oid = a.attrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
WHERE n.nspname = $1 AND c.relkind IN ('r', 'p') AND a.attnum > 0 AND NOT a.attisdropped
  AND (a.attidentity <> ''
       OR pg_get_expr(d.adbin, d.adrelid) ~* '(nextval|now|clock_timestamp|statement_timestamp|transaction_timestamp|current_timestamp|localtimestamp|random|uuid|txid|xact)')`, schema)
	if err != nil {
		return nil, fmt.Errorf("read the columns of schema %s: %w", schema, err)
	}
	type column struct{ table, name string }
	cols, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (column, error) {
		var c column
		return c, row.Scan(&c.table, &c.name)
	})
	if err != nil {
		return nil, fmt.Errorf("read the columns of schema %s: %w", schema, err)
	}
	for _, c := range cols {
		add(c.table, c.name)
	}
	rows, err = pool.Query(ctx, `
SELECT c.relname, a.attname, rc.relname, ra.attname
FROM pg_constraint k
JOIN pg_class c ON c.oid = k.conrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_class rc ON rc.oid = k.confrelid
CROSS JOIN LATERAL unnest(k.conkey, k.confkey) AS u(col, refcol)
JOIN pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = u.col
JOIN pg_attribute ra ON ra.attrelid = k.confrelid AND ra.attnum = u.refcol
WHERE k.contype = 'f' AND n.nspname = $1`, schema)
	if err != nil {
		return nil, fmt.Errorf("read the foreign keys of schema %s: %w", schema, err)
	}
	type reference struct{ from, to column }
	refs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (reference, error) {
		var r reference
		return r, row.Scan(&r.from.table, &r.from.name, &r.to.table, &r.to.name)
	})
	if err != nil {
		return nil, fmt.Errorf("read the foreign keys of schema %s: %w", schema, err)
	}
	for changed := true; changed; {
		changed = false
		for _, r := range refs {
			if volatile[r.to.table][r.to.name] && add(r.from.table, r.from.name) {
				changed = true
			}
		}
	}
	return volatile, nil
}

// judge compares states on the columns that one delivery sets the same way
// every time.
type judge struct {
	// compared holds, per table, whether each column is compared; a table
	// not in it is compared on every column.
	compared map[string][]bool
	// unjudged holds the tables two runs that do the same leave with
	// different numbers of rows, which no comparison can judge.
	unjudged map[string]bool
}

// learnJudge returns the judge of states like a and b, which two runs that
// do the same left in two schemas: the columns whose values differ between
// them, or that volatile names, are not compared.
func learnJudge(volatile map[string]map[string]bool, pairs ...[2]state) judge {
	j := judge{compared: map[string][]bool{}, unjudged: map[string]bool{}}
	for _, p := range pairs {
		a, b := p[0], p[1]
		for name, ta := range a {
			tb, ok := b[name]
			if !ok || !slices.Equal(ta.columns, tb.columns) || len(ta.rows) != len(tb.rows) {
				j.unjudged[name] = true
				continue
			}
			cmp, ok := j.compared[name]
			if !ok {
				cmp = make([]bool, len(ta.columns))
				for i, c := range ta.columns {
					cmp[i] = !volatile[name][c]
				}
				j.compared[name] = cmp
			}
			for i := range ta.columns {
				if cmp[i] && !slices.Equal(columnValues(ta, i), columnValues(tb, i)) {
					cmp[i] = false
				}
			}
		}
	}
	return j
}

// columnValues returns the values of column i in t, sorted.
func columnValues(t tableState, i int) []string {
	vs := make([]string, len(t.rows))
	for r, row := range t.rows {
		vs[r] = row[i]
	}
	slices.Sort(vs)
	return vs
}

// ignored lists the columns the judge does not compare and the tables it
// does not judge, for a log line; "" when it compares everything.
func (j judge) ignored() string {
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(j.unjudged)) {
		parts = append(parts, "table "+name)
	}
	return strings.Join(parts, ", ")
}

// ignoredColumns lists the columns of s the judge does not compare.
func (j judge) ignoredColumns(s state) string {
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(s)) {
		cmp, ok := j.compared[name]
		if !ok || j.unjudged[name] {
			continue
		}
		for i, c := range s[name].columns {
			if i < len(cmp) && !cmp[i] {
				parts = append(parts, name+"."+c)
			}
		}
	}
	return strings.Join(parts, ", ")
}

// projected returns t's rows as the judge compares them, sorted: each row
// the text of its compared columns.
func (j judge) projected(name string, t tableState) ([]string, [][]string) {
	cmp := j.compared[name]
	keys := make([]string, len(t.rows))
	byKey := make(map[string][]string, len(t.rows))
	for r, row := range t.rows {
		var vals []string
		for i, v := range row {
			if cmp == nil || (i < len(cmp) && cmp[i]) {
				vals = append(vals, v)
			}
		}
		keys[r] = strings.Join(vals, "\x1f")
		byKey[keys[r]] = row
	}
	slices.Sort(keys)
	rows := make([][]string, len(keys))
	for i, k := range keys {
		rows[i] = byKey[k]
	}
	return keys, rows
}

// diff describes how got differs from want, one phrase per table that
// differs, such as "balance = 800 in accounts where one delivery leaves
// 100". ref says what want is ("one delivery leaves", "the state before it
// had"). Tables the judge cannot judge are left out; nil when nothing else
// differs.
func (j judge) diff(got, want state, ref string) []string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(union(got, want))) {
		if j.unjudged[name] {
			continue
		}
		g, w := got[name], want[name]
		if len(g.columns) == 0 {
			g.columns = w.columns
		}
		gk, gr := j.projected(name, g)
		wk, wr := j.projected(name, w)
		if slices.Equal(gk, wk) {
			continue
		}
		if len(gk) != len(wk) {
			out = append(out, fmt.Sprintf("%s in %s where %s %s", rowCount(len(gk)), name, ref, countText(len(wk))))
			continue
		}
		// As many rows, some of them different: pair those off in order.
		gOnly, wOnly := unmatched(gk, gr, wk, wr)
		cmp := j.compared[name]
		var gotVals, wantVals []string
		for i, c := range g.columns {
			if (cmp == nil || (i < len(cmp) && cmp[i])) && i < len(wOnly[0]) && gOnly[0][i] != wOnly[0][i] {
				gotVals = append(gotVals, c+" = "+display(gOnly[0][i]))
				wantVals = append(wantVals, display(wOnly[0][i]))
			}
		}
		if len(gotVals) > 3 {
			gotVals, wantVals = append(gotVals[:3], "..."), append(wantVals[:3], "...")
		}
		phrase := fmt.Sprintf("%s in %s where %s %s", strings.Join(gotVals, ", "), name, ref, strings.Join(wantVals, ", "))
		if len(gOnly) > 1 {
			phrase += fmt.Sprintf(" (and %d other rows differ)", len(gOnly)-1)
		}
		out = append(out, phrase)
	}
	return out
}

// unmatched returns the rows of got and of want that the other lacks, in
// order (a multiset difference of the sorted keys).
func unmatched(gk []string, gr [][]string, wk []string, wr [][]string) (gOnly, wOnly [][]string) {
	i, k := 0, 0
	for i < len(gk) || k < len(wk) {
		switch {
		case k == len(wk) || (i < len(gk) && gk[i] < wk[k]):
			gOnly = append(gOnly, gr[i])
			i++
		case i == len(gk) || wk[k] < gk[i]:
			wOnly = append(wOnly, wr[k])
			k++
		default:
			i++
			k++
		}
	}
	return gOnly, wOnly
}

func union(a, b state) map[string]bool {
	m := map[string]bool{}
	for k := range a {
		m[k] = true
	}
	for k := range b {
		m[k] = true
	}
	return m
}

func rowCount(n int) string {
	switch n {
	case 0:
		return "no row"
	case 1:
		return "1 row"
	}
	return fmt.Sprintf("%d rows", n)
}

func countText(n int) string {
	if n == 0 {
		return "none"
	}
	return fmt.Sprint(n)
}

func display(v string) string {
	if v == nullValue {
		return "NULL"
	}
	return v
}

// tables names the tables of s, for a message.
func (s state) tables() string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(slices.Sorted(maps.Keys(s)), ", ")
}
