// Package generate turns the model into the output set: idem_gen.go and
// idem_gen_test.go for every package with handlers, an inbox migration for
// every consumer that has none yet, and the generated files no longer needed. It is a pure function of
// the model; writing and checking are the output package's.
package generate

import (
	"bytes"
	"cmp"

	"path/filepath"
	"slices"

	"github.com/idemgen/idemgen/internal/diag"
	"github.com/idemgen/idemgen/internal/emit/gotest"
	"github.com/idemgen/idemgen/internal/emit/gowrap"
	"github.com/idemgen/idemgen/internal/emit/inboxsql"
	"github.com/idemgen/idemgen/internal/model"
	"github.com/idemgen/idemgen/internal/output"
)

// Generate returns the files of prog. Errors in the returned list mean the
// set must not be written (it is still complete enough to diff).
func Generate(prog model.Program) (*output.Set, *diag.List) {
	set, diags := output.NewSet(), &diag.List{}
	for _, pkg := range prog.Packages {
		emitters := []struct {
			name string
			emit func(model.Package) ([]byte, error)
		}{
			{model.WrapperFile, gowrap.File},
			{model.TestFile, gotest.File},
		}
		for _, e := range emitters {
			path := filepath.Join(pkg.Dir, e.name)
			if len(pkg.Handlers) == 0 {
				if slices.Contains(pkg.Generated, e.name) {
					set.Orphans = append(set.Orphans, path)
				}
				continue
			}
			src, err := e.emit(pkg)
			if err != nil {
				diags.Errorf(diag.Pos{}, "%v", err)
				continue
			}
			set.Files[path] = src
		}
	}

	var handlers []model.Handler
	for _, pkg := range prog.Packages {
		handlers = append(handlers, pkg.Handlers...)
	}
	for _, dir := range prog.MigrationDirs {
		migrations(dir, handlers, set, diags)
	}
	return set, diags
}

// migrations plans the inbox migrations of the handlers that write to dir. A
// consumer's migration, once written, is never rewritten: it may have been
// applied. New consumers get the next versions of the folder, in consumer
// order, so that a re-run picks the same ones.
func migrations(dir model.MigrationDir, handlers []model.Handler, set *output.Set, diags *diag.List) {
	existing := map[string]model.MigrationFile{}
	byVersion := map[int64]string{}
	var last int64
	for _, f := range dir.Files {
		if f.Consumer != "" {
			existing[f.Consumer] = f
		}
		if f.Version == 0 {
			continue
		}
		if other, dup := byVersion[f.Version]; dup {
			diags.Errorf(diag.Pos{}, "migrations %s and %s in %s share version %d, which goose refuses; renumber the one that was not applied yet",
				other, f.Name, dir.Path, f.Version)
		}
		byVersion[f.Version] = f.Name
		last = max(last, f.Version)
	}

	var mine []model.Handler
	for _, h := range handlers {
		if h.MigrationsDir == dir.Path {
			mine = append(mine, h)
		}
	}
	slices.SortFunc(mine, func(a, b model.Handler) int { return cmp.Compare(a.Consumer, b.Consumer) })
	for _, h := range mine {
		want := inboxsql.Migration(h)
		if f, ok := existing[h.Consumer]; ok {
			path := filepath.Join(dir.Path, f.Name)
			set.Files[path] = want
			if !bytes.Equal(f.Content, want) {
				diags.Errorf(h.Pos, "the inbox migration %s of consumer %s no longer matches this handler (its key or table changed, or the file was edited); "+
					"idemgen never rewrites a migration, which may have been applied: restore the key and table, or, if %s was never applied anywhere, delete it and run idemgen again",
					f.Name, h.Consumer, f.Name)
			}
			continue
		}
		last++
		set.Files[filepath.Join(dir.Path, inboxsql.FileName(h, last))] = want
	}
}
