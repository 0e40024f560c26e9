package inboxsql_test

import (
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/tools/txtar"

	"github.com/idemgen/idemgen/migrations"
)

// maxHeader is how many lines a migration may have before "-- +goose Up":
// idemgen's own lines and a sentence or two. The reasoning is in the docs.
const maxHeader = 5

// TestMigrationHeadersAreShort checks every migration the golden cases want
// idemgen to write, and the runtime's outbox migrations that it copies.
func TestMigrationHeadersAreShort(t *testing.T) {
	files := map[string][]byte{}
	cases, err := filepath.Glob("../../cli/testdata/*.txtar")
	if err != nil || len(cases) == 0 {
		t.Fatalf("no golden cases: %v", err)
	}
	for _, c := range cases {
		archive, err := txtar.ParseFile(c)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range archive.Files {
			if name, ok := strings.CutPrefix(f.Name, "want:"); ok && strings.HasSuffix(name, ".sql") {
				files[c+": "+name] = f.Data
			}
		}
	}
	if len(files) < 50 {
		t.Fatalf("%d generated migrations in the golden cases; they hold more", len(files))
	}
	outbox, err := fs.Glob(migrations.FS, "*.sql")
	if err != nil || len(outbox) == 0 {
		t.Fatalf("the runtime's outbox migrations: %v", err)
	}
	for _, name := range outbox {
		data, err := fs.ReadFile(migrations.FS, name)
		if err != nil {
			t.Fatal(err)
		}
		files["migrations/"+name] = data
	}
	for name, data := range files {
		header, _, ok := strings.Cut(string(data), "-- +goose Up")
		if !ok {
			continue // a migration that goose would refuse: its golden case says so
		}
		if n := strings.Count(strings.TrimRight(header, "\n"), "\n") + 1; n > maxHeader {
			t.Errorf("%s: %d lines before -- +goose Up, want at most %d:\n%s", name, n, maxHeader, header)
		}
	}
}
