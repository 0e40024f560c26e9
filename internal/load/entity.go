package load

import (
	"fmt"
	"go/token"
	"go/types"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/idemgen/idemgen/internal/diag"
	"github.com/idemgen/idemgen/internal/directive"
	"github.com/idemgen/idemgen/internal/model"
)

// The options of mode=entity and mode=natural (docs/natural.md), checked here:
// what needs only the directive when the mode is read (entityOptions), what
// needs the key and the result type once the signature is checked
// (entityKey, entityResult, naturalChecks).
//
// What is checked when: the directive, the key's column count, result='s
// function and fixture= at generate time, here; the columns against the
// user's CREATE TABLE at generate time when a migration of the folder
// creates the table (generate.checkEntityTables); the constraint over the
// columns when a duplicate happens (the runtime looks it up and says when
// there is none), and everything against the real table by the generated
// test, which applies the migrations.

// entityOnly are the options that only mode=entity takes.
var entityOnly = []string{"columns", "constraint", "result"}

var sqlNameRE = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

// entityOptions reads table=, columns= and constraint= of a mode=entity
// handler, and refuses the options that mean nothing in mode=entity or
// mode=natural.
func (c *checker) entityOptions(d directive.Directive, h *model.Handler) {
	if !h.EntityMode() {
		for _, name := range entityOnly {
			if o, ok := d.Lookup(name); ok {
				c.errorf(o.Pos, "%s= is for mode=entity only: it describes the business table whose row is the marker; add mode=entity table=... columns=... or remove %s=", name, name)
			}
		}
	}
	if !h.EntityMode() && !h.Natural() {
		return
	}
	if o, ok := d.Lookup("retain"); ok {
		c.errorf(o.Pos, "retain= is not for mode=%s: nothing but %s records the message, so there is nothing to purge; the retention of a message is %s",
			h.Mode, map[bool]string{true: "the entity row", false: "the state itself"}[h.EntityMode()],
			map[bool]string{true: "the entity's lifetime (a deleted or re-keyed entity forgets the message)", false: "irrelevant: a redelivery runs the handler again, harmlessly"}[h.EntityMode()])
	}
	if !h.EntityMode() {
		if o, ok := d.Lookup("table"); ok {
			c.errorf(o.Pos, "table= is not for mode=natural: a mode=natural handler has no inbox table; for a handler whose business row is its marker use mode=entity table=... columns=...")
		}
		return
	}
	e := &model.Entity{}
	h.Entity = e
	if o, ok := d.Lookup("table"); !ok {
		c.errorf(h.ModePos, "mode=entity needs table=: the business table whose row the handler inserts, such as table=orders")
	} else {
		e.Table, e.TablePos = o.Value, o.ValuePos
	}
	if o, ok := d.Lookup("columns"); !ok {
		c.errorf(h.ModePos, "mode=entity needs columns=: the columns of table= that hold the key parts, in key order, such as columns=id")
	} else {
		e.ColumnsPos = o.ValuePos
		seen := map[string]bool{}
		for _, item := range o.List() {
			switch {
			case !sqlNameRE.MatchString(item.Text) || len(item.Text) > maxIdentifier:
				c.errorf(item.Pos, "column %q is not a plain PostgreSQL name: want lower-case letters, digits and '_', at most 63 bytes", item.Text)
			case seen[item.Text]:
				c.errorf(item.Pos, "column %s is listed twice in columns=", item.Text)
			default:
				seen[item.Text] = true
				e.Columns = append(e.Columns, item.Text)
			}
		}
	}
	if o, ok := d.Lookup("constraint"); ok {
		if !sqlNameRE.MatchString(o.Value) || len(o.Value) > maxIdentifier {
			c.errorf(o.ValuePos, "constraint %q is not a plain PostgreSQL name: want lower-case letters, digits and '_', at most 63 bytes", o.Value)
		} else {
			e.Constraint = o.Value
		}
	}
	if o, ok := d.Lookup("result"); ok {
		if !token.IsIdentifier(o.Value) {
			c.errorf(o.ValuePos, "result %q is not a Go identifier: name a function of package %s", o.Value, c.pkg.Name)
		} else {
			e.Result = o.Value
		}
	}
}

// entityKey checks that columns= has one column per key part, and that
// every part is required: a NULL in a key column never collides.
func (c *checker) entityKey(d directive.Directive, h *model.Handler) {
	e := h.Entity
	if e == nil || len(e.Columns) == 0 || len(h.Key) == 0 {
		return
	}
	if len(e.Columns) != len(h.Key) {
		c.errorf(e.ColumnsPos, "columns= lists %d column(s) (%s) for a key of %d part(s) (%s); want one column per key part, in key order",
			len(e.Columns), strings.Join(e.Columns, ", "), len(h.Key), keyPathList(h.Key))
	}
	for _, k := range h.Key {
		if k.Null != nil {
			o, _ := d.Lookup("key")
			c.errorf(o.ValuePos, "key part %s is nullable, which mode=entity cannot take: the unique constraint of %s lets rows with a NULL key column through, so a duplicate would never collide; use a required field", k.Path, e.Table)
		}
	}
}

// entityResult checks result= against the handler's result: a handler with
// a result needs result=, a function of the package
//
//	func(ctx context.Context, tx pgx.Tx, key parts...) (R, error)
//
// that reads the result of a processed message back for its duplicates; a
// handler without one takes no result=.
func (c *checker) entityResult(d directive.Directive, h *model.Handler, msg types.Type) {
	e := h.Entity
	if e == nil {
		return
	}
	o, hasResult := d.Lookup("result")
	switch {
	case h.Result == nil && hasResult:
		c.errorf(o.Pos, "result= names a function that reads the result back for duplicates, but handler %s returns only an error: remove result=", h.Func)
		return
	case h.Result == nil || len(h.Key) == 0:
		return
	case !hasResult:
		c.errorf(h.ResultPos, "handler %s returns a result (%s), but in mode=entity nothing stores it: a duplicate must read it back from the business table. "+
			"Add result=FuncName to the directive, naming %s, or return only an error", h.Func, typeName(*h.Result), c.resultShape(h, "Func"))
		return
	case e.Result == "":
		return
	}
	want := c.resultShape(h, e.Result)
	obj := c.pkg.Types.Scope().Lookup(e.Result)
	fn, ok := obj.(*types.Func)
	if !ok {
		if obj == nil {
			c.errorf(o.ValuePos, "result=%s: package %s has no function %s; want %s", e.Result, c.pkg.Name, e.Result, want)
		} else {
			c.errorf(o.ValuePos, "result=%s names a %s, not a function; want %s", e.Result, kindOf(obj), want)
		}
		return
	}
	if problem := c.resultFuncProblem(fn.Type().(*types.Signature), h, msg); problem != "" {
		pos := c.pkg.Fset.Position(fn.Pos())
		c.errorf(o.ValuePos, "result=%s (%s:%d) %s; want %s", e.Result, filepath.Base(pos.Filename), pos.Line, problem, want)
	}
}

func kindOf(obj types.Object) string {
	switch obj.(type) {
	case *types.Var:
		return "variable"
	case *types.Const:
		return "constant"
	case *types.TypeName:
		return "type"
	}
	return "name"
}

// resultShape spells the function result= must name.
func (c *checker) resultShape(h *model.Handler, name string) string {
	parts := []string{"ctx context.Context", "tx pgx.Tx"}
	for _, k := range h.Key {
		parts = append(parts, lowerFirst(k.Hops[len(k.Hops)-1].Field)+" "+typeName(k.Type))
	}
	return fmt.Sprintf("func %s(%s) (%s, error)", name, strings.Join(parts, ", "), typeName(*h.Result))
}

// lowerFirst names a parameter after a field: OrderID → orderID, ID → id.
func lowerFirst(s string) string {
	if s == "" || strings.ToUpper(s) == s {
		return strings.ToLower(s)
	}
	return strings.ToLower(s[:1]) + s[1:]
}

// resultFuncProblem says how sig differs from the result function's shape.
func (c *checker) resultFuncProblem(sig *types.Signature, h *model.Handler, msg types.Type) string {
	if sig.Recv() != nil {
		return "is a method"
	}
	if sig.TypeParams().Len() > 0 {
		return "is generic"
	}
	params, results := sig.Params(), sig.Results()
	if params.Len() != 2+len(h.Key) {
		return fmt.Sprintf("has %d parameters", params.Len())
	}
	if !isNamed(params.At(0).Type(), "context", "Context") {
		return "does not take a context.Context first"
	}
	if !isNamed(params.At(1).Type(), pgxPath, "Tx") {
		return "does not take a pgx.Tx second"
	}
	for i, k := range h.Key {
		ft := fieldType(msg, k.Hops)
		if ft == nil || !types.Identical(params.At(2+i).Type(), ft) {
			return fmt.Sprintf("takes %s as parameter %d, where key part %s is %s", c.typeString(params.At(2+i).Type()), 3+i, k.Path, typeName(k.Type))
		}
	}
	errorType := types.Universe.Lookup("error").Type()
	if results.Len() != 2 || !types.Identical(results.At(1).Type(), errorType) {
		return "does not return (R, error)"
	}
	if t, ok := c.modelType(results.At(0).Type(), diag.Pos{}); !ok || typeName(t) != typeName(*h.Result) {
		return fmt.Sprintf("returns %s, where handler %s returns %s", c.typeString(results.At(0).Type()), h.Func, typeName(*h.Result))
	}
	return ""
}

// fieldType follows hops from msg and returns the last field's type.
func fieldType(msg types.Type, hops []model.Hop) types.Type {
	t := msg
	for _, hop := range hops {
		if p, ok := types.Unalias(t).(*types.Pointer); ok {
			t = p.Elem()
		}
		st, ok := t.Underlying().(*types.Struct)
		if !ok {
			return nil
		}
		var next types.Type
		for i := range st.NumFields() {
			if st.Field(i).Name() == hop.Field {
				next = st.Field(i).Type()
				break
			}
		}
		if next == nil {
			return nil
		}
		t = next
	}
	return t
}

// naturalChecks refuses what mode=natural cannot do: an outbox (nothing
// records the message, so every redelivery would publish again).
func (c *checker) naturalChecks(h *model.Handler) {
	if h.Natural() && h.Outbox {
		c.errorf(h.Pos, "handler %s takes an *idem.Outbox, which mode=natural cannot support: nothing records a message, so every redelivery would publish its messages again; use mode=tx or mode=entity", h.Func)
	}
}

func keyPathList(key []model.KeyPart) string {
	var paths []string
	for _, k := range key {
		paths = append(paths, k.Path)
	}
	return strings.Join(paths, ", ")
}
