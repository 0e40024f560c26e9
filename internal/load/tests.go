package load

import (
	"fmt"
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"

	"github.com/idemgen/idemgen/internal/diag"
	"github.com/idemgen/idemgen/internal/directive"
	"github.com/idemgen/idemgen/internal/model"
)

// What the generated tests need beyond the wrapper: the fixture= function,
// which lives in the package's test files (idemgen loads packages without
// their tests, so it reads them with go/parser), and a message field to vary.

const idemtestPath = idemPath + "/idemtest"

// vary picks the field the generated tests change to make a message with the
// same key and another payload: the first exported, JSON-encoded field of
// the message struct outside the key whose type is a string, an integer or a
// bool. Without one it says why, for the generated test's comment.
//
// For an idem.Message[T] or idem.Request[T] the field is one of the body's,
// Body.F: the envelope's other fields are the key's parts (ID, Key, Client)
// or are not fingerprinted (Attempt, Headers).
func (c *checker) vary(msg types.Type, h model.Handler) (*model.VaryField, string) {
	prefix, depth := "", 0
	if h.Envelope {
		body := types.Unalias(msg).(*types.Named).TypeArgs().At(0)
		if p, ok := types.Unalias(body).(*types.Pointer); ok {
			body = p.Elem()
		}
		msg, prefix, depth = body, "Body.", 1
	}
	name := c.typeString(msg)
	switch {
	case hasMethod(msg, "IdemFingerprint") && !h.Envelope:
		return nil, name + " has an IdemFingerprint method, so idemgen cannot tell which change alters its fingerprint"
	case hasMethod(msg, "MarshalJSON") || hasMethod(msg, "MarshalText"):
		return nil, name + " has its own JSON encoding, so idemgen cannot tell which change alters its fingerprint"
	}
	key := map[string]bool{}
	for _, k := range h.Key {
		if len(k.Hops) == depth+1 && (depth == 0 || k.Hops[0].Field == "Body") {
			key[k.Hops[depth].Field] = true
		}
	}
	st := msg.Underlying().(*types.Struct)
	for i := range st.NumFields() {
		f := st.Field(i)
		if !f.Exported() || f.Embedded() || key[f.Name()] || reflect.StructTag(st.Tag(i)).Get("json") == "-" ||
			hasMethod(f.Type(), "MarshalJSON") || hasMethod(f.Type(), "MarshalText") {
			continue
		}
		b, ok := f.Type().Underlying().(*types.Basic)
		switch {
		case !ok:
		case b.Kind() == types.String:
			return c.varyField(prefix+f.Name(), model.VaryString, f.Type(), h)
		case b.Info()&types.IsInteger != 0:
			return c.varyField(prefix+f.Name(), model.VaryInt, f.Type(), h)
		case b.Kind() == types.Bool:
			return c.varyField(prefix+f.Name(), model.VaryBool, f.Type(), h)
		}
	}
	return nil, name + " has no exported field outside its key that is a string, an integer or a bool"
}

// varyField is the VaryField path of kind, with its type.
func (c *checker) varyField(path string, kind model.VaryKind, t types.Type, h model.Handler) (*model.VaryField, string) {
	mt, ok := c.modelType(t, h.Pos)
	if !ok {
		return nil, "the type of " + path + " cannot be named in generated code"
	}
	return &model.VaryField{Field: path, Kind: kind, Type: mt}, ""
}

// testFiles are the package's _test.go files, parsed. Those of the external
// test package (package x_test) are kept apart: the generated tests are in
// the package itself and cannot call their functions.
type testFiles struct {
	fset     *token.FileSet
	internal []*ast.File
	external []*ast.File
}

// readTestFiles parses the _test.go files of dir that the go command would
// build, except idemgen's own.
func readTestFiles(dir, pkgName string) *testFiles {
	tf := &testFiles{fset: token.NewFileSet()}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, "_test.go") || name == model.TestFile {
			continue
		}
		if ok, err := build.Default.MatchFile(dir, name); err != nil || !ok {
			continue
		}
		f, _ := parser.ParseFile(tf.fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
		switch {
		case f == nil:
		case f.Name.Name == pkgName:
			tf.internal = append(tf.internal, f)
		case f.Name.Name == pkgName+"_test":
			tf.external = append(tf.external, f)
		}
	}
	return tf
}

// lookup returns the top-level function called name in files, and its file.
func lookup(files []*ast.File, name string) (*ast.FuncDecl, *ast.File) {
	for _, f := range files {
		for _, decl := range f.Decls {
			if fd, ok := decl.(*ast.FuncDecl); ok && fd.Recv == nil && fd.Name.Name == name {
				return fd, f
			}
		}
	}
	return nil, nil
}

// fixture checks the fixture= option against the package's test files: the
// function must exist in the package itself and have the shape
//
//	func NAME(t testing.TB, db *idemtest.DB) idemtest.Fixture[V, M]
//
// with V the handler's receiver type (idemtest.NoReceiver for a function) and
// M its message type; for a mode=external handler
//
//	func NAME(t testing.TB, p *idemtest.Provider) idemtest.ExternalFixture[V, M]
//
// which wires the provider double into the receiver.
func (c *checker) fixture(o directive.Option, h *model.Handler) {
	name := o.Value
	if !token.IsIdentifier(name) {
		c.errorf(o.ValuePos, "fixture %q is not a Go identifier: name a function of the package's tests", name)
		return
	}
	want := c.fixtureShape(name, *h)
	fd, file := lookup(c.tests.internal, name)
	if fd == nil {
		if ext, _ := lookup(c.tests.external, name); ext != nil {
			c.errorf(o.ValuePos, "fixture %s is declared in package %s_test (%s), but the generated tests are in package %s and cannot call it: move it to a _test.go file of package %s",
				name, c.pkg.Name, c.testPos(ext), c.pkg.Name, c.pkg.Name)
			return
		}
		c.errorf(o.ValuePos, "fixture %s not found: want %s in a _test.go file of package %s", name, want, c.pkg.Name)
		return
	}
	if problem := c.fixtureProblem(fd, file, *h); problem != "" {
		c.errorf(o.ValuePos, "fixture %s (%s) %s; want %s", name, c.testPos(fd), problem, want)
		return
	}
	h.Fixture = name
}

func (c *checker) testPos(fd *ast.FuncDecl) string {
	p := c.tests.fset.Position(fd.Name.Pos())
	return filepath.Base(p.Filename) + ":" + strconv.Itoa(p.Line)
}

// fixtureShape spells the function a fixture must be, as the package's tests
// would write it.
func (c *checker) fixtureShape(name string, h model.Handler) string {
	f := fixtureForm(h)
	return fmt.Sprintf("func %s(t testing.TB, %s) idemtest.%s[%s, %s]", name, f.param, f.result, c.recvSpelling(h), c.spell(h.Msg))
}

// fixtureFormOf is what a fixture of a mode takes second and returns.
type fixtureFormOf struct {
	param   string // as written: db *idemtest.DB
	ptrType string // the second parameter's type, an idemtest type behind a pointer: DB
	result  string // the idemtest type returned: Fixture
}

func fixtureForm(h model.Handler) fixtureFormOf {
	if h.External() {
		return fixtureFormOf{param: "p *idemtest.Provider", ptrType: "Provider", result: "ExternalFixture"}
	}
	if h.Natural() {
		return fixtureFormOf{param: "db *idemtest.DB", ptrType: "DB", result: "NaturalFixture"}
	}
	return fixtureFormOf{param: "db *idemtest.DB", ptrType: "DB", result: "Fixture"}
}

func (c *checker) recvSpelling(h model.Handler) string {
	switch {
	case h.Recv == nil:
		return "idemtest.NoReceiver"
	case h.Recv.Pointer:
		return "*" + h.Recv.Type
	}
	return h.Recv.Type
}

// spell writes a receiver or message type (a named type or a pointer to one)
// as the package's code does.
func (c *checker) spell(t model.Type) string {
	switch {
	case t.Kind == model.Pointer:
		return "*" + c.spell(*t.Elem)
	case t.PkgPath == "" || t.PkgPath == c.pkg.PkgPath:
		return t.Name + c.spellArgs(t.Args)
	}
	return t.PkgName + "." + t.Name + c.spellArgs(t.Args)
}

// spellArgs writes the type arguments of an instantiated type (idem.Message's
// body), "" for none.
func (c *checker) spellArgs(args []model.Type) string {
	if len(args) == 0 {
		return ""
	}
	parts := make([]string, len(args))
	for i, a := range args {
		parts[i] = c.spell(a)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// fixtureProblem says how fd differs from the fixture's shape, or "" when it
// has it.
func (c *checker) fixtureProblem(fd *ast.FuncDecl, file *ast.File, h model.Handler) string {
	imports := c.importNames(file)
	canon := func(e ast.Expr) string { return canonical(e, imports, c.pkg.PkgPath) }
	form := fixtureForm(h)

	if fd.Type.TypeParams != nil && len(fd.Type.TypeParams.List) > 0 {
		return "is generic"
	}
	var params []ast.Expr
	for _, field := range fd.Type.Params.List {
		for range max(len(field.Names), 1) {
			params = append(params, field.Type)
		}
	}
	switch {
	case len(params) != 2:
		return fmt.Sprintf("has %d parameters", len(params))
	case canon(params[0]) != "testing.TB":
		return "does not take a testing.TB first"
	case canon(params[1]) != "*"+idemtestPath+"."+form.ptrType:
		return "does not take a *idemtest." + form.ptrType + " second"
	}
	if fd.Type.Results == nil || len(fd.Type.Results.List) != 1 || len(fd.Type.Results.List[0].Names) > 1 {
		return "does not return one idemtest." + form.result
	}
	result, ok := fd.Type.Results.List[0].Type.(*ast.IndexListExpr)
	if !ok || canon(result.X) != idemtestPath+"."+form.result || len(result.Indices) != 2 {
		return "does not return an idemtest." + form.result
	}
	wantRecv := idemtestPath + ".NoReceiver"
	if h.Recv != nil {
		wantRecv = c.pkg.PkgPath + "." + h.Recv.Type
		if h.Recv.Pointer {
			wantRecv = "*" + wantRecv
		}
	}
	if canon(result.Indices[0]) != wantRecv {
		return "has the wrong receiver type in its idemtest." + form.result
	}
	if canon(result.Indices[1]) != canonicalType(h.Msg) {
		return "has the wrong message type in its idemtest." + form.result
	}
	return ""
}

// importNames maps the names a file's imports are known by to their paths.
// An import without a name is known by its package's name: that of a type
// of the handlers when idemgen knows it, else the last element of its path
// without a version suffix.
func (c *checker) importNames(file *ast.File) map[string]string {
	known := map[string]string{"testing": "testing", idemtestPath: "idemtest"}
	for _, imp := range c.pkg.Types.Imports() {
		known[imp.Path()] = imp.Name()
	}
	names := map[string]string{}
	for _, spec := range file.Imports {
		p, err := strconv.Unquote(spec.Path.Value)
		if err != nil {
			continue
		}
		name := known[p]
		switch {
		case spec.Name != nil:
			name = spec.Name.Name
		case name == "":
			name = path.Base(p)
			if len(name) > 1 && name[0] == 'v' && strings.Trim(name[1:], "0123456789") == "" {
				name = path.Base(path.Dir(p))
			}
		}
		names[name] = p
	}
	return names
}

// canonical writes a type expression of a named type, or a pointer to one,
// with package paths: *example.com/billing.Service, and an instantiated one
// with its type arguments: github.com/idemgen/idemgen/idem.Message[example.com/billing.Order].
// Anything else is "".
func canonical(e ast.Expr, imports map[string]string, local string) string {
	switch e := e.(type) {
	case *ast.IndexExpr:
		return instantiated(canonical(e.X, imports, local), []ast.Expr{e.Index}, imports, local)
	case *ast.IndexListExpr:
		return instantiated(canonical(e.X, imports, local), e.Indices, imports, local)
	case *ast.ParenExpr:
		return canonical(e.X, imports, local)
	case *ast.StarExpr:
		if inner := canonical(e.X, imports, local); inner != "" {
			return "*" + inner
		}
	case *ast.Ident:
		if obj := types.Universe.Lookup(e.Name); obj != nil {
			return e.Name
		}
		return local + "." + e.Name
	case *ast.SelectorExpr:
		if x, ok := e.X.(*ast.Ident); ok && imports[x.Name] != "" {
			return imports[x.Name] + "." + e.Sel.Name
		}
	}
	return ""
}

// instantiated writes generic, a canonical type name, with the canonical
// type arguments args; "" when any of them is not canonical.
func instantiated(generic string, args []ast.Expr, imports map[string]string, local string) string {
	if generic == "" {
		return ""
	}
	parts := make([]string, len(args))
	for i, a := range args {
		if parts[i] = canonical(a, imports, local); parts[i] == "" {
			return ""
		}
	}
	return generic + "[" + strings.Join(parts, ",") + "]"
}

// canonicalType writes t as canonical does.
func canonicalType(t model.Type) string {
	switch {
	case t.Kind == model.Pointer:
		return "*" + canonicalType(*t.Elem)
	case t.PkgPath == "":
		return t.Name + canonicalArgs(t.Args)
	}
	return t.PkgPath + "." + t.Name + canonicalArgs(t.Args)
}

// canonicalArgs writes the type arguments of an instantiated type as
// instantiated does, "" for none.
func canonicalArgs(args []model.Type) string {
	if len(args) == 0 {
		return ""
	}
	parts := make([]string, len(args))
	for i, a := range args {
		parts[i] = canonicalType(a)
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// checkTestNames reports test functions of the package that the generated
// test file would declare again.
func checkTestNames(mp model.Package, tests *testFiles, diags *diag.List) {
	for _, h := range mp.Handlers {
		name := h.Names().Test
		if fd, _ := lookup(tests.internal, name); fd != nil {
			p := tests.fset.Position(fd.Name.Pos())
			diags.Errorf(h.Pos, "idemgen generates %s in %s for handler %s, but %s:%d declares it; rename one of them",
				name, model.TestFile, h.Func, filepath.Base(p.Filename), p.Line)
		}
	}
}

// isGenerated reports whether the file at path is one idemgen wrote: its
// first line is the generated-code header.
func isGenerated(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	buf := make([]byte, len(model.GoHeader)+1)
	n, _ := io.ReadFull(f, buf)
	return string(buf[:n]) == model.GoHeader+"\n"
}
