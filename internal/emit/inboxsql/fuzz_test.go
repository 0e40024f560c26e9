package inboxsql

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/idemgen/idemgen/internal/migrate"
	"github.com/idemgen/idemgen/internal/model"
)

// FuzzIdentifier: any base and suffix give a name within PostgreSQL's limit,
// without a panic; distinct inputs give distinct names (short ones are the
// plain join, long ones carry a hash of it); valid UTF-8 stays valid.
// Seeds: testdata/fuzz/FuzzIdentifier.
func FuzzIdentifier(f *testing.F) {
	f.Add("idem_a", "pkey", "idem_a", "created_at_idx")
	f.Add("idem_lines_return_authorized", "key_null_shipping_provider_return_authorization_code_idx",
		"idem_lines_return_authorized", "key_null_shipping_provider_return_authorization_code_warehouse_idx")
	f.Fuzz(func(t *testing.T, base1, suffix1, base2, suffix2 string) {
		a, b := Identifier(base1, suffix1), Identifier(base2, suffix2)
		for _, c := range []struct{ base, suffix, name string }{{base1, suffix1, a}, {base2, suffix2, b}} {
			if len(c.name) > MaxIdentifier {
				t.Errorf("Identifier(%q, %q) = %q, %d bytes", c.base, c.suffix, c.name, len(c.name))
			}
			if utf8.ValidString(c.base) && utf8.ValidString(c.suffix) && !utf8.ValidString(c.name) {
				t.Errorf("Identifier(%q, %q) = %q splits a character", c.base, c.suffix, c.name)
			}
		}
		if j1, j2 := base1+"_"+suffix1, base2+"_"+suffix2; j1 != j2 && a == b {
			t.Errorf("Identifier(%q, %q) and Identifier(%q, %q) are both %q", base1, suffix1, base2, suffix2, a)
		}
	})
}

// FuzzInboxNames derives the names and renders the SQL of any inbox: a table
// (optionally schema-qualified) and up to three key columns, each of which
// may be nullable, under each unique strategy, with or without a guard.
// Nothing may panic. For the names the loader lets through (table and
// column names of at most 63 bytes without NUL), the objects' names must be
// distinct and at most 63 bytes, and every name that Quote does not leave
// bare must never appear bare in the SQL. Seeds: testdata/fuzz/FuzzInboxNames.
func FuzzInboxNames(f *testing.F) {
	f.Add("idem_a", "key_id", "key_ref", "", uint8(0b10), uint8(0), false)
	f.Add("order", "key_order", "", "", uint8(0), uint8(0), true)
	f.Add("app.inbox_a", "key_id", "", "", uint8(0), uint8(1), true)
	f.Add("idem_ic_a", "key_order", "key_line", "key_order_line", uint8(0b111), uint8(0), false)
	f.Add("idem_lines_return_authorized", "key_id", "key_shipping_provider_return_authorization_code", "", uint8(0b10), uint8(0), false)
	f.Fuzz(func(t *testing.T, table, c1, c2, c3 string, nullable, unique uint8, guard bool) {
		in := model.Inbox{Consumer: "fuzz", Table: table, Unique: model.PrimaryKey}
		for i, name := range []string{c1, c2, c3} {
			if name == "" || slices.ContainsFunc(in.Key, func(c model.Column) bool { return c.Name == name }) {
				continue
			}
			in.Key = append(in.Key, model.Column{Name: name, Type: "text", Nullable: nullable&(1<<i) != 0})
		}
		if len(in.Key) == 0 {
			return
		}
		if len(in.Nullable()) > 0 {
			in.Unique = model.PartialIndexes
			if unique%2 == 1 {
				in.Unique = model.NullsNotDistinct
			}
		}
		if guard {
			in.Guard = &model.Column{Name: "entity", Type: "text"}
		}
		sql := renderAll(in)

		schema, base := split(table)
		if !plausible(schema) || !plausible(base) || schema == "" && strings.Contains(table, ".") {
			return
		}
		for _, c := range in.Key {
			if !plausible(c.Name) {
				return
			}
		}
		objects := ObjectNames(in)
		for _, name := range objects {
			if len(name) > MaxIdentifier {
				t.Errorf("name %q of table %q is %d bytes", name, table, len(name))
			}
		}
		if dup := duplicate(objects); dup != "" {
			t.Errorf("table %q, key %v: name %q is given to two objects: %q", table, in.Key, dup, objects)
		}
		var unsafe []string
		for _, name := range append(append(objects, schema), columnNames(in)...) {
			if name != "" && Quote(name) != name {
				unsafe = append(unsafe, name)
			}
		}
		// The words of the templates themselves (SELECT, $1, 0) are those of
		// the same inbox under other names.
		renamed := in
		renamed.Table, renamed.Key = "zq_table", nil
		if schema != "" {
			renamed.Table = "zq_schema.zq_table"
		}
		for i, c := range in.Key {
			c.Name = fmt.Sprintf("zq_column_%d", i)
			renamed.Key = append(renamed.Key, c)
		}
		vocabulary := map[string]bool{}
		for _, s := range renderAll(renamed) {
			words, _ := bareWords(s)
			maps.Copy(vocabulary, words)
		}
		for _, s := range sql {
			words, ok := bareWords(s)
			if !ok {
				t.Fatalf("unbalanced quotes in\n%s", s)
			}
			for _, name := range unsafe {
				if words[name] && !vocabulary[name] {
					t.Errorf("name %q appears unquoted in\n%s", name, s)
				}
			}
		}
	})
}

// renderAll renders every SQL text of in: its migration, the names its table
// declaration states, and the migration that adds its last key part when
// that one is nullable.
func renderAll(in model.Inbox) []string {
	sql := []string{string(Create(in))}
	// The names the table's declaration gives the runtime, which writes
	// them into its statements as they are.
	names := []string{TableName(in.Table)}
	for _, c := range KeyColumns(handlerOf(in), nil) {
		names = append(names, c.Name)
	}
	if in.Guard != nil {
		names = append(names, VersionsTable(in))
	}
	sql = append(sql, strings.Join(names, " "))
	if prev := in; len(in.Key) > 1 && in.Key[len(in.Key)-1].Nullable {
		prev.Key = prev.Key[:len(prev.Key)-1]
		prev.Unique, prev.Guard = model.PrimaryKey, nil
		if len(prev.Nullable()) > 0 {
			prev.Unique = in.Unique
		}
		last := in.Key[len(in.Key)-1]
		c := migrate.Change{AddColumns: []model.Column{last}, ReplaceUnique: true, AddGuard: in.Guard != nil}
		sql = append(sql, string(Alter(prev, in, c)))
	}
	return sql
}

// handlerOf returns a handler whose inbox is in.
func handlerOf(in model.Inbox) model.Handler {
	h := model.Handler{Consumer: in.Consumer, Table: in.Table, NullsNotDistinct: in.Unique == model.NullsNotDistinct}
	for _, c := range in.Key {
		h.Key = append(h.Key, partOf(c))
	}
	if in.Guard != nil {
		h.Guard = &model.Guard{Entity: partOf(*in.Guard)}
	}
	return h
}

// plausible reports whether the invariants must hold for a name. The loader
// lets through only [a-z_][a-z0-9_]* of at most 63 bytes; the fuzzer's names
// may be anything else too, but at most 63 bytes of UTF-8 without control
// characters (PostgreSQL refuses NUL in any name, and a line break would end
// the comment line that records the schema).
func plausible(name string) bool {
	return len(name) <= MaxIdentifier && utf8.ValidString(name) &&
		!strings.ContainsFunc(name, func(r rune) bool { return r < ' ' || r == 0x7f })
}

func columnNames(in model.Inbox) []string {
	var names []string
	for _, c := range in.Key {
		names = append(names, c.Name)
	}
	return names
}

func duplicate(names []string) string {
	seen := map[string]bool{}
	for _, n := range names {
		if seen[n] {
			return n
		}
		seen[n] = true
	}
	return ""
}

// bareWords returns the words of sql outside string literals, quoted names
// and comments, split at everything that cannot be part of an unquoted name,
// and whether the quotes balance.
func bareWords(sql string) (map[string]bool, bool) {
	words := map[string]bool{}
	var word strings.Builder
	flush := func() {
		if word.Len() > 0 {
			words[word.String()] = true
			word.Reset()
		}
	}
	for i := 0; i < len(sql); i++ {
		switch c := sql[i]; {
		case c == '\'' || c == '"':
			flush()
			// A doubled quote inside stands for itself.
			for i++; ; i++ {
				if i >= len(sql) {
					return words, false
				}
				if sql[i] == c {
					if i+1 < len(sql) && sql[i+1] == c {
						i++
						continue
					}
					break
				}
			}
		case c == '-' && i+1 < len(sql) && sql[i+1] == '-':
			flush()
			for i < len(sql) && sql[i] != '\n' {
				i++
			}
		case c == ' ' || c == '\n' || c == '\t' || c == ',' || c == '(' || c == ')' || c == ';' || c == '.' || c == '=' || c == ':' || c == '<':
			flush()
		default:
			word.WriteByte(c)
		}
	}
	flush()
	return words, true
}
