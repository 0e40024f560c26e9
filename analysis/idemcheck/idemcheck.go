// Package idemcheck is a go/analysis analyzer for idemgen's directives: it
// reports what idemgen generate and vet report about each package's
// //idem:handler and //idem:retired lines, their handlers' signatures and
// keys (key hygiene included), fixtures and generated names, at the token,
// so that gopls, go vet -vettool (cmd/idemvet) and golangci-lint (package
// gclplugin) show them where the directive is typed. What needs the
// migrations folders (schema evolution, consumers of other packages) stays
// with idemgen check and vet.
package idemcheck

import (
	"go/token"
	"strings"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/packages"

	"github.com/idemgen/idemgen/internal/diag"
	"github.com/idemgen/idemgen/internal/load"
)

// Analyzer reports the diagnostics of idemgen's directives: errors as they
// are, warnings (key hygiene) with "warning: " before the message.
var Analyzer = &analysis.Analyzer{
	Name: "idemcheck",
	Doc: "report problems of idemgen's //idem:handler directives\n\n" +
		"idemcheck reports, at the token, what idemgen generate and vet report about a package's " +
		"//idem: directives: unknown or repeated options, signatures, key fields and their types, " +
		"key hygiene (fields whose names say they differ between deliveries), fixtures, generated " +
		"names, and what the runtime would refuse at startup (retain= shorter than lease=).",
	URL: "https://github.com/idemgen/idemgen/blob/main/docs/cli.md#findings-in-the-editor-idemcheck",
	Run: run,
}

func run(pass *analysis.Pass) (any, error) {
	if !mentionsIdem(pass) {
		return nil, nil
	}
	pkg := &packages.Package{
		ID:         pass.Pkg.Path(),
		Name:       pass.Pkg.Name(),
		PkgPath:    pass.Pkg.Path(),
		Fset:       pass.Fset,
		Syntax:     pass.Files,
		Types:      pass.Pkg,
		TypesInfo:  pass.TypesInfo,
		TypesSizes: pass.TypesSizes,
	}
	for _, d := range load.CheckPackage(pkg).Sorted() {
		msg := d.Msg
		if d.Severity == diag.Warning {
			msg = "warning: " + msg
		}
		pass.Report(analysis.Diagnostic{Pos: position(pass, d.Pos), Category: "idemgen", Message: msg})
	}
	return nil, nil
}

// mentionsIdem reports whether a file of the package has an //idem: comment:
// most packages have none, and cost nothing more.
func mentionsIdem(pass *analysis.Pass) bool {
	for _, f := range pass.Files {
		for _, g := range f.Comments {
			for _, c := range g.List {
				if strings.Contains(c.Text, "idem") {
					return true
				}
			}
		}
	}
	return false
}

// position is p in pass's files, or the package clause of the first file
// for a diagnostic without a position (or in a file the pass does not have).
func position(pass *analysis.Pass, p diag.Pos) token.Pos {
	for _, f := range pass.Files {
		tf := pass.Fset.File(f.Package)
		if tf == nil || tf.Name() != p.File || p.Line < 1 || p.Line > tf.LineCount() {
			continue
		}
		pos := tf.LineStart(p.Line)
		if p.Col > 1 && int(pos)-tf.Base()+p.Col-1 <= tf.Size() {
			pos += token.Pos(p.Col - 1)
		}
		return pos
	}
	if len(pass.Files) > 0 {
		return pass.Files[0].Package
	}
	return token.NoPos
}
