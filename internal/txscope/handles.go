package txscope

import (
	"go/types"
	"slices"
	"strings"
)

// handleTypes are the concrete database handles, by package path and type
// name: connections, pools and transactions of pgx and database/sql. None
// of them is the handler's tx, which is a pgx.Tx.
var handleTypes = map[string][]string{
	"github.com/jackc/pgx/v5":         {"Conn"},
	"github.com/jackc/pgx/v5/pgxpool": {"Pool", "Conn"},
	"github.com/jackc/pgx/v5/pgconn":  {"PgConn"},
	"github.com/jackc/pgx/v4":         {"Conn"},
	"github.com/jackc/pgx/v4/pgxpool": {"Pool", "Conn"},
	"github.com/jackc/pgconn":         {"PgConn"},
	"database/sql":                    {"DB", "Conn", "Tx", "Stmt"},
	"github.com/jmoiron/sqlx":         {"DB", "Conn", "Tx", "Stmt", "NamedStmt"},
	"github.com/idemgen/idemgen/idem": {"DB"},
}

// statementMethods are the methods that make an interface a database
// handle: pgx's and database/sql's ways to run a statement or begin a
// transaction. sqlc's DBTX, pgx.Tx and user interfaces over them have some.
var statementMethods = []string{
	"Exec", "ExecContext", "Query", "QueryContext", "QueryRow", "QueryRowContext",
	"SendBatch", "CopyFrom", "Begin", "BeginTx",
}

// maxDepth bounds how deep holds looks into struct fields for a handle.
const maxDepth = 4

// typeSet classifies types, remembering what it found.
type typeSet struct {
	handle  map[types.Type]bool
	holding map[types.Type]bool
}

func newTypeSet() *typeSet {
	return &typeSet{handle: map[types.Type]bool{}, holding: map[types.Type]bool{}}
}

// isHandle reports whether t is a database handle: one of handleTypes (or
// a pointer to one), or an interface with a method that runs a statement.
func (ts *typeSet) isHandle(t types.Type) bool {
	if t == nil {
		return false
	}
	if v, ok := ts.handle[t]; ok {
		return v
	}
	v := isHandle(t)
	ts.handle[t] = v
	return v
}

func isHandle(t types.Type) bool {
	t = types.Unalias(t)
	if p, ok := t.(*types.Pointer); ok {
		t = types.Unalias(p.Elem())
	}
	if n, ok := t.(*types.Named); ok && n.Obj().Pkg() != nil {
		if slices.Contains(handleTypes[n.Obj().Pkg().Path()], n.Obj().Name()) {
			return true
		}
	}
	iface, ok := t.Underlying().(*types.Interface)
	if !ok {
		return false
	}
	for i := range iface.NumMethods() {
		m := iface.Method(i)
		if slices.Contains(statementMethods, m.Name()) && runsStatement(m) {
			return true
		}
	}
	return false
}

// runsStatement tells a database method from another of the same name (a
// search client's Query): it takes the statement as a string, or begins or
// acquires with a context.
func runsStatement(m *types.Func) bool {
	params := m.Type().(*types.Signature).Params()
	switch m.Name() {
	case "Begin", "BeginTx", "SendBatch", "CopyFrom":
		return params.Len() > 0 && isContext(params.At(0).Type())
	}
	for i := range min(params.Len(), 2) {
		if b, ok := params.At(i).Type().Underlying().(*types.Basic); ok && b.Kind() == types.String {
			return true
		}
	}
	return false
}

func isContext(t types.Type) bool {
	n, ok := types.Unalias(t).(*types.Named)
	return ok && n.Obj().Pkg() != nil && n.Obj().Pkg().Path() == "context" && n.Obj().Name() == "Context"
}

// holds reports whether a value of type t is or holds a database handle: a
// handle, or a struct (through pointers, arrays, slices and maps) with a
// field that holds one, such as sqlc's Queries with its DBTX. Results of a
// call (a tuple) hold one when one of them does.
func (ts *typeSet) holds(t types.Type) bool {
	if t == nil {
		return false
	}
	if v, ok := ts.holding[t]; ok {
		return v
	}
	v := ts.holdsDepth(t, maxDepth, map[types.Type]bool{})
	ts.holding[t] = v
	return v
}

func (ts *typeSet) holdsDepth(t types.Type, depth int, seen map[types.Type]bool) bool {
	if depth == 0 || seen[t] {
		return false
	}
	seen[t] = true
	if ts.isHandle(t) {
		return true
	}
	switch u := types.Unalias(t).Underlying().(type) {
	case *types.Pointer:
		return ts.holdsDepth(u.Elem(), depth, seen)
	case *types.Slice:
		return ts.holdsDepth(u.Elem(), depth, seen)
	case *types.Array:
		return ts.holdsDepth(u.Elem(), depth, seen)
	case *types.Map:
		return ts.holdsDepth(u.Elem(), depth, seen)
	case *types.Tuple:
		for i := range u.Len() {
			if ts.holdsDepth(u.At(i).Type(), depth, seen) {
				return true
			}
		}
	case *types.Struct:
		for i := range u.NumFields() {
			if ts.holdsDepth(u.Field(i).Type(), depth-1, seen) {
				return true
			}
		}
	}
	return false
}

// typeString writes t qualified by package names, as a Go reader writes it
// in code: *pgxpool.Pool, queries.DBTX.
func typeString(t types.Type) string {
	return types.TypeString(t, func(p *types.Package) string { return p.Name() })
}

// funcName names fn as a Go stack trace does, by package name:
// store.Save, queries.(*Queries).CreateOrder, http.Client.Do for a value
// receiver.
func funcName(fn *types.Func) string {
	pkg := ""
	if fn.Pkg() != nil {
		pkg = fn.Pkg().Name() + "."
	}
	sig, _ := fn.Type().(*types.Signature)
	if sig == nil || sig.Recv() == nil {
		return pkg + fn.Name()
	}
	t, ptr := types.Unalias(sig.Recv().Type()), false
	if p, ok := t.(*types.Pointer); ok {
		t, ptr = types.Unalias(p.Elem()), true
	}
	name := strings.TrimPrefix(typeString(t), pkg)
	if n, ok := t.(*types.Named); ok {
		name = n.Obj().Name()
	}
	if ptr {
		return pkg + "(*" + name + ")." + fn.Name()
	}
	return pkg + name + "." + fn.Name()
}
