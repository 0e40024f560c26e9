package gowrap

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/tools/txtar"

	"github.com/idemgen/idemgen/internal/emit/gocode"
	"github.com/idemgen/idemgen/internal/model"
)

// TestDocsAreShort: no declaration of a generated idem_gen.go has a doc
// comment longer than gocode.MaxDocLines lines, in the examples, the
// benchmarks' packages and the golden cases of internal/cli. What every
// wrapper does is the runtime's documentation, not a copy in each file.
func TestDocsAreShort(t *testing.T) {
	files := map[string][]byte{}
	for _, pattern := range []string{"../../../examples/*/" + model.WrapperFile, "../../../bench/*/" + model.WrapperFile} {
		paths, err := filepath.Glob(pattern)
		if err != nil || len(paths) == 0 {
			t.Fatalf("no files match %s: %v", pattern, err)
		}
		for _, path := range paths {
			files[path] = nil // parsed from disk
		}
	}
	cases, err := filepath.Glob("../../cli/testdata/*.txtar")
	if err != nil || len(cases) == 0 {
		t.Fatalf("no golden cases: %v", err)
	}
	golden := 0
	for _, c := range cases {
		archive, err := txtar.ParseFile(c)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range archive.Files {
			name, ok := strings.CutPrefix(f.Name, "want:")
			if ok && filepath.Base(name) == model.WrapperFile {
				files[c+":"+name] = f.Data
				golden++
			}
		}
	}
	if golden < 20 {
		t.Fatalf("%d golden idem_gen.go files; the cases hold more", golden)
	}

	decls := 0
	for name, src := range files {
		fset := token.NewFileSet()
		var file *ast.File
		if src == nil {
			file, err = parser.ParseFile(fset, name, nil, parser.ParseComments)
		} else {
			file, err = parser.ParseFile(fset, name, src, parser.ParseComments)
		}
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		for _, d := range file.Decls {
			var doc *ast.CommentGroup
			switch d := d.(type) {
			case *ast.FuncDecl:
				doc = d.Doc
			case *ast.GenDecl:
				doc = d.Doc
			}
			if doc == nil {
				continue
			}
			decls++
			if lines := len(doc.List); lines > gocode.MaxDocLines {
				t.Errorf("%s:%d: a doc comment of %d lines, more than %d:\n%s", name, fset.Position(doc.Pos()).Line, lines, gocode.MaxDocLines, doc.Text())
			}
		}
	}
	t.Logf("%d doc comments of %d generated files, each at most %d lines", decls, len(files), gocode.MaxDocLines)
}
