package idem

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/tools/txtar"
)

// placeholder is one $n of a statement and the type it is cast to right
// after it ($2::bytea), if any.
type placeholder struct {
	n    int
	cast string
}

// placeholders returns the $n parameters of a PostgreSQL statement, in
// order, skipping what only looks like one: string constants ('...',
// E'...' with backslash escapes), quoted identifiers, dollar-quoted strings,
// line and (nested) block comments, and a $ inside an identifier.
func placeholders(sql string) ([]placeholder, error) {
	var found []placeholder
	identChar := func(c byte) bool {
		return c == '_' || c == '$' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
	}
	for i := 0; i < len(sql); {
		c := sql[i]
		switch {
		case c == '\'':
			escapes := i > 0 && (sql[i-1] == 'E' || sql[i-1] == 'e') && (i == 1 || !identChar(sql[i-2]))
			j := i + 1
			for ; j < len(sql); j++ {
				if escapes && sql[j] == '\\' {
					j++
					continue
				}
				if sql[j] == '\'' {
					if j+1 < len(sql) && sql[j+1] == '\'' {
						j++
						continue
					}
					break
				}
			}
			if j >= len(sql) {
				return nil, fmt.Errorf("unterminated string constant at offset %d", i)
			}
			i = j + 1
		case c == '"':
			j := strings.IndexByte(sql[i+1:], '"')
			if j < 0 {
				return nil, fmt.Errorf("unterminated quoted identifier at offset %d", i)
			}
			i += j + 2
		case strings.HasPrefix(sql[i:], "--"):
			j := strings.IndexByte(sql[i:], '\n')
			if j < 0 {
				return found, nil
			}
			i += j + 1
		case strings.HasPrefix(sql[i:], "/*"):
			depth, j := 1, i+2
			for ; j < len(sql) && depth > 0; j++ {
				switch {
				case strings.HasPrefix(sql[j:], "/*"):
					depth++
					j++
				case strings.HasPrefix(sql[j:], "*/"):
					depth--
					j++
				}
			}
			if depth > 0 {
				return nil, fmt.Errorf("unterminated comment at offset %d", i)
			}
			i = j
		case c == '$' && (i == 0 || !identChar(sql[i-1])):
			j := i + 1
			for j < len(sql) && sql[j] >= '0' && sql[j] <= '9' {
				j++
			}
			if j > i+1 {
				n, err := strconv.Atoi(sql[i+1 : j])
				if err != nil {
					return nil, err
				}
				p := placeholder{n: n}
				if strings.HasPrefix(sql[j:], "::") {
					k := j + 2
					for k < len(sql) && identChar(sql[k]) {
						k++
					}
					p.cast = sql[j+2 : k]
				}
				found = append(found, p)
				i = j
				continue
			}
			// A dollar-quoted string: $$...$$ or $tag$...$tag$.
			for j < len(sql) && identChar(sql[j]) && sql[j] != '$' {
				j++
			}
			if j >= len(sql) || sql[j] != '$' {
				i++ // a lone $
				continue
			}
			tag := sql[i : j+1]
			end := strings.Index(sql[j+1:], tag)
			if end < 0 {
				return nil, fmt.Errorf("unterminated dollar-quoted string %s at offset %d", tag, i)
			}
			i = j + 1 + end + len(tag)
		default:
			i++
		}
	}
	return found, nil
}

func TestPlaceholderScanner(t *testing.T) {
	for _, tc := range []struct {
		sql  string
		want []placeholder
	}{
		{`SELECT $1::text, $2`, []placeholder{{1, "text"}, {2, ""}}},
		{`SELECT '$1', "$2", E'\'$3', 'it''s $4', $5::bytea`, []placeholder{{5, "bytea"}}},
		{"SELECT $$ $1 $$, $tag$ $2 $tag$, $3 -- $4\n, /* $5 /* $6 */ $7 */ $8", []placeholder{{3, ""}, {8, ""}}},
		{`SELECT a$1 FROM t WHERE x = $10`, []placeholder{{10, ""}}},
		{`UPDATE t SET result = $3 WHERE k = $1 AND j = $2`, []placeholder{{3, ""}, {1, ""}, {2, ""}}},
	} {
		got, err := placeholders(tc.sql)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("placeholders(%q) = %v, %v; want %v", tc.sql, got, err, tc.want)
		}
	}
	for _, sql := range []string{`SELECT 'open`, `SELECT "open`, `SELECT /* open`, `SELECT $x$ open`} {
		if _, err := placeholders(sql); err == nil {
			t.Errorf("placeholders(%q): no error; want one", sql)
		}
	}
}

// generatedTable is an idem.Table literal of generated code, as written.
type generatedTable struct {
	where string // file and consumer, for messages
	table Table[any]
}

// stringValue evaluates a string literal or a concatenation of them.
func stringValue(e ast.Expr) (string, error) {
	switch e := e.(type) {
	case *ast.BasicLit:
		if e.Kind == token.STRING {
			return strconv.Unquote(e.Value)
		}
	case *ast.BinaryExpr:
		if e.Op == token.ADD {
			x, err := stringValue(e.X)
			if err != nil {
				return "", err
			}
			y, err := stringValue(e.Y)
			return x + y, err
		}
	case *ast.ParenExpr:
		return stringValue(e.X)
	}
	return "", fmt.Errorf("not a string constant: %T", e)
}

// tablesIn returns the idem.Table literals of a Go file's source.
func tablesIn(name string, src []byte) ([]generatedTable, error) {
	f, err := parser.ParseFile(token.NewFileSet(), name, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	var tables []generatedTable
	var walkErr error
	ast.Inspect(f, func(n ast.Node) bool {
		lit, ok := n.(*ast.CompositeLit)
		if !ok || walkErr != nil {
			return walkErr == nil
		}
		index, ok := lit.Type.(*ast.IndexExpr)
		if !ok {
			return true
		}
		sel, ok := index.X.(*ast.SelectorExpr)
		if !ok || sel.Sel.Name != "Table" {
			return true
		}
		if pkg, ok := sel.X.(*ast.Ident); !ok || pkg.Name != "idem" {
			return true
		}
		var t Table[any]
		nulls := map[string]*map[uint64]string{"NullComplete": &t.NullComplete, "NullLookup": &t.NullLookup}
		strs := map[string]*string{"Consumer": &t.Consumer, "Name": &t.Name, "Claim": &t.Claim, "Complete": &t.Complete, "Lookup": &t.Lookup, "Purge": &t.Purge,
			"BatchClaim": &t.BatchClaim, "BatchLookup": &t.BatchLookup, "BatchComplete": &t.BatchComplete}
		for _, elt := range lit.Elts {
			kv := elt.(*ast.KeyValueExpr)
			field := kv.Key.(*ast.Ident).Name
			switch {
			case strs[field] != nil:
				if *strs[field], walkErr = stringValue(kv.Value); walkErr != nil {
					walkErr = fmt.Errorf("%s: %s: %w", name, field, walkErr)
				}
			case field == "KeyFields":
				for _, e := range kv.Value.(*ast.CompositeLit).Elts {
					s, err := stringValue(e)
					if err != nil {
						walkErr = fmt.Errorf("%s: KeyFields: %w", name, err)
					}
					t.KeyFields = append(t.KeyFields, s)
				}
			case field == "Order":
				if id, ok := kv.Value.(*ast.Ident); !ok || id.Name != "nil" {
					t.Order = func(any) (any, int64, error) { return nil, 0, nil }
				}
			case nulls[field] != nil:
				m := map[uint64]string{}
				for _, e := range kv.Value.(*ast.CompositeLit).Elts {
					entry := e.(*ast.KeyValueExpr)
					pattern, err := strconv.ParseUint(entry.Key.(*ast.BasicLit).Value, 0, 64)
					if err != nil {
						walkErr = fmt.Errorf("%s: %s: %w", name, field, err)
					}
					if m[pattern], err = stringValue(entry.Value); err != nil {
						walkErr = fmt.Errorf("%s: %s: %w", name, field, err)
					}
				}
				*nulls[field] = m
			}
		}
		tables = append(tables, generatedTable{where: name + " (consumer " + t.Consumer + ")", table: t})
		return false
	})
	return tables, walkErr
}

// repositoryTables returns the Tables of the generated code in this
// repository: the examples' idem_gen.go and every idem_gen.go that a golden
// case of the generator expects (the golden test proves them byte for byte
// what idemgen writes, for every handler shape it covers).
func repositoryTables(t *testing.T) (examples, golden []generatedTable) {
	t.Helper()
	files, err := filepath.Glob("../examples/*/idem_gen.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range files {
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		tables, err := tablesIn(path, src)
		if err != nil {
			t.Fatal(err)
		}
		examples = append(examples, tables...)
	}
	cases, err := filepath.Glob("../internal/cli/testdata/*.txtar")
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range cases {
		ar, err := txtar.ParseFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range ar.Files {
			if !strings.HasPrefix(f.Name, "want:") || !strings.HasSuffix(f.Name, "idem_gen.go") {
				continue
			}
			tables, err := tablesIn(path+":"+f.Name, f.Data)
			if err != nil {
				t.Fatal(err)
			}
			golden = append(golden, tables...)
		}
	}
	if len(examples) == 0 || len(golden) == 0 {
		t.Fatalf("found %d Tables in examples/*/idem_gen.go and %d in the golden cases; want some of each", len(examples), len(golden))
	}
	return examples, golden
}

// checkStatement checks that sql uses exactly the placeholders $1 to
// $len(args), each at least once, and returns them.
func checkStatement(t *testing.T, where, what, sql string, args []any) []placeholder {
	t.Helper()
	if sql == "" {
		t.Errorf("%s: %s: no statement", where, what)
		return nil
	}
	used, err := placeholders(sql)
	if err != nil {
		t.Errorf("%s: %s: %v in %q", where, what, err, sql)
		return nil
	}
	seen := map[int]bool{}
	for _, p := range used {
		if p.n < 1 || p.n > len(args) {
			t.Errorf("%s: %s uses $%d, but idem passes %d arguments: %q", where, what, p.n, len(args), sql)
		}
		seen[p.n] = true
	}
	for n := 1; n <= len(args); n++ {
		if !seen[n] {
			t.Errorf("%s: %s does not use $%d of the %d arguments idem passes: %q", where, what, n, len(args), sql)
		}
	}
	return used
}

// castOf returns the casts of placeholder n.
func castOf(used []placeholder, n int) []string {
	var casts []string
	for _, p := range used {
		if p.n == n {
			casts = append(casts, p.cast)
		}
	}
	return casts
}

// TestTablePlaceholders checks the placeholder contract of Table (see its
// doc) on the statements idemgen really renders: for every generated Table
// in the repository and every null pattern it declares, each statement uses
// exactly the arguments that idem passes it (claimStatement,
// completeStatement, lookupStatement, purgeStatement), and the arguments
// whose position the contract fixes are where it says: the fingerprint as
// bytea and the claim wait as text after the key, the version as bigint
// last, the result last in Complete, the retention and batch size of Purge.
func TestTablePlaceholders(t *testing.T) {
	examples, golden := repositoryTables(t)
	var guarded, nullable, composite int
	for _, g := range slices.Concat(examples, golden) {
		tab, where := g.table, g.where
		n := len(tab.KeyFields)
		if n == 0 {
			t.Errorf("%s: no KeyFields", where)
			continue
		}
		if tab.Order != nil {
			guarded++
		}
		if n > 1 {
			composite++
		}
		if len(tab.NullComplete) > 0 {
			nullable++
		}
		completeKeys := slices.Sorted(maps.Keys(tab.NullComplete))
		if lookupKeys := slices.Sorted(maps.Keys(tab.NullLookup)); !slices.Equal(completeKeys, lookupKeys) {
			t.Errorf("%s: NullComplete has the null patterns %b, NullLookup %b; want the same", where, completeKeys, lookupKeys)
		}
		for _, nulls := range append([]uint64{0}, completeKeys...) {
			if nulls>>n != 0 {
				t.Errorf("%s: null pattern %b names a part beyond the %d key parts", where, nulls, n)
				continue
			}
			key := make([]any, n)
			for i := range key {
				if nulls&(1<<i) == 0 {
					key[i] = "part"
				}
			}
			what := func(stmt string) string { return fmt.Sprintf("%s for null pattern %0*b", stmt, n, nulls) }

			// Values that can be told apart from the key parts ("part")
			// and from each other, to find where idem passes each.
			fp, wait, version := []byte{0xf1}, "1ms", int64(7)
			var order []any
			if tab.Order != nil {
				order = []any{"entity", version}
			}
			sql, args := tab.claimStatement(key, fp, wait, order)
			used := checkStatement(t, where, what("Claim"), sql, args)
			type fixed struct {
				what     string
				position int    // the contract's
				cast     string // what the statement must cast it to
				is       func(any) bool
			}
			want := []fixed{
				{"the fingerprint", n + 1, "bytea", func(v any) bool { b, ok := v.([]byte); return ok && string(b) == string(fp) }},
				{"the claim wait", n + 2, "text", func(v any) bool { return v == any(wait) }},
			}
			if tab.Order != nil {
				want = append(want, fixed{"the version", n + 4, "bigint", func(v any) bool { return v == any(version) }})
			}
			for _, w := range want {
				at := slices.IndexFunc(args, w.is) + 1
				if at != w.position {
					t.Errorf("%s: idem passes %s to Claim as $%d; the contract has it as $%d", where, w.what, at, w.position)
				}
				if casts := castOf(used, at); !slices.Contains(casts, w.cast) {
					t.Errorf("%s: Claim uses $%d, where idem passes %s, as %q; want it cast to %s: %q", where, at, w.what, casts, w.cast, sql)
				}
			}

			sql, args = tab.completeStatement(key, []byte(`{}`))
			checkStatement(t, where, what("Complete"), sql, args)
			if !regexp.MustCompile(`\bresult = \$` + strconv.Itoa(len(args)) + `\b`).MatchString(sql) {
				t.Errorf("%s: %s does not store the result from its last placeholder $%d: %q", where, what("Complete"), len(args), sql)
			}

			sql, args = tab.lookupStatement(key)
			checkStatement(t, where, what("Lookup"), sql, args)
		}
		sql, args := tab.purgeStatement()
		checkStatement(t, where, "Purge", sql, args)
		if len(args) != 2 || args[1] != any(purgeBatch) {
			t.Errorf("%s: idem passes Purge %v; the contract has the retention in seconds and the batch size (%d)", where, args, purgeBatch)
		} else if _, seconds := args[0].(float64); !seconds {
			t.Errorf("%s: idem passes Purge the retention as %T; the contract has it in seconds (a float64 for make_interval's secs)", where, args[0])
		}
		if !strings.Contains(sql, "secs => $1") || !strings.Contains(sql, "LIMIT $2") {
			t.Errorf("%s: Purge does not take the retention in seconds as $1 and the batch size as $2: %q", where, sql)
		}
	}
	if guarded == 0 || nullable == 0 || composite == 0 {
		t.Errorf("the generated Tables cover %d guarded, %d with NULL key parts, %d with composite keys; want each shape at least once", guarded, nullable, composite)
	}
	t.Logf("checked %d generated Tables (%d of the examples, %d of the golden cases): %d guarded, %d with NULL key parts, %d with composite keys",
		len(examples)+len(golden), len(examples), len(golden), guarded, nullable, composite)
}

// TestTableBatchPlaceholders checks the placeholder contract of the batch
// statements (see Table) on the statements idemgen renders: every generated
// Table without a stale-message guard or nullable key parts has all three,
// the others none; each uses exactly the arguments idem passes it
// (batchClaimStatement, batchLookupStatement, batchCompleteStatement), the
// key arrays cast as text[], the fingerprints as bytea[], the claim wait as
// text, the results as text[].
func TestTableBatchPlaceholders(t *testing.T) {
	examples, golden := repositoryTables(t)
	var with, without int
	for _, g := range slices.Concat(examples, golden) {
		tab, where := g.table, g.where
		n := len(tab.KeyFields)
		canBatch := tab.Order == nil && len(tab.NullComplete) == 0
		has := tab.BatchClaim != "" || tab.BatchLookup != "" || tab.BatchComplete != ""
		switch {
		case !canBatch && has:
			t.Errorf("%s: batch statements on a table with a stale-message guard or nullable key parts (HandleBatch runs those one message a transaction)", where)
			continue
		case !canBatch:
			without++
			continue
		case !tab.batches():
			t.Errorf("%s: BatchClaim, BatchLookup and BatchComplete: %q, %q, %q; want all three", where, tab.BatchClaim, tab.BatchLookup, tab.BatchComplete)
			continue
		}
		with++
		keys := [][]any{make([]any, n), make([]any, n)}
		for i := range n {
			keys[0][i], keys[1][i] = "a", "b"
		}
		wantKeyArrays := func(what string, _ []placeholder, sql string) {
			for p := 1; p <= n; p++ {
				if !strings.Contains(sql, fmt.Sprintf("$%d::text[]", p)) {
					t.Errorf("%s: %s does not cast the key array $%d to text[]: %q", where, what, p, sql)
				}
			}
		}
		sql, args := tab.batchClaimStatement(keys, [][]byte{{1}, {2}}, "1ms")
		used := checkStatement(t, where, "BatchClaim", sql, args)
		wantKeyArrays("BatchClaim", used, sql)
		if !strings.Contains(sql, fmt.Sprintf("$%d::bytea[]", n+1)) {
			t.Errorf("%s: BatchClaim does not cast $%d (the fingerprints) to bytea[]: %q", where, n+1, sql)
		}
		if casts := castOf(used, n+2); !slices.Contains(casts, "text") {
			t.Errorf("%s: BatchClaim uses $%d (the claim wait) as %q; want text: %q", where, n+2, casts, sql)
		}
		if !strings.Contains(sql, "ON CONFLICT DO NOTHING") || !strings.Contains(sql, " ORDER BY ") {
			t.Errorf("%s: BatchClaim does not insert the keys in key order ON CONFLICT DO NOTHING: %q", where, sql)
		}
		sql, args = tab.batchLookupStatement(keys)
		wantKeyArrays("BatchLookup", checkStatement(t, where, "BatchLookup", sql, args), sql)
		sql, args = tab.batchCompleteStatement(keys, []string{"{}", "{}"})
		wantKeyArrays("BatchComplete", checkStatement(t, where, "BatchComplete", sql, args), sql)
		if !strings.Contains(sql, fmt.Sprintf("$%d::text[]", n+1)) {
			t.Errorf("%s: BatchComplete does not cast $%d (the results) to text[]: %q", where, n+1, sql)
		}
	}
	if with == 0 || without == 0 {
		t.Errorf("%d generated Tables with batch statements, %d without; want some of each", with, without)
	}
	t.Logf("checked the batch statements of %d generated Tables; %d (guarded or with NULL key parts) have none", with, without)
}
