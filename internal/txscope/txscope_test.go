package txscope

import (
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"strings"
	"testing"
)

// pgxpool is as much of the real package as the tests need.
const pgxpool = `package pgxpool

import "context"

type Pool struct{}

func (*Pool) Exec(ctx context.Context, sql string, args ...any) error { return nil }
`

// load type-checks src as package example.com/app, with a stub pgxpool,
// and adds it to a new Program.
func load(t *testing.T, src string) (*Package, *types.Package) {
	t.Helper()
	fset := token.NewFileSet()
	std := importer.ForCompiler(fset, "source", nil)
	check := func(path, name, src string, imp types.Importer) (*types.Package, *types.Info, *ast.File) {
		f, err := parser.ParseFile(fset, name, src, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		info := &types.Info{
			Types: map[ast.Expr]types.TypeAndValue{}, Defs: map[*ast.Ident]types.Object{},
			Uses: map[*ast.Ident]types.Object{}, Implicits: map[ast.Node]types.Object{},
			Selections: map[*ast.SelectorExpr]*types.Selection{}, Instances: map[*ast.Ident]types.Instance{},
		}
		pkg, err := (&types.Config{Importer: imp}).Check(path, fset, []*ast.File{f}, info)
		if err != nil {
			t.Fatal(err)
		}
		return pkg, info, f
	}
	pool, _, _ := check("github.com/jackc/pgx/v5/pgxpool", "/m/pgxpool/pgxpool.go", pgxpool, std)
	imp := importerFunc(func(path string) (*types.Package, error) {
		if path == pool.Path() {
			return pool, nil
		}
		return std.Import(path)
	})
	pkg, info, f := check("example.com/app", "/m/app/app.go", src, imp)
	return NewProgram(nil).Add(fset, pkg, info, []*ast.File{f}, "example.com"), pkg
}

type importerFunc func(path string) (*types.Package, error)

func (f importerFunc) Import(path string) (*types.Package, error) { return f(path) }

func summaryOf(t *testing.T, p *Package, pkg *types.Package, name string) *Summary {
	t.Helper()
	fn, _ := pkg.Scope().Lookup(name).(*types.Func)
	if fn == nil {
		t.Fatalf("no function %s", name)
	}
	s, ok := p.Summary(fn)
	if !ok {
		t.Fatalf("no summary of %s", name)
	}
	return s
}

// TestMutualRecursion: a use of a handle in a cycle of calls reaches every
// function of the cycle, whichever is summarized first.
func TestMutualRecursion(t *testing.T) {
	const src = `package app

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"
)

var pool *pgxpool.Pool

func a(ctx context.Context, n int) error {
	if n == 0 {
		return nil
	}
	return b(ctx, n-1)
}

func b(ctx context.Context, n int) error {
	if err := pool.Exec(ctx, "SELECT 1"); err != nil {
		return err
	}
	return a(ctx, n)
}

func c(ctx context.Context) error { return a(ctx, 3) }
`
	for _, first := range []string{"a", "b", "c"} {
		p, pkg := load(t, src)
		summaryOf(t, p, pkg, first)
		for _, name := range []string{"a", "b", "c"} {
			s := summaryOf(t, p, pkg, name)
			if len(s.Effects) != 1 || s.Effects[0].Use != "pool.Exec" || s.Effects[0].Handle != "app.pool" {
				t.Errorf("%s first: the summary of %s has effects %+v, want the one of pool.Exec", first, name, s.Effects)
			}
		}
	}
}

// TestParamsAndResults: a parameter used as a handle is recorded with the
// fields that lead to it, and one that reaches the results is too; neither
// is an effect of the function's own.
func TestParamsAndResults(t *testing.T) {
	const src = `package app

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"
)

type Repo struct{ pool *pgxpool.Pool }

func wrap(p *pgxpool.Pool) *Repo { return &Repo{pool: p} }

func (r *Repo) save(ctx context.Context) error { return r.pool.Exec(ctx, "INSERT") }

func use(ctx context.Context, p *pgxpool.Pool) error { return wrap(p).save(ctx) }
`
	p, pkg := load(t, src)
	if s := summaryOf(t, p, pkg, "wrap"); len(s.Results) != 1 || s.Results[0] != 0 || len(s.Params) != 0 || len(s.Effects) != 0 {
		t.Errorf("wrap: %+v, want its parameter 0 in the results only", s)
	}
	repo := pkg.Scope().Lookup("Repo").Type()
	save, _, _ := types.LookupFieldOrMethod(types.NewPointer(repo), false, pkg, "save")
	s, _ := p.Summary(save.(*types.Func))
	if len(s.Params) != 1 || s.Params[0].Index != 0 || s.Params[0].Path != ".pool" || s.Params[0].Use != "r.pool.Exec" {
		t.Errorf("save: %+v, want the receiver used through .pool", s.Params)
	}
	if s := summaryOf(t, p, pkg, "use"); len(s.Params) != 1 || s.Params[0].Index != 1 || len(s.Params[0].Via) != 1 ||
		!strings.HasSuffix(s.Params[0].Via[0].Callee, "save") || len(s.Effects) != 0 {
		t.Errorf("use: %+v, want its parameter 1 used through save", s)
	}
}

func TestModuleRoot(t *testing.T) {
	for _, c := range []struct{ dir, path, module, want string }{
		{"/src/shop/orders/store", "example.com/shop/orders/store", "example.com/shop", "/src/shop"},
		{"/src/shop", "example.com/shop", "example.com/shop", "/src/shop"},
		{"/tmp/x", "example.com/shop/orders", "example.com/shop", "/tmp/x"},
		{"/src/shop/orders", "example.com/shop/orders", "", "/src/shop/orders"},
	} {
		if got := moduleRoot(c.dir, c.path, c.module); got != c.want {
			t.Errorf("moduleRoot(%q, %q, %q) = %q, want %q", c.dir, c.path, c.module, got, c.want)
		}
	}
}
