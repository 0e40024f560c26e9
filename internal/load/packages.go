package load

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/scanner"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"

	"golang.org/x/tools/go/packages"

	"github.com/idemgen/idemgen/internal/diag"
	"github.com/idemgen/idemgen/internal/directive"
	"github.com/idemgen/idemgen/internal/model"
)

// loadPackages lists the packages matching patterns and type-checks, from
// source, those idemgen has business with (a directive, or an idem_gen.go)
// and the packages of their module they import, matched or not; the others
// are only parsed. It returns the matched packages, and those it
// type-checked, in dependency order. The handlers' calls are followed into
// the module's packages (txscope), which needs their syntax.
//
// This is what go/packages does in NeedTypes mode, except for one step:
// go/packages gets the dependencies' export data from `go list -export`,
// which compiles the matched packages themselves too. Their export data is
// never used (they are type-checked from source), and for a package of many
// handlers the compile of idem_gen.go (an instantiation of the generic
// idemimpl.Inbox per handler) took nine tenths of idemgen's time. Here the
// packages are listed without -export and only their imports are loaded
// from export data, as go vet does.
//
// idemgen's own earlier output must never stand in its way: when a package
// with an idem_gen.go has errors (the file goes stale as soon as a handler's
// signature changes), the packages are type-checked again with every
// idem_gen.go read as an empty file of its package.
func loadPackages(cfg Config, patterns []string) ([]*packages.Package, []*packages.Package, error) {
	const listMode = packages.NeedName | packages.NeedFiles | packages.NeedCompiledGoFiles |
		packages.NeedImports | packages.NeedModule
	pkgs, err := packages.Load(&packages.Config{Mode: listMode, Dir: cfg.Dir, Env: cfg.Env}, patterns...)
	if err != nil {
		return nil, nil, fmt.Errorf("load %s: %w", strings.Join(patterns, " "), err)
	}
	fset := token.NewFileSet()
	roots := map[string]*packages.Package{}
	listErrors := map[*packages.Package][]packages.Error{}
	for _, pkg := range pkgs {
		roots[pkg.ID] = pkg
		listErrors[pkg] = pkg.Errors
		pkg.Fset = fset
		pkg.Syntax, pkg.Errors = parseFiles(fset, pkg.CompiledGoFiles, false, pkg.Errors)
	}

	// The packages to type-check: those idemgen has business with, and the
	// matched packages and the packages of their module they import, in
	// dependency order.
	var order []*packages.Package
	checked := map[string]bool{}
	// unmatched are the packages of the module that no pattern matched.
	unmatched := map[string]bool{}
	var visit func(pkg *packages.Package)
	visit = func(pkg *packages.Package) {
		if checked[pkg.ID] {
			return
		}
		checked[pkg.ID] = true
		for _, id := range sortedImports(pkg) {
			if r := roots[id]; r != nil {
				visit(r)
				continue
			}
			if imp := importByID(pkg, id); sameModule(pkg, imp) {
				imp.Fset = fset
				listErrors[imp] = imp.Errors
				imp.Syntax, imp.Errors = parseFiles(fset, imp.CompiledGoFiles, false, imp.Errors)
				roots[id], unmatched[id] = imp, true
				visit(imp)
			}
		}
		order = append(order, pkg)
	}
	for _, pkg := range pkgs {
		if concernsIdemgen(pkg) {
			visit(pkg)
		}
	}
	if len(order) == 0 {
		return pkgs, nil, nil
	}

	// Their other imports, from export data.
	var paths []string
	for _, pkg := range order {
		for _, id := range sortedImports(pkg) {
			if !checked[id] && id != "unsafe" && id != "C" && !slices.Contains(paths, id) {
				paths = append(paths, id)
			}
		}
	}
	deps := map[string]*packages.Package{}
	sizes := types.SizesFor("gc", runtime.GOARCH)
	if len(paths) > 0 {
		loaded, err := packages.Load(&packages.Config{
			Mode: packages.NeedName | packages.NeedTypes | packages.NeedTypesSizes,
			Dir:  cfg.Dir, Env: cfg.Env, Fset: fset,
		}, paths...)
		if err != nil {
			return nil, nil, fmt.Errorf("load the imports of %s: %w", strings.Join(patterns, " "), err)
		}
		for _, dep := range loaded {
			deps[dep.ID] = dep
			if dep.TypesSizes != nil {
				sizes = dep.TypesSizes
			}
		}
	}

	check := func() (stale bool) {
		for _, pkg := range order {
			typeCheck(pkg, fset, sizes, func(id string) *packages.Package {
				if checked[id] {
					if r := roots[id]; unmatched[id] && len(r.Errors) > 0 {
						// As its export data would: a package that does not
						// compile cannot be imported.
						return &packages.Package{ID: id, Errors: r.Errors}
					}
					return roots[id]
				}
				return deps[id]
			})
			stale = stale || (hasGenerated(pkg) && len(pkg.Errors) > 0)
		}
		return stale
	}
	if check() {
		for _, pkg := range order {
			pkg.Syntax, pkg.Errors = parseFiles(fset, pkg.CompiledGoFiles, true, slices.Clone(listErrors[pkg]))
		}
		check()
	}
	return pkgs, order, nil
}

// importByID returns the package pkg imports whose ID is id.
func importByID(pkg *packages.Package, id string) *packages.Package {
	for _, imp := range pkg.Imports {
		if imp.ID == id {
			return imp
		}
	}
	return nil
}

// sameModule reports whether imp, imported by pkg, is a package of pkg's
// module with files to read.
func sameModule(pkg, imp *packages.Package) bool {
	return imp != nil && pkg.Module != nil && imp.Module != nil && imp.Module.Path == pkg.Module.Path &&
		len(imp.CompiledGoFiles) > 0
}

// concernsIdemgen reports whether pkg has an //idem: directive or a generated
// file: the packages loadPackage does not skip.
func concernsIdemgen(pkg *packages.Package) bool {
	if hasGenerated(pkg) {
		return true
	}
	for _, f := range pkg.Syntax {
		for _, group := range f.Comments {
			for _, c := range group.List {
				if directive.Is(c.Text) {
					return true
				}
			}
		}
	}
	return false
}

func hasGenerated(pkg *packages.Package) bool {
	return slices.ContainsFunc(pkg.GoFiles, func(f string) bool { return filepath.Base(f) == model.WrapperFile })
}

// sortedImports returns the IDs of the packages pkg imports, sorted.
func sortedImports(pkg *packages.Package) []string {
	var ids []string
	for _, imp := range pkg.Imports {
		ids = append(ids, imp.ID)
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

// parseFiles parses files as go/packages does, appending the problems to
// errs. With stubGenerated, idem_gen.go is read as an empty file of its
// package.
func parseFiles(fset *token.FileSet, files []string, stubGenerated bool, errs []packages.Error) ([]*ast.File, []packages.Error) {
	var syntax []*ast.File
	for _, name := range files {
		var src []byte
		if stubGenerated && filepath.Base(name) == model.WrapperFile {
			if f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.PackageClauseOnly); err == nil {
				src = []byte("package " + f.Name.Name + "\n")
			}
		}
		if src == nil {
			var err error
			if src, err = os.ReadFile(name); err != nil {
				errs = append(errs, packages.Error{Pos: name + ":1", Msg: err.Error(), Kind: packages.ParseError})
				continue
			}
		}
		f, err := parser.ParseFile(fset, name, src, parser.AllErrors|parser.ParseComments|parser.SkipObjectResolution)
		var list scanner.ErrorList
		if errors.As(err, &list) {
			for _, e := range list {
				errs = append(errs, packages.Error{Pos: e.Pos.String(), Msg: e.Msg, Kind: packages.ParseError})
			}
		} else if err != nil {
			errs = append(errs, packages.Error{Pos: name + ":1", Msg: err.Error(), Kind: packages.ParseError})
		}
		if f != nil {
			syntax = append(syntax, f)
		}
	}
	return syntax, errs
}

// typeCheck type-checks pkg's syntax, with the types of its imports from
// lookup (by package ID), recording the types, the type information and the
// errors in pkg as go/packages would.
func typeCheck(pkg *packages.Package, fset *token.FileSet, sizes types.Sizes, lookup func(id string) *packages.Package) {
	pkg.Types = types.NewPackage(pkg.PkgPath, pkg.Name)
	pkg.TypesSizes = sizes
	pkg.TypesInfo = &types.Info{
		Types:        map[ast.Expr]types.TypeAndValue{},
		Defs:         map[*ast.Ident]types.Object{},
		Uses:         map[*ast.Ident]types.Object{},
		Implicits:    map[ast.Node]types.Object{},
		Instances:    map[*ast.Ident]types.Instance{},
		Scopes:       map[ast.Node]*types.Scope{},
		Selections:   map[*ast.SelectorExpr]*types.Selection{},
		FileVersions: map[*ast.File]string{},
	}
	tc := &types.Config{
		Importer: importerFunc(func(path string) (*types.Package, error) {
			if path == "unsafe" {
				return types.Unsafe, nil
			}
			imp := pkg.Imports[path]
			if imp == nil {
				return nil, fmt.Errorf("no metadata for %s", path)
			}
			if problem := missingModule(imp); problem != "" {
				return nil, errors.New(problem)
			}
			dep := lookup(imp.ID)
			switch {
			case dep == nil:
				return nil, fmt.Errorf("no metadata for %s", path)
			case dep.Types != nil && dep.Types.Complete():
				return dep.Types, nil
			case len(dep.Errors) > 0:
				return nil, errors.New(dep.Errors[0].Msg)
			default:
				return nil, fmt.Errorf("no export data for %s", path)
			}
		}),
		Error: func(err error) {
			var te types.Error
			if errors.As(err, &te) {
				pkg.Errors = append(pkg.Errors, packages.Error{Pos: te.Fset.Position(te.Pos).String(), Msg: te.Msg, Kind: packages.TypeError})
				return
			}
			pkg.Errors = append(pkg.Errors, packages.Error{Pos: "-", Msg: err.Error(), Kind: packages.UnknownError})
		},
		Sizes: sizes,
	}
	if pkg.Module != nil && pkg.Module.GoVersion != "" {
		tc.GoVersion = "go" + pkg.Module.GoVersion
	}
	errorsBefore := len(pkg.Errors)
	if err := types.NewChecker(tc, fset, pkg.Types, pkg.TypesInfo).Files(pkg.Syntax); err != nil && len(pkg.Errors) == errorsBefore {
		pkg.Errors = append(pkg.Errors, packages.Error{Pos: "-", Msg: err.Error(), Kind: packages.UnknownError})
	}
	pkg.IllTyped = len(pkg.Errors) > 0
}

// missingModule says what to run when the go command found no module for
// the imported package imp (its go.mod lacks the requirement, or go.sum its
// checksum), or returns "". Without it, the type checker's report is
// "invalid package name", which says nothing of the cause.
func missingModule(imp *packages.Package) string {
	for _, e := range imp.Errors {
		if e.Kind != packages.ListError {
			continue
		}
		switch msg := e.Msg; {
		case strings.Contains(msg, "no required module provides package"), strings.Contains(msg, "cannot find module providing package"):
			return fmt.Sprintf("no module in go.mod provides it; run go get %s", imp.PkgPath)
		case strings.Contains(msg, "missing go.sum entry"):
			return fmt.Sprintf("go.sum lacks the checksum of its module; run go get %s", imp.PkgPath)
		}
	}
	return ""
}

type importerFunc func(path string) (*types.Package, error)

func (f importerFunc) Import(path string) (*types.Package, error) { return f(path) }

// checkPatterns reports the patterns that match no package: a directory
// that does not exist or has no Go files, a wildcard that matches nothing,
// an import path that no module provides. go/packages returns such a
// pattern as a package without files, or not at all.
func checkPatterns(cfg Config, patterns []string, pkgs []*packages.Package, diags *diag.List) {
	hasFiles := func(pkg *packages.Package) bool { return len(pkg.GoFiles)+len(pkg.CompiledGoFiles) > 0 }
	for _, pattern := range patterns {
		if pattern == "all" || pattern == "std" || pattern == "cmd" || pattern == "tool" {
			continue
		}
		local := isLocalPattern(pattern)
		abs := pattern
		if local && !filepath.IsAbs(abs) {
			abs = filepath.Join(cfg.Dir, pattern)
		}
		abs = filepath.Clean(abs)
		var matched []*packages.Package
		if strings.Contains(pattern, "...") {
			match := matchPattern(filepath.ToSlash(abs))
			for _, pkg := range pkgs {
				if hasFiles(pkg) && ((local && match(filepath.ToSlash(pkg.Dir))) || (!local && match(pkg.PkgPath))) {
					matched = append(matched, pkg)
				}
			}
		} else {
			for _, pkg := range pkgs {
				if pkg.ID == pattern || pkg.PkgPath == pattern || (local && pkg.Dir != "" && filepath.Clean(pkg.Dir) == abs) {
					matched = append(matched, pkg)
				}
			}
		}
		if slices.ContainsFunc(matched, hasFiles) {
			continue
		}
		msg := fmt.Sprintf("pattern %s matches no package", pattern)
		switch {
		case strings.Contains(pattern, "..."):
		case local:
			rel := diag.Rel(cfg.Dir, abs)
			if info, err := os.Stat(abs); err != nil || !info.IsDir() {
				msg += fmt.Sprintf(": directory %s does not exist", rel)
			} else if tests, _ := filepath.Glob(filepath.Join(abs, "*_test.go")); len(tests) > 0 {
				msg += fmt.Sprintf(": directory %s has only test files, and idemgen reads no tests", rel)
			} else {
				msg += fmt.Sprintf(": directory %s has no Go files (for this GOOS, GOARCH and build tags)", rel)
			}
		case slices.Contains([]string{"generate", "check", "vet", "help"}, pattern):
			msg += fmt.Sprintf("; a command comes before the flags: idemgen %s [flags] [packages]", pattern)
		case !strings.Contains(pattern, "."):
			msg += fmt.Sprintf(": there is no package %s", pattern)
			if info, err := os.Stat(filepath.Join(cfg.Dir, pattern)); err == nil && info.IsDir() {
				msg += fmt.Sprintf(" (for the directory, write ./%s)", pattern)
			}
		default:
			for _, pkg := range matched {
				for _, e := range pkg.Errors {
					if e.Kind == packages.ListError {
						msg += ": " + strings.Join(strings.Fields(e.Msg), " ")
						break
					}
				}
			}
		}
		diags.Errorf(diag.Pos{}, "%s", msg)
	}
}

// isLocalPattern reports whether pattern names directories rather than
// import paths, as the go command decides.
func isLocalPattern(pattern string) bool {
	return pattern == "." || pattern == ".." || strings.HasPrefix(pattern, "./") || strings.HasPrefix(pattern, "../") ||
		filepath.IsAbs(pattern) || (filepath.Separator != '/' && strings.HasPrefix(pattern, "."+string(filepath.Separator)))
}

// matchPattern returns a matcher for a pattern with "..." wildcards, which
// match any string; "x/..." matches x itself too (the go command's rule).
func matchPattern(pattern string) func(string) bool {
	re := regexp.QuoteMeta(pattern)
	re = strings.ReplaceAll(re, `\.\.\.`, `.*`)
	if strings.HasSuffix(re, `/.*`) {
		re = re[:len(re)-len(`/.*`)] + `(/.*)?`
	}
	reg := regexp.MustCompile(`^` + re + `$`)
	return reg.MatchString
}
