// Package generate turns the model into the output set: idem_gen.go and
// idem_gen_test.go for every package with handlers, an inbox migration for
// every consumer that has none yet, and the generated files no longer needed. It is a pure function of
// the model; writing and checking are the output package's.
package generate

import (
	"path/filepath"
	"slices"

	"github.com/idemgen/idemgen/internal/diag"
	"github.com/idemgen/idemgen/internal/emit/gotest"
	"github.com/idemgen/idemgen/internal/emit/gowrap"
	"github.com/idemgen/idemgen/internal/model"
	"github.com/idemgen/idemgen/internal/output"
)

// Options change how Generate treats the migrations folders.
type Options struct {
	// Rehash records the folders' migrations in their checksum files as
	// they are, instead of refusing edited or out-of-order ones.
	Rehash bool
	// AcceptResultChange lists the consumers whose result type may change
	// in a way the results stored before cannot be decoded through: their
	// record of result shapes is replaced, and those results' duplicates
	// will be dead-lettered.
	AcceptResultChange []string
}

// Generate returns the files of prog. Errors in the returned list mean the
// set must not be written (it is still complete enough to diff).
func Generate(prog model.Program, opts Options) (*output.Set, *diag.List) {
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

	for _, dir := range prog.MigrationDirs {
		f := folder{dir: dir, prog: prog, set: set, diags: diags, opts: opts}
		f.plan()
	}
	return set, diags
}
