package txscope

import (
	"go/ast"
	"go/token"
	"go/types"
	"path/filepath"
	"strings"

	"github.com/idemgen/idemgen/internal/diag"
	"github.com/idemgen/idemgen/internal/directive"
)

// Imported returns the Summary of a function of a package not added to the
// Program, and false when its calls are not followed (it is not of the
// module, or nothing is known of it).
type Imported func(fn *types.Func) (*Summary, bool)

// Program holds the packages whose functions a check follows.
type Program struct {
	imported Imported
	pkgs     map[*types.Package]*Package
	types    *typeSet
}

// NewProgram returns an empty Program; imported, if not nil, gives the
// summaries of functions of packages not added to it.
func NewProgram(imported Imported) *Program {
	return &Program{imported: imported, pkgs: map[*types.Package]*Package{}, types: newTypeSet()}
}

// Package is one type-checked package of a Program.
type Package struct {
	prog   *Program
	fset   *token.FileSet
	pkg    *types.Package
	info   *types.Info
	module string
	// root is the module's directory, which positions in messages are
	// relative to.
	root  string
	decls map[*types.Func]*ast.FuncDecl
	order []*types.Func
	sums  map[*types.Func]*Summary
	// busy are the functions being summarized; partial, the summaries
	// made while a call back into one of them was left out; cycle says
	// that one was.
	busy    map[*types.Func]bool
	partial map[*types.Func]*Summary
	cycle   bool
	// allows holds the //idem:allow comments by file and line.
	allows     map[string]map[int][]Kind
	allowDiags diag.List
}

// Add adds a package of module (its path; "" when unknown, and then only
// the package's own functions are followed) to the Program. Its
// //idem:allow comments are read; AllowDiags reports the malformed ones.
func (pr *Program) Add(fset *token.FileSet, pkg *types.Package, info *types.Info, files []*ast.File, module string) *Package {
	p := &Package{
		prog: pr, fset: fset, pkg: pkg, info: info, module: module,
		decls:   map[*types.Func]*ast.FuncDecl{},
		sums:    map[*types.Func]*Summary{},
		busy:    map[*types.Func]bool{},
		partial: map[*types.Func]*Summary{},
		allows:  map[string]map[int][]Kind{},
	}
	for _, f := range files {
		name := fset.Position(f.Package).Filename
		if p.root == "" {
			p.root = moduleRoot(filepath.Dir(name), pkg.Path(), module)
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			if fn, ok := info.Defs[fd.Name].(*types.Func); ok {
				p.decls[fn] = fd
				p.order = append(p.order, fn)
			}
		}
		for _, g := range f.Comments {
			for _, c := range g.List {
				if !directive.IsAllow(c.Text) {
					continue
				}
				at := fset.Position(c.Pos())
				a, ok := directive.ParseAllow(c.Text, diag.Pos{File: at.Filename, Line: at.Line, Col: at.Column}, &p.allowDiags)
				if !ok {
					continue
				}
				if p.allows[at.Filename] == nil {
					p.allows[at.Filename] = map[int][]Kind{}
				}
				p.allows[at.Filename][at.Line] = append(p.allows[at.Filename][at.Line], Kind(a.Check))
			}
		}
	}
	pr.pkgs[pkg] = p
	return p
}

// moduleRoot is the directory of module, given the directory of its
// package path; dir itself when that cannot be told.
func moduleRoot(dir, path, module string) string {
	if module == "" || (path != module && !strings.HasPrefix(path, module+"/")) {
		return dir
	}
	rel := filepath.FromSlash(strings.TrimPrefix(path, module))
	if !strings.HasSuffix(dir, rel) {
		return dir
	}
	return strings.TrimSuffix(dir, rel)
}

// AllowDiags are the errors of the package's malformed //idem:allow
// comments.
func (p *Package) AllowDiags() []diag.Diagnostic { return p.allowDiags.Sorted() }

// Funcs are the package's functions and methods that have a body, in
// source order.
func (p *Package) Funcs() []*types.Func { return p.order }

// allowed reports whether an //idem:allow comment for kind is on the line
// of pos or the line above.
func (p *Package) allowed(pos token.Pos, kind Kind) bool {
	at := p.fset.Position(pos)
	lines := p.allows[at.Filename]
	for _, line := range []int{at.Line, at.Line - 1} {
		for _, k := range lines[line] {
			if k == kind {
				return true
			}
		}
	}
	return false
}

func (p *Package) position(pos token.Pos) diag.Pos {
	at := p.fset.Position(pos)
	return diag.Pos{File: at.Filename, Line: at.Line, Col: at.Column}
}

// summary returns the Summary of fn, called from package from, and false
// when the call is not followed: fn is of another module, has no body, or
// is unknown.
func (pr *Program) summary(fn *types.Func, from *Package) (*Summary, bool) {
	fn = fn.Origin()
	if fn.Pkg() == nil {
		return nil, false
	}
	if p := pr.pkgs[fn.Pkg()]; p != nil {
		if p != from && (p.module == "" || p.module != from.module) {
			return nil, false
		}
		return p.Summary(fn)
	}
	if pr.imported != nil {
		return pr.imported(fn)
	}
	return nil, false
}

// Summary returns the Summary of fn, a function of p, and false when p
// does not declare it with a body.
func (p *Package) Summary(fn *types.Func) (*Summary, bool) {
	fn = fn.Origin()
	if s, ok := p.sums[fn]; ok {
		return s, true
	}
	if s, ok := p.partial[fn]; ok {
		return s, true
	}
	decl, ok := p.decls[fn]
	if !ok {
		return nil, false
	}
	if p.busy[fn] {
		// A call back into a function being summarized: what that function
		// does is found where it does it. The summaries that lack it are
		// kept only until the outermost one is done.
		p.cycle = true
		return &Summary{}, true
	}
	outer := len(p.busy) == 0
	p.busy[fn] = true
	cycle := p.cycle
	p.cycle = false
	s := summarize(p, decl, nil)
	delete(p.busy, fn)
	if p.cycle && !outer {
		p.partial[fn] = s
	} else {
		p.sums[fn] = s
	}
	p.cycle = p.cycle || cycle
	if outer {
		p.cycle = false
		clear(p.partial)
	}
	return s, true
}
