package txscope

import (
	"go/ast"
	"go/token"
	"go/types"
	"slices"
	"strings"

	"github.com/idemgen/idemgen/internal/diag"
)

// origin is where a value holding a database handle comes from: a
// parameter of the function being summarized, or elsewhere (param -1).
type origin struct {
	param int
	// src is the expression it was got by, typ its type.
	src, typ string
	// reported marks a value got from a handle by a call that is itself a
	// use (a transaction begun on a pool): its own uses are not reported
	// again.
	reported bool
}

// flow is the set of origins of a value.
type flow []origin

// maxFlow bounds the origins kept per value; the first ones say enough.
const maxFlow = 8

func (f flow) add(os ...origin) flow {
	for _, o := range os {
		if len(f) >= maxFlow {
			break
		}
		if !slices.Contains(f, o) {
			f = append(f, o)
		}
	}
	return f
}

// summarizer works out the Summary of one function.
type summarizer struct {
	p    *Package
	decl *ast.FuncDecl
	// vars are the origins of the function's variables: its parameters,
	// and the locals that hold a handle.
	vars map[*types.Var]flow
	// params are the parameters' names by index.
	params map[int]string
	sum    *Summary
	// effectAt indexes sum.Effects by kind and the position of the use, or
	// of the first call on the way to it.
	effectAt map[effectKey]int
}

type effectKey struct {
	kind Kind
	at   token.Pos
}

// assignment is a value stored into a variable, or into a field or an
// element of one.
type assignment struct {
	v *types.Var
	e ast.Expr
}

// summarize works out the Summary of decl. The parameters for which
// foreign is true (for a handler, all but its tx and outbox) are taken for
// handles other than tx, so that each of their uses is an Effect of its
// own rather than the first use of a parameter.
func summarize(p *Package, decl *ast.FuncDecl, foreign func(i int) bool) *Summary {
	s := &summarizer{
		p: p, decl: decl,
		vars:     map[*types.Var]flow{},
		params:   map[int]string{},
		sum:      &Summary{},
		effectAt: map[effectKey]int{},
	}
	i := 0
	var fields []*ast.Field
	if decl.Recv != nil {
		fields = append(fields, decl.Recv.List...)
	}
	fields = append(fields, decl.Type.Params.List...)
	for _, field := range fields {
		if len(field.Names) == 0 {
			i++
			continue
		}
		for _, name := range field.Names {
			if v, ok := p.info.Defs[name].(*types.Var); ok && s.holds(v.Type()) {
				param := i
				if foreign != nil && foreign(i) {
					param = -1
				}
				s.vars[v] = flow{{param: param, src: name.Name, typ: typeString(v.Type())}}
			}
			s.params[i] = name.Name
			i++
		}
	}

	// The variables' origins, to a fixed point: a value assigned below its
	// use still reaches it on the loop's next turn.
	assigns := s.assignments()
	for range 10 {
		changed := false
		for _, a := range assigns {
			before := len(s.vars[a.v])
			s.vars[a.v] = s.vars[a.v].add(s.eval(a.e)...)
			changed = changed || len(s.vars[a.v]) != before
		}
		if !changed {
			break
		}
	}

	called := map[ast.Expr]bool{}
	ast.Inspect(decl.Body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.CallExpr:
			called[ast.Unparen(n.Fun)] = true
			s.call(n)
		case *ast.SelectorExpr:
			if !called[n] {
				s.methodValue(n)
			}
		}
		return true
	})
	s.results()
	return s.sum
}

func (s *summarizer) holds(t types.Type) bool { return s.p.prog.types.holds(t) }

// assignments collects the function's stores of values that hold handles
// into its variables, closures included.
func (s *summarizer) assignments() []assignment {
	var out []assignment
	add := func(lhs, rhs ast.Expr) {
		if lhs == nil || rhs == nil || !s.holds(s.p.info.TypeOf(lhs)) {
			return
		}
		if v := s.rootVar(lhs); v != nil {
			out = append(out, assignment{v, rhs})
		}
	}
	ast.Inspect(s.decl.Body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.AssignStmt:
			for i, lhs := range n.Lhs {
				switch {
				case len(n.Lhs) == len(n.Rhs):
					add(lhs, n.Rhs[i])
				case len(n.Rhs) == 1:
					add(lhs, n.Rhs[0])
				}
			}
		case *ast.ValueSpec:
			for i, name := range n.Names {
				switch {
				case len(n.Names) == len(n.Values):
					add(name, n.Values[i])
				case len(n.Values) == 1:
					add(name, n.Values[0])
				}
			}
		case *ast.RangeStmt:
			add(n.Key, n.X)
			add(n.Value, n.X)
		case *ast.TypeSwitchStmt:
			var x ast.Expr
			switch a := n.Assign.(type) {
			case *ast.AssignStmt:
				x = a.Rhs[0].(*ast.TypeAssertExpr).X
			case *ast.ExprStmt:
				x = a.X.(*ast.TypeAssertExpr).X
			}
			for _, clause := range n.Body.List {
				if v, ok := s.p.info.Implicits[clause].(*types.Var); ok && s.holds(v.Type()) {
					out = append(out, assignment{v, x})
				}
			}
		}
		return true
	})
	return out
}

// rootVar is the local variable (or parameter) that a store into lhs
// changes: x of x, x.f, x[i] and *x; nil for a package variable.
func (s *summarizer) rootVar(lhs ast.Expr) *types.Var {
	for {
		switch e := ast.Unparen(lhs).(type) {
		case *ast.Ident:
			obj := s.p.info.Defs[e]
			if obj == nil {
				obj = s.p.info.Uses[e]
			}
			v, ok := obj.(*types.Var)
			if !ok || v.Pkg() == nil || v.Parent() == v.Pkg().Scope() {
				return nil
			}
			return v
		case *ast.SelectorExpr:
			if sel := s.p.info.Selections[e]; sel == nil || sel.Kind() != types.FieldVal {
				return nil
			}
			lhs = e.X
		case *ast.IndexExpr:
			lhs = e.X
		case *ast.StarExpr:
			lhs = e.X
		default:
			return nil
		}
	}
}

// eval returns the origins of the value of e, when it holds a handle.
func (s *summarizer) eval(e ast.Expr) flow {
	e = ast.Unparen(e)
	t := s.p.info.TypeOf(e)
	if t == nil || !s.holds(t) {
		return nil
	}
	switch e := e.(type) {
	case *ast.Ident:
		return s.ident(e, s.p.info.Uses[e])
	case *ast.SelectorExpr:
		sel := s.p.info.Selections[e]
		if sel == nil {
			return s.ident(e, s.p.info.Uses[e.Sel]) // a qualified identifier
		}
		if sel.Kind() != types.FieldVal {
			return nil
		}
		base, text, typ := exprString(e.X), exprString(e), typeString(t)
		var f flow
		for _, o := range s.eval(e.X) {
			if o.src == base {
				o.src, o.typ = text, typ
			}
			f = f.add(o)
		}
		return f
	case *ast.CallExpr:
		return s.evalCall(e)
	case *ast.CompositeLit:
		var f flow
		for _, elt := range e.Elts {
			if kv, ok := elt.(*ast.KeyValueExpr); ok {
				elt = kv.Value
			}
			f = f.add(s.eval(elt)...)
		}
		return f
	case *ast.UnaryExpr:
		return s.eval(e.X)
	case *ast.StarExpr:
		return s.eval(e.X)
	case *ast.TypeAssertExpr:
		return s.eval(e.X)
	case *ast.IndexExpr:
		return s.eval(e.X)
	case *ast.SliceExpr:
		return s.eval(e.X)
	}
	return nil
}

// ident returns the origins of a variable's value: those found for a
// parameter or local, or a handle of its own for a package variable.
func (s *summarizer) ident(e ast.Expr, obj types.Object) flow {
	v, ok := obj.(*types.Var)
	if !ok {
		return nil
	}
	if f, ok := s.vars[v]; ok {
		return f
	}
	if v.Pkg() != nil && v.Parent() == v.Pkg().Scope() {
		return flow{{param: -1, src: v.Pkg().Name() + "." + v.Name(), typ: typeString(v.Type())}}
	}
	return nil
}

// evalCall returns the origins of a call's results.
func (s *summarizer) evalCall(call *ast.CallExpr) flow {
	if tv, ok := s.p.info.Types[call.Fun]; ok && tv.IsType() {
		if len(call.Args) == 1 {
			return s.eval(call.Args[0]) // a conversion
		}
		return nil
	}
	if b := s.builtin(call); b != "" {
		var f flow
		if b == "append" {
			for _, a := range call.Args {
				f = f.add(s.eval(a)...)
			}
		}
		return f
	}
	fn, args := s.callee(call)
	if fn != nil {
		if sum, ok := s.p.prog.summary(fn, s.p); ok {
			var f flow
			for _, i := range sum.Results {
				for _, a := range argsFor(fn, args, i) {
					f = f.add(s.eval(a)...)
				}
			}
			if h := sum.ResultHandle; h != nil {
				f = f.add(origin{param: -1, src: h.Handle, typ: h.Type})
			}
			return f
		}
		if isMethod(fn) && len(args) > 0 && s.p.prog.types.isHandle(recvType(fn)) {
			// A transaction begun or a connection taken on a handle: the
			// call is the use, reported once.
			var f flow
			for _, o := range s.eval(args[0]) {
				o.reported = true
				f = f.add(o)
			}
			return f
		}
	}
	// A call not followed: what it is given reaches its results.
	var f flow
	for _, a := range args {
		f = f.add(s.eval(a)...)
	}
	if len(f) == 0 {
		// A handle made from nothing the function holds: a pool opened,
		// a connection dialled.
		f = flow{{param: -1, src: shorten(exprString(call)), typ: typeString(s.handleOf(s.p.info.TypeOf(call)))}}
	}
	return f
}

// handleOf is t, or for the results of a call the first that holds a
// handle.
func (s *summarizer) handleOf(t types.Type) types.Type {
	if tuple, ok := t.(*types.Tuple); ok {
		for i := range tuple.Len() {
			if s.holds(tuple.At(i).Type()) {
				return tuple.At(i).Type()
			}
		}
	}
	return t
}

// builtin returns the name of the builtin call calls, or "".
func (s *summarizer) builtin(call *ast.CallExpr) string {
	if id, ok := ast.Unparen(call.Fun).(*ast.Ident); ok {
		if b, ok := s.p.info.Uses[id].(*types.Builtin); ok {
			return b.Name()
		}
	}
	return ""
}

// callee returns the function or method a call calls (nil for a function
// value), and its arguments with a method's receiver first, so that
// argument i is the callee's parameter i as a Summary counts them.
func (s *summarizer) callee(call *ast.CallExpr) (*types.Func, []ast.Expr) {
	fun := ast.Unparen(call.Fun)
	switch x := fun.(type) {
	case *ast.IndexExpr:
		fun = x.X
	case *ast.IndexListExpr:
		fun = x.X
	}
	switch fun := fun.(type) {
	case *ast.Ident:
		fn, _ := s.p.info.Uses[fun].(*types.Func)
		return fn, call.Args
	case *ast.SelectorExpr:
		sel := s.p.info.Selections[fun]
		if sel == nil {
			fn, _ := s.p.info.Uses[fun.Sel].(*types.Func) // pkg.F
			return fn, call.Args
		}
		fn, _ := sel.Obj().(*types.Func)
		switch sel.Kind() {
		case types.MethodVal:
			return fn, append([]ast.Expr{fun.X}, call.Args...)
		case types.MethodExpr:
			return fn, call.Args
		}
	}
	return nil, call.Args
}

// argsFor returns the arguments that fill parameter i of fn (all the
// trailing ones for a variadic parameter).
func argsFor(fn *types.Func, args []ast.Expr, i int) []ast.Expr {
	if i >= len(args) {
		return nil
	}
	sig := fn.Type().(*types.Signature)
	n := sig.Params().Len()
	if sig.Recv() != nil {
		n++
	}
	if sig.Variadic() && i == n-1 {
		return args[i:]
	}
	return args[i : i+1]
}

func isMethod(fn *types.Func) bool {
	sig, ok := fn.Type().(*types.Signature)
	return ok && sig.Recv() != nil
}

func recvType(fn *types.Func) types.Type {
	return fn.Type().(*types.Signature).Recv().Type()
}

func isInterface(t types.Type) bool {
	_, ok := t.Underlying().(*types.Interface)
	return ok
}

// call records what a call does: an effect outside the database, the
// effects and parameter uses of a function followed, or the use of a
// handle by a method of its own or by a function not followed that is
// given one.
func (s *summarizer) call(call *ast.CallExpr) {
	if tv, ok := s.p.info.Types[call.Fun]; (ok && tv.IsType()) || s.builtin(call) != "" {
		return
	}
	fn, args := s.callee(call)
	if fn != nil {
		if ext, publish := outside(fn); ext {
			if !s.p.allowed(call.Pos(), ExternalCall) {
				s.effect(Effect{Kind: ExternalCall, Use: callName(fn), Publish: publish, At: s.p.position(call.Pos())}, call.Pos())
			}
			return
		}
		if sum, ok := s.p.prog.summary(fn, s.p); ok {
			s.follow(call, fn, args, sum)
			return
		}
	}
	if fn != nil && isMethod(fn) && len(args) > 0 {
		recv := recvType(fn)
		if s.p.prog.types.isHandle(recv) || (!isInterface(recv) && s.holds(recv)) {
			// A method of a handle, or of a value holding one whose
			// package is not followed (sqlc's Queries of another module).
			use := shorten(exprString(ast.Unparen(call.Fun)))
			path, typ := s.embedded(call.Fun)
			for _, o := range s.eval(args[0]) {
				if path != "" && o.src == exprString(args[0]) {
					o.src, o.typ = o.src+path, typ
				}
				s.use(o, Effect{Kind: OutsideTx, Use: use}, args[0].Pos())
			}
		}
		args = args[1:]
	}
	if s.holds(s.p.info.TypeOf(call)) {
		// What it is given reaches its results, whose uses are judged.
		return
	}
	name := "a function value"
	if fn != nil {
		name = callName(fn)
	}
	for _, a := range args {
		for _, o := range s.eval(a) {
			s.use(o, Effect{Kind: OutsideTx, Use: name, Passed: true}, a.Pos())
		}
	}
}

// embedded returns, for a method promoted through embedded fields
// (e.Begin of a pool e embeds), the fields' path (".Pool") and the type of
// the last; "" for a method of the receiver's own type.
func (s *summarizer) embedded(fun ast.Expr) (string, string) {
	sel, ok := ast.Unparen(fun).(*ast.SelectorExpr)
	if !ok {
		return "", ""
	}
	selection := s.p.info.Selections[sel]
	if selection == nil || len(selection.Index()) < 2 {
		return "", ""
	}
	t := selection.Recv()
	var path string
	for _, i := range selection.Index()[:len(selection.Index())-1] {
		if p, ok := t.Underlying().(*types.Pointer); ok {
			t = p.Elem()
		}
		st, ok := t.Underlying().(*types.Struct)
		if !ok {
			return "", ""
		}
		f := st.Field(i)
		path, t = path+"."+f.Name(), f.Type()
	}
	return path, typeString(t)
}

// methodValue records a method of a handle taken as a value (exec :=
// s.pool.Exec): whoever calls it uses the handle.
func (s *summarizer) methodValue(e *ast.SelectorExpr) {
	sel := s.p.info.Selections[e]
	if sel == nil || sel.Kind() != types.MethodVal {
		return
	}
	fn, ok := sel.Obj().(*types.Func)
	if !ok || !s.p.prog.types.isHandle(recvType(fn)) {
		return
	}
	for _, o := range s.eval(e.X) {
		s.use(o, Effect{Kind: OutsideTx, Use: shorten(exprString(e))}, e.X.Pos())
	}
}

// follow adds what fn, a function followed, does when called by call.
func (s *summarizer) follow(call *ast.CallExpr, fn *types.Func, args []ast.Expr, sum *Summary) {
	step := Step{Callee: funcName(fn), At: s.p.position(call.Pos())}
	for _, e := range sum.Effects {
		if s.within(e.At) {
			continue // reached back through a cycle of calls: found where it is
		}
		if !s.p.allowed(call.Pos(), e.Kind) {
			e.Via = append([]Step{step}, e.Via...)
			s.effect(e, call.Pos())
		}
	}
	for _, pu := range sum.Params {
		use := pu.Effect
		use.Via = append([]Step{step}, use.Via...)
		for _, a := range argsFor(fn, args, pu.Index) {
			for _, o := range s.eval(a) {
				if use.Path != "" && o.src == exprString(a) && !o.reported {
					// The callee took the handle from this argument's
					// fields: name it from here.
					o.src += use.Path
					o.typ = use.Type
				}
				s.use(o, use, call.Pos())
			}
		}
	}
}

// within reports whether at lies in the function being summarized.
func (s *summarizer) within(at diag.Pos) bool {
	start, end := s.p.position(s.decl.Pos()), s.p.position(s.decl.End())
	return at.File == start.File && (at.Line > start.Line || at.Line == start.Line && at.Col >= start.Col) &&
		(at.Line < end.Line || at.Line == end.Line && at.Col <= end.Col)
}

// use records the use, at pos, of a value of origin o as a database handle.
func (s *summarizer) use(o origin, e Effect, pos token.Pos) {
	if o.reported || s.p.allowed(pos, OutsideTx) {
		return
	}
	e.Kind, e.Handle, e.Type = OutsideTx, o.src, o.typ
	if len(e.Via) == 0 {
		e.At = s.p.position(pos)
	}
	if o.param < 0 {
		s.effect(e, pos)
		return
	}
	if slices.ContainsFunc(s.sum.Params, func(pu ParamUse) bool { return pu.Index == o.param }) {
		return
	}
	e.Path = ""
	if name := s.params[o.param]; strings.HasPrefix(o.src, name+".") {
		e.Path = strings.TrimPrefix(o.src, name)
	}
	s.sum.Params = append(s.sum.Params, ParamUse{Index: o.param, Effect: e})
	slices.SortFunc(s.sum.Params, func(a, b ParamUse) int { return a.Index - b.Index })
}

// effect records e, found at pos, unless an effect of its kind was found
// at the same place (or through the same call), which then counts it.
func (s *summarizer) effect(e Effect, pos token.Pos) {
	e.Path = ""
	key := effectKey{e.Kind, pos}
	if i, ok := s.effectAt[key]; ok {
		if len(e.Via) > 0 {
			s.sum.Effects[i].More += 1 + e.More
		}
		return
	}
	s.effectAt[key] = len(s.sum.Effects)
	s.sum.Effects = append(s.sum.Effects, e)
}

// results records the parameters, and the handles of the function's own,
// that reach its results.
func (s *summarizer) results() {
	var named []*types.Var
	if r := s.decl.Type.Results; r != nil {
		for _, field := range r.List {
			for _, name := range field.Names {
				if v, ok := s.p.info.Defs[name].(*types.Var); ok {
					named = append(named, v)
				}
			}
		}
	}
	var f flow
	ast.Inspect(s.decl.Body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.FuncLit:
			return false // its returns are its own
		case *ast.ReturnStmt:
			if len(n.Results) == 0 {
				for _, v := range named {
					f = f.add(s.vars[v]...)
				}
			}
			for _, r := range n.Results {
				f = f.add(s.eval(r)...)
			}
		}
		return true
	})
	for _, o := range f {
		switch {
		case o.reported:
		case o.param >= 0:
			if !slices.Contains(s.sum.Results, o.param) {
				s.sum.Results = append(s.sum.Results, o.param)
			}
		case s.sum.ResultHandle == nil:
			s.sum.ResultHandle = &Effect{Kind: OutsideTx, Handle: o.src, Type: o.typ}
		}
	}
	slices.Sort(s.sum.Results)
}

// callName names a function or method as code calls it: http.Post,
// (*http.Client).Do, (*amqp091.Channel).Publish.
func callName(fn *types.Func) string {
	name := funcName(fn)
	if i := strings.IndexByte(name, '.'); i >= 0 && isMethod(fn) {
		pkg, rest := name[:i], name[i+1:]
		if strings.HasPrefix(rest, "(*") {
			return "(*" + pkg + "." + strings.TrimPrefix(rest, "(*")
		}
		return pkg + "." + rest
	}
	return name
}

// exprString is e as a reader writes it.
func exprString(e ast.Expr) string { return types.ExprString(e) }

// shorten keeps a long expression readable in a message.
func shorten(s string) string {
	const limit = 60
	if len(s) <= limit {
		return s
	}
	return s[:limit-3] + "..."
}
