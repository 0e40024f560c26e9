package idem

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/tools/txtar"
)

// generatedExternalTable is an idem.ExternalTable literal, as written.
type generatedExternalTable struct {
	where string
	table ExternalTable[any]
}

// textValue evaluates a string literal or a concatenation of string
// literals and identifiers; an identifier stands for its own name (the table
// name variable of idemtest.TextKeyExternal).
func textValue(e ast.Expr) (string, error) {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name, nil
	case *ast.BinaryExpr:
		if e.Op == token.ADD {
			x, err := textValue(e.X)
			if err != nil {
				return "", err
			}
			y, err := textValue(e.Y)
			return x + y, err
		}
	case *ast.ParenExpr:
		return textValue(e.X)
	}
	return stringValue(e)
}

// externalTablesIn returns the idem.ExternalTable literals of a Go file's
// source.
func externalTablesIn(name string, src []byte) ([]generatedExternalTable, error) {
	f, err := parser.ParseFile(token.NewFileSet(), name, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	var tables []generatedExternalTable
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
		if !ok || sel.Sel.Name != "ExternalTable" {
			return true
		}
		if pkg, ok := sel.X.(*ast.Ident); !ok || pkg.Name != "idem" {
			return true
		}
		var t ExternalTable[any]
		strs := map[string]*string{"Consumer": &t.Consumer, "Name": &t.Name, "Claim": &t.Claim, "Lookup": &t.Lookup,
			"Heartbeat": &t.Heartbeat, "Complete": &t.Complete, "Release": &t.Release, "Sweep": &t.Sweep, "Stuck": &t.Stuck, "Purge": &t.Purge}
		for _, elt := range lit.Elts {
			kv := elt.(*ast.KeyValueExpr)
			field := kv.Key.(*ast.Ident).Name
			switch {
			case strs[field] != nil:
				if *strs[field], walkErr = textValue(kv.Value); walkErr != nil {
					walkErr = fmt.Errorf("%s: %s: %w", name, field, walkErr)
				}
			case field == "KeyFields":
				switch v := kv.Value.(type) {
				case *ast.CompositeLit:
					for _, e := range v.Elts {
						s, err := textValue(e)
						if err != nil {
							walkErr = fmt.Errorf("%s: KeyFields: %w", name, err)
						}
						t.KeyFields = append(t.KeyFields, s)
					}
				default:
					walkErr = fmt.Errorf("%s: KeyFields is not a literal: %T", name, v)
				}
			}
		}
		tables = append(tables, generatedExternalTable{where: name + " (consumer " + t.Consumer + ")", table: t})
		return false
	})
	return tables, walkErr
}

// repositoryExternalTables returns the ExternalTables of the generated code
// in this repository (the examples' idem_gen.go and the golden cases'), and
// the hand-written one of idemtest.TextKeyExternal.
func repositoryExternalTables(t *testing.T) (generated, handWritten []generatedExternalTable) {
	t.Helper()
	read := func(path string, src []byte, into *[]generatedExternalTable) {
		tables, err := externalTablesIn(path, src)
		if err != nil {
			t.Fatal(err)
		}
		*into = append(*into, tables...)
	}
	files, err := filepath.Glob("../examples/*/idem_gen.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range files {
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		read(path, src, &generated)
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
			if strings.HasPrefix(f.Name, "want:") && strings.HasSuffix(f.Name, "idem_gen.go") {
				read(path+":"+f.Name, f.Data, &generated)
			}
		}
	}
	src, err := os.ReadFile("idemtest/external.go")
	if err != nil {
		t.Fatal(err)
	}
	read("idemtest/external.go", src, &handWritten)
	if len(handWritten) != 1 {
		t.Fatalf("found %d ExternalTable literals in idemtest/external.go; want TextKeyExternal's", len(handWritten))
	}
	return generated, handWritten
}

// TestExternalTablePlaceholders checks the placeholder contract of
// ExternalTable (see its doc) on the statements idemgen renders and on
// idemtest.TextKeyExternal's: each statement uses exactly the arguments idem
// passes it (claimStatement, lookupStatement, heartbeatStatement, ...), the
// fingerprint and the lease are cast where the contract puts them, and every
// write after the claim is fenced: it names the fence from $2 and updates
// only a running row.
func TestExternalTablePlaceholders(t *testing.T) {
	generated, handWritten := repositoryExternalTables(t)
	fenced := regexp.MustCompile(`\bfence = \$2\b`)
	running := regexp.MustCompile(`\bstatus = 'running'`)
	for _, g := range slices.Concat(generated, handWritten) {
		tab, where := g.table, g.where
		n := len(tab.KeyFields)
		if n == 0 {
			t.Errorf("%s: no KeyFields", where)
			continue
		}
		key := make([]any, n)
		for i := range key {
			key[i] = "part"
		}
		fp := []byte{0xf1}
		sql, args := tab.claimStatement("idem-key", key, fp, 2*time.Minute)
		used := checkStatement(t, where, "Claim", sql, args)
		// ExternalInbox sends the Claim wrapped (takeoverClaim), reading the
		// row's previous status by $1 as text.
		checkStatement(t, where, "Claim wrapped by takeoverClaim", takeoverClaim(tab.Name, sql), args)
		for _, c := range castOf(used, 1) {
			if c != "text" && c != "" {
				t.Errorf("%s: Claim casts the idempotency key $1 to %s; takeoverClaim reads it as text", where, c)
			}
		}
		for _, w := range []struct {
			what     string
			position int
			cast     string
			is       func(any) bool
		}{
			{"the idempotency key", 1, "", func(v any) bool { return v == any("idem-key") }},
			{"the fingerprint", n + 2, "bytea", func(v any) bool { b, ok := v.([]byte); return ok && string(b) == string(fp) }},
			{"the lease in seconds", n + 3, "float8", func(v any) bool { return v == any(120.0) }},
		} {
			at := slices.IndexFunc(args, w.is) + 1
			if at != w.position {
				t.Errorf("%s: idem passes %s to Claim as $%d; the contract has it as $%d", where, w.what, at, w.position)
			}
			if casts := castOf(used, at); w.cast != "" && !slices.Contains(casts, w.cast) {
				t.Errorf("%s: Claim uses $%d, where idem passes %s, as %q; want it cast to %s: %q", where, at, w.what, casts, w.cast, sql)
			}
		}
		if !regexp.MustCompile(`RETURNING [^;]*\bfence\b[^;]*\battempts\b`).MatchString(sql) {
			t.Errorf("%s: Claim does not return fence, attempts: %q", where, sql)
		}

		sql, args = tab.lookupStatement("idem-key")
		checkStatement(t, where, "Lookup", sql, args)

		for _, s := range []struct {
			what  string
			build func() (string, []any)
		}{
			{"Heartbeat", func() (string, []any) { return tab.heartbeatStatement("idem-key", 3, time.Minute) }},
			{"Complete", func() (string, []any) { return tab.completeStatement("idem-key", 3, `{}`) }},
			{"Release", func() (string, []any) { return tab.releaseStatement("idem-key", 3) }},
		} {
			sql, args := s.build()
			checkStatement(t, where, s.what, sql, args)
			if !fenced.MatchString(sql) || !running.MatchString(sql) {
				t.Errorf("%s: %s does not update only the running row of the fence in $2: %q", where, s.what, sql)
			}
		}
		if sql, _ := tab.completeStatement("idem-key", 3, `{}`); !regexp.MustCompile(`\bresult = \$3\b`).MatchString(sql) {
			t.Errorf("%s: Complete does not store the result from $3: %q", where, sql)
		}
		if sql, _ := tab.heartbeatStatement("idem-key", 3, time.Minute); !strings.Contains(sql, "secs => $3") {
			t.Errorf("%s: Heartbeat does not take the lease in seconds from $3: %q", where, sql)
		}

		sql, args = tab.sweepStatement()
		checkStatement(t, where, "Sweep", sql, args)
		if !strings.Contains(sql, "LIMIT $1") || !strings.Contains(sql, "SKIP LOCKED") || !strings.Contains(sql, "attempts + 1") || !strings.Contains(sql, "fence + 1") {
			t.Errorf("%s: Sweep does not reset a batch of $1 rows (SKIP LOCKED) with fence + 1 and attempts + 1: %q", where, sql)
		}
		sql, args = tab.stuckStatement(3)
		checkStatement(t, where, "Stuck", sql, args)
		if !strings.Contains(sql, "LIMIT $2") {
			t.Errorf("%s: Stuck does not take its limit from $2: %q", where, sql)
		}
		tab.Retain = time.Hour
		sql, args = tab.purgeStatement()
		checkStatement(t, where, "Purge", sql, args)
		if !strings.Contains(sql, "secs => $1") || !strings.Contains(sql, "LIMIT $2") || !strings.Contains(sql, "'running'") {
			t.Errorf("%s: Purge does not take the retention in seconds as $1 and the batch size as $2, sparing running rows: %q", where, sql)
		}
		if args[0] != any(3600.0) || args[1] != any(purgeBatch) {
			t.Errorf("%s: idem passes Purge %v; want the retention in seconds and the batch size", where, args)
		}
	}
	t.Logf("checked %d ExternalTables: %d generated (examples and golden cases), %d hand-written (idemtest.TextKeyExternal)",
		len(generated)+len(handWritten), len(generated), len(handWritten))
}
