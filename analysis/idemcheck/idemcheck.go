// Package idemcheck is a go/analysis analyzer for idemgen's directives: it
// reports what idemgen generate and vet report about each package's
// //idem:handler and //idem:retired lines, their handlers' signatures and
// keys (key hygiene included), fixtures and generated names, and what the
// handlers do outside their transaction (outside-tx, external-call), at the
// token, so that gopls, go vet -vettool (cmd/idemvet) and golangci-lint
// (package gclplugin) show them where the code is typed. What needs the
// migrations folders (schema evolution, consumers of other packages) stays
// with idemgen check and vet.
//
// Handlers are followed into the functions of their module in other
// packages through facts: each package of a module exports, per function,
// what it does with database handles and outside calls (txscope.Summary).
package idemcheck

import (
	"fmt"
	"go/token"
	"go/types"
	"strings"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/packages"

	"github.com/idemgen/idemgen/internal/diag"
	"github.com/idemgen/idemgen/internal/load"
	"github.com/idemgen/idemgen/internal/txscope"
)

// Analyzer reports the diagnostics of idemgen's directives: errors as they
// are, warnings (key hygiene) with "warning: " before the message.
var Analyzer = &analysis.Analyzer{
	Name: "idemcheck",
	Doc: "report problems of idemgen's //idem:handler directives\n\n" +
		"idemcheck reports, at the token, what idemgen generate and vet report about a package's " +
		"//idem: directives: unknown or repeated options, signatures, key fields and their types, " +
		"key hygiene (fields whose names say they differ between deliveries), fixtures, generated " +
		"names, and what the runtime would refuse at startup (retain= shorter than lease=). " +
		"It follows each mode=tx, entity or natural handler into the functions of its module and " +
		"reports a database handle used other than its tx (outside-tx) and a call outside the " +
		"database (external-call), unless an //idem:allow comment with a reason allows it.",
	URL:       "https://github.com/idemgen/idemgen/blob/main/docs/cli.md#findings-in-the-editor-idemcheck",
	Run:       run,
	FactTypes: []analysis.Fact{new(funcFact)},
}

// funcFact is what a function of a module does with database handles and
// calls outside the database, for the handlers of the packages of its
// module that call it.
type funcFact struct {
	Module  string
	Summary txscope.Summary
}

func (*funcFact) AFact() {}

// String says what the function does: its effects, the parameters it uses
// as handles, and those that reach its results.
func (f *funcFact) String() string {
	var parts []string
	for _, e := range f.Summary.Effects {
		parts = append(parts, fmt.Sprintf("%s %s", e.Kind, e.Use))
	}
	for _, pu := range f.Summary.Params {
		parts = append(parts, fmt.Sprintf("param %d %s", pu.Index, pu.Use))
	}
	for _, i := range f.Summary.Results {
		parts = append(parts, fmt.Sprintf("result from param %d", i))
	}
	if h := f.Summary.ResultHandle; h != nil {
		parts = append(parts, "result "+h.Handle)
	}
	return "txscope(" + strings.Join(parts, "; ") + ")"
}

func run(pass *analysis.Pass) (any, error) {
	// Handlers and the functions they are followed into are of a module
	// being worked on: the main module, or one of its workspace. A
	// dependency of a version (pgx, the standard library) is not followed,
	// and costs nothing.
	module := ""
	if pass.Module != nil && pass.Module.Version == "" {
		module = pass.Module.Path
	}
	prog := txscope.NewProgram(func(fn *types.Func) (*txscope.Summary, bool) {
		var f funcFact
		if module == "" || !pass.ImportObjectFact(fn, &f) || f.Module != module {
			return nil, false
		}
		return &f.Summary, true
	})
	scope := prog.Add(pass.Fset, pass.Pkg, pass.TypesInfo, pass.Files, module)
	if module != "" {
		// Another package of the module may call its exported functions
		// and methods; the others only this package calls.
		for _, fn := range scope.Funcs() {
			if !fn.Exported() {
				continue
			}
			if s, ok := scope.Summary(fn); ok && !s.Empty() {
				pass.ExportObjectFact(fn, &funcFact{Module: module, Summary: *s})
			}
		}
	}
	if !mentionsIdem(pass) {
		return nil, nil
	}
	for _, d := range scope.AllowDiags() {
		pass.Report(analysis.Diagnostic{Pos: position(pass, d.Pos), Category: "idemgen", Message: d.Msg})
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
	for _, d := range load.CheckPackage(pkg, scope).Sorted() {
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
