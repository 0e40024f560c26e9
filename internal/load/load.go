// Package load loads Go packages with go/packages, finds their //idem:
// directives, checks the handlers they annotate and builds the model. It is
// the only stage that sees go/ast and go/types.
package load

import (
	"bytes"
	"cmp"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/tools/go/packages"

	"github.com/idemgen/idemgen/internal/diag"
	"github.com/idemgen/idemgen/internal/directive"
	"github.com/idemgen/idemgen/internal/model"
	"github.com/idemgen/idemgen/internal/txscope"
)

// Config says what to load.
type Config struct {
	// Dir is the directory patterns and MigrationsDir are relative to.
	Dir string
	// Patterns are go/packages patterns; none means ".".
	Patterns []string
	// MigrationsDir is where migrations go, for every package; empty means
	// each package's own layout: the -migrations flag of its
	// //go:generate idemgen line, else a migrations folder in the package.
	MigrationsDir string
	// Env is the environment of the go command; nil means os.Environ().
	Env []string
	// Postgres is the major version of the oldest server the migrations run
	// on, when known (0 otherwise). From 15 on, nullable key parts get one
	// UNIQUE NULLS NOT DISTINCT constraint instead of partial indexes. 0
	// means each package's own (its //go:generate line's -postgres).
	Postgres int
}

// Load loads the packages and returns the model of their handlers. Problems
// in the user's code are diagnostics; the error is for failures of the
// loading itself.
func Load(cfg Config) (model.Program, *diag.List, error) {
	diags := &diag.List{}
	patterns := cfg.Patterns
	if len(patterns) == 0 {
		patterns = []string{"."}
	}
	pkgs, checked, err := loadPackages(cfg, patterns)
	if err != nil {
		return model.Program{}, diags, err
	}
	checkPatterns(cfg, patterns, pkgs, diags)
	scopes := scopeProgram(checked, diags)

	var prog model.Program
	for _, pkg := range pkgs {
		errs := diags.Errors()
		mp, ok := loadPackage(cfg, pkg, scopes[pkg], diags)
		if diags.Errors() > errs {
			// What idemgen could not read is left as it is: no output of
			// the package is compared, written or deleted, and none of its
			// consumers is taken for removed.
			mp.Unread, ok = true, true
		}
		if !ok {
			continue
		}
		prog.Packages = append(prog.Packages, mp)
	}
	slices.SortFunc(prog.Packages, func(a, b model.Package) int { return cmp.Compare(a.Path, b.Path) })
	checkAcrossPackages(prog, diags)
	return prog, diags, nil
}

// loadPackage builds the model of one package. It reports false for a package
// idemgen has nothing to do with: no directives and no generated file.
// scope, if not nil, is the package in the Program that follows its
// handlers' calls.
func loadPackage(cfg Config, pkg *packages.Package, scope *txscope.Package, diags *diag.List) (model.Package, bool) {
	mp := model.Package{Path: pkg.PkgPath, Name: pkg.Name, Dir: packageDir(pkg)}
	for _, f := range pkg.GoFiles {
		if filepath.Base(f) == model.WrapperFile {
			mp.Generated = append(mp.Generated, model.WrapperFile)
		}
	}
	// Packages are loaded without their tests: look for the generated test
	// file on disk.
	if mp.Dir != "" && isGenerated(filepath.Join(mp.Dir, model.TestFile)) {
		mp.Generated = append(mp.Generated, model.TestFile)
	}

	checkUnreadFiles(pkg, diags)
	decls, retired := findDirectives(pkg, diags)
	mp.Retired = retired
	if len(decls) == 0 && len(mp.Generated) == 0 && len(retired) == 0 {
		return mp, false
	}
	layout := packageLayout(cfg, pkg, mp.Dir)
	mp.MigrationsDir, mp.LayoutSource = layout.MigrationsDir, layout.Source
	compiled := compiles(pkg, decls, diags)
	if !compiled {
		diags.Errorf(diag.Pos{}, "package %s does not compile; fix the errors above and run idemgen again (nothing was written)", pkg.PkgPath)
		if pkg.Types == nil || pkg.TypesInfo == nil {
			return mp, false
		}
		// The directives are still checked, so that every problem of the
		// package is reported at once.
	}

	tests := readTestFiles(mp.Dir, pkg.Name)
	for _, d := range decls {
		c := &checker{pkg: pkg, diags: diags, tests: tests}
		h, ok := c.handler(d.decl, d.directive)
		if compiled && scope != nil && !checkScope(pkg, scope, d, diags) {
			ok = false // as a handler with any other error: no wrapper, no migration
		}
		if ok {
			h.Package = pkg.PkgPath
			h.MigrationsDir = mp.MigrationsDir
			h.NullsNotDistinct = layout.Postgres >= 15
			mp.Handlers = append(mp.Handlers, h)
		}
	}
	checkNames(pkg, mp, diags)
	checkTestNames(mp, tests, diags)
	return mp, true
}

// packageLayout is the layout of the package in dir: the command line's
// flags when they give it, else the package's own //go:generate line (or a
// parent directory's that names it), else a migrations folder in dir.
func packageLayout(cfg Config, pkg *packages.Package, dir string) Layout {
	var layout Layout
	root := ""
	if pkg.Module != nil {
		root = pkg.Module.Dir
	}
	if cfg.MigrationsDir == "" || cfg.Postgres == 0 {
		layout, _ = layoutFor(dir, root)
	}
	if cfg.MigrationsDir != "" {
		m := cfg.MigrationsDir
		if !filepath.IsAbs(m) {
			m = filepath.Join(cfg.Dir, m)
		}
		layout.MigrationsDir, layout.Source = m, ""
	}
	if cfg.Postgres != 0 {
		layout.Postgres = cfg.Postgres
	}
	if layout.MigrationsDir == "" {
		layout.MigrationsDir = filepath.Join(dir, "migrations")
	}
	layout.MigrationsDir = filepath.Clean(layout.MigrationsDir)
	return layout
}

func packageDir(pkg *packages.Package) string {
	if pkg.Dir != "" {
		return pkg.Dir
	}
	if len(pkg.GoFiles) > 0 {
		return filepath.Dir(pkg.GoFiles[0])
	}
	return ""
}

// annotated is a function declaration with its //idem:handler directive.
type annotated struct {
	decl      *ast.FuncDecl
	directive directive.Directive
}

// findDirectives returns the annotated functions of pkg, in source order, and
// its //idem:retired directives, and reports directives that are misplaced,
// unknown or repeated.
func findDirectives(pkg *packages.Package, diags *diag.List) ([]annotated, []model.Retired) {
	var out []annotated
	var retired []model.Retired
	for _, file := range pkg.Syntax {
		name := pkg.Fset.Position(file.Package).Filename
		if filepath.Base(name) == model.WrapperFile {
			continue
		}
		inDoc := map[*ast.Comment]*ast.FuncDecl{}
		for _, decl := range file.Decls {
			if fd, ok := decl.(*ast.FuncDecl); ok && fd.Doc != nil {
				for _, c := range fd.Doc.List {
					inDoc[c] = fd
				}
			}
		}
		seen := map[*ast.FuncDecl]bool{}
		for _, group := range file.Comments {
			for _, c := range group.List {
				if directive.IsAllow(c.Text) {
					continue // read by txscope, with the code it allows
				}
				if !directive.Is(c.Text) {
					if problem, fix, ok := directive.NearMiss(c.Text); ok {
						diags.Warnf(position(pkg.Fset, c.Pos()), "this comment is not read as a directive (%s); write %s", problem, fix)
					}
					continue
				}
				pos := position(pkg.Fset, c.Pos())
				d := directive.Parse(c.Text, pos, diags)
				if d.Name == "" {
					continue // malformed, reported by Parse
				}
				if d.Name == "retired" {
					if r, ok := retiredDirective(d, diags); ok {
						retired = append(retired, r)
					}
					continue
				}
				if d.Name != "handler" {
					msg := fmt.Sprintf("unknown directive %s%s", directive.Prefix, d.Name)
					if s := directive.Suggest(d.Name, directive.Names); s != "" {
						msg += fmt.Sprintf(" (did you mean %s%s?)", directive.Prefix, s)
					}
					diags.Errorf(pos, "%s", msg)
					continue
				}
				fd := inDoc[c]
				switch {
				case fd == nil:
					diags.Errorf(pos, "%shandler must be in the doc comment of a function or method", directive.Prefix)
				case seen[fd]:
					diags.Errorf(pos, "%s has more than one %shandler directive", fd.Name.Name, directive.Prefix)
				default:
					seen[fd] = true
					out = append(out, annotated{decl: fd, directive: d})
				}
			}
		}
	}
	return out, retired
}

// checkUnreadFiles warns about directives in the files of pkg's directory
// that idemgen does not read: its _test.go files (packages are loaded
// without their tests) and the files build constraints exclude. A directive
// there is ignored, and its handler would silently get no wrapper.
func checkUnreadFiles(pkg *packages.Package, diags *diag.List) {
	dir := packageDir(pkg)
	var files []string
	if dir != "" {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if name := e.Name(); !e.IsDir() && strings.HasSuffix(name, "_test.go") && name != model.TestFile {
				files = append(files, filepath.Join(dir, name))
			}
		}
	}
	for _, f := range pkg.IgnoredFiles {
		if strings.HasSuffix(f, ".go") && !strings.HasSuffix(f, "_test.go") {
			files = append(files, f)
		}
	}
	slices.Sort(files)
	for _, name := range slices.Compact(files) {
		src, err := os.ReadFile(name)
		if err != nil || !bytes.Contains(bytes.ToLower(src), []byte("idem")) {
			continue
		}
		fset := token.NewFileSet()
		file, _ := parser.ParseFile(fset, name, src, parser.ParseComments|parser.SkipObjectResolution)
		if file == nil {
			continue
		}
		why := "it is in a _test.go file, and idemgen does not read the package's tests: a handler there gets no wrapper; move it to a file of the package itself"
		if !strings.HasSuffix(name, "_test.go") {
			why = "its file is excluded from the build by build constraints (for this GOOS, GOARCH and tags), and idemgen reads only the files the build uses"
		}
		for _, group := range file.Comments {
			for _, c := range group.List {
				if directive.IsAllow(c.Text) {
					continue // it allows a finding in a test, which is not checked
				}
				if directive.Is(c.Text) {
					diags.Warnf(position(fset, c.Pos()), "directive ignored: %s", why)
				} else if _, fix, ok := directive.NearMiss(c.Text); ok {
					diags.Warnf(position(fset, c.Pos()), "this comment looks like %s, which would be ignored: %s", strings.Fields(fix)[0], why)
				}
			}
		}
	}
}

// retiredDirective checks //idem:retired consumer=NAME: the consumer's
// handler is gone on purpose and its inbox migrations stay.
func retiredDirective(d directive.Directive, diags *diag.List) (model.Retired, bool) {
	ok := true
	for _, o := range d.Options {
		if o.Name != "consumer" {
			diags.Errorf(o.Pos, "unknown option %s= of %sretired: it takes consumer= only", o.Name, directive.Prefix)
			ok = false
		}
	}
	o, has := d.Lookup("consumer")
	if !has {
		diags.Errorf(d.Pos, "%sretired needs consumer=: the consumer whose handler was removed", directive.Prefix)
		return model.Retired{}, false
	}
	return model.Retired{Pos: d.Pos, Consumer: o.Value}, ok
}

// undefinedName matches the type checker's report of an undeclared name.
var undefinedName = regexp.MustCompile(`^undefined: (?:\w+\.)?(\w+)$`)

// compiles reports whether pkg type-checked, recording its errors. Errors
// about the names idemgen generates are expected while idem_gen.go is
// replaced by an empty file, and are not held against the package.
func compiles(pkg *packages.Package, decls []annotated, diags *diag.List) bool {
	generated := generatedNames(pkg, decls)
	ok := true
	for _, e := range pkg.Errors {
		// The go command compiles the package too and reports its compiler
		// output ("# path" and the errors); the type checker's errors say the
		// same with exact positions.
		if e.Kind == packages.ListError && strings.HasPrefix(e.Msg, "# ") && pkg.Types != nil {
			continue
		}
		if e.Kind == packages.TypeError {
			if m := undefinedName.FindStringSubmatch(e.Msg); m != nil && generated[m[1]] {
				continue
			}
		}
		ok = false
		diags.Add(diag.Diagnostic{Pos: parsePos(e.Pos), Severity: diag.Error, Msg: e.Msg})
	}
	return ok
}

// generatedNames are the names idemgen declares for the package: those of
// the current handlers and those the existing idem_gen.go declares.
func generatedNames(pkg *packages.Package, decls []annotated) map[string]bool {
	names := map[string]bool{}
	for _, d := range decls {
		for _, name := range model.NamesFor(d.decl.Name.Name).All() {
			names[name] = true
		}
	}
	dir := packageDir(pkg)
	if dir == "" {
		return names
	}
	file, _ := parser.ParseFile(token.NewFileSet(), filepath.Join(dir, model.WrapperFile), nil, parser.SkipObjectResolution)
	if file == nil {
		return names
	}
	for _, decl := range file.Decls {
		switch decl := decl.(type) {
		case *ast.FuncDecl:
			if decl.Recv == nil {
				names[decl.Name.Name] = true
			}
		case *ast.GenDecl:
			for _, spec := range decl.Specs {
				switch spec := spec.(type) {
				case *ast.TypeSpec:
					names[spec.Name.Name] = true
				case *ast.ValueSpec:
					for _, n := range spec.Names {
						names[n.Name] = true
					}
				}
			}
		}
	}
	return names
}

// checkNames reports generated names that collide with each other or with the
// package's own declarations.
func checkNames(pkg *packages.Package, mp model.Package, diags *diag.List) {
	owner := map[string]model.Handler{}
	for _, h := range mp.Handlers {
		for _, name := range h.Names().All() {
			if other, dup := owner[name]; dup {
				diags.Errorf(h.Pos, "handlers %s and %s (%s) would both generate %s; rename one of them",
					other.Func, h.Func, diag.Rel(mp.Dir, other.Pos.File)+":"+strconv.Itoa(other.Pos.Line), name)
				break
			}
			owner[name] = h
			if pkg.Types == nil {
				continue
			}
			obj := pkg.Types.Scope().Lookup(name)
			if obj == nil {
				continue
			}
			at := pkg.Fset.Position(obj.Pos())
			if filepath.Base(at.Filename) == model.WrapperFile {
				continue
			}
			diags.Errorf(h.Pos, "idemgen generates %s for handler %s, but the package already declares it at %s:%d; rename one of them",
				name, h.Func, filepath.Base(at.Filename), at.Line)
		}
	}
}

// checkAcrossPackages reports consumers declared twice, and two consumers
// that would share an inbox table.
func checkAcrossPackages(prog model.Program, diags *diag.List) {
	consumers := map[string]model.Handler{}
	tables := map[string]model.Handler{}
	for _, pkg := range prog.Packages {
		for _, r := range pkg.Retired {
			for _, h := range pkg.Handlers {
				if h.Consumer == r.Consumer {
					diags.Errorf(r.Pos, "consumer %s is declared retired, but handler %s (%s:%d) still uses it",
						r.Consumer, h.Func, filepath.Base(h.Pos.File), h.Pos.Line)
				}
			}
		}
		for _, h := range pkg.Handlers {
			if other, dup := consumers[h.Consumer]; dup {
				diags.Errorf(h.Pos, "consumer %s is declared twice: also by %s at %s:%d; every handler needs its own consumer name",
					h.Consumer, other.Func, filepath.Base(other.Pos.File), other.Pos.Line)
				continue
			}
			consumers[h.Consumer] = h
			if h.Natural() {
				continue // it has no table
			}
			tk := h.MigrationsDir + "\x00" + h.Table
			if other, dup := tables[tk]; dup && other.EntityMode() && h.EntityMode() {
				continue // the generator says why two mode=entity consumers cannot share a table
			} else if dup {
				diags.Errorf(h.Pos, "consumers %s and %s would share the inbox table %s; give one of them another table=",
					other.Consumer, h.Consumer, h.Table)
				continue
			}
			tables[tk] = h
		}
	}
}

func position(fset *token.FileSet, p token.Pos) diag.Pos {
	pos := fset.Position(p)
	return diag.Pos{File: pos.Filename, Line: pos.Line, Col: pos.Column}
}

// parsePos parses the "file:line:col" of a packages.Error.
func parsePos(s string) diag.Pos {
	parts := strings.Split(s, ":")
	if len(parts) < 2 {
		return diag.Pos{}
	}
	var p diag.Pos
	nums := []int{}
	for len(parts) > 1 {
		n, err := strconv.Atoi(parts[len(parts)-1])
		if err != nil {
			break
		}
		nums = append([]int{n}, nums...)
		parts = parts[:len(parts)-1]
	}
	p.File = strings.Join(parts, ":")
	if len(nums) > 0 {
		p.Line = nums[0]
	}
	if len(nums) > 1 {
		p.Col = nums[1]
	}
	return p
}

// CheckPackage reports the problems of one type-checked package's
// directives and handlers, as generate and vet do for it, for a driver that
// has already loaded and type-checked it (a go/analysis pass): the
// directives, the signatures, the keys and their hygiene, the fixtures and
// the generated names. What needs the migrations folders (schema evolution,
// the consumers of other packages) is left to idemgen itself. Syntax may
// hold the package's test files, which are skipped as idemgen skips them.
// scope, if not nil, is the package in a txscope Program, which checks what
// the handlers do outside their transaction; its //idem:allow errors are
// the caller's to report.
func CheckPackage(pkg *packages.Package, scope *txscope.Package) *diag.List {
	diags := &diag.List{}
	own := *pkg
	own.Syntax, own.GoFiles, own.CompiledGoFiles = nil, nil, nil
	for _, f := range pkg.Syntax {
		name := pkg.Fset.Position(f.Package).Filename
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		own.Syntax = append(own.Syntax, f)
		own.GoFiles = append(own.GoFiles, name)
	}
	own.CompiledGoFiles = own.GoFiles
	mp, ok := loadPackage(Config{}, &own, scope, diags)
	if ok {
		checkAcrossPackages(model.Program{Packages: []model.Package{mp}}, diags)
	}
	return diags
}
