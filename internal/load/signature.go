package load

import (
	"go/ast"
	"go/types"

	"github.com/idemgen/idemgen/internal/diag"
	"github.com/idemgen/idemgen/internal/model"
)

// receiver records a method's receiver type; a generic handler or one with
// a generic or unnamed receiver is refused.
func (c *checker) receiver(fd *ast.FuncDecl, sig *types.Signature, h *model.Handler) {
	if sig.TypeParams().Len() > 0 {
		c.errorf(h.Pos, "handler %s is generic; idemgen needs concrete message and result types", h.Func)
	}
	recv := sig.Recv()
	if recv == nil {
		return
	}
	t, pointer := recv.Type(), false
	if p, ok := t.(*types.Pointer); ok {
		t, pointer = p.Elem(), true
	}
	named, ok := types.Unalias(t).(*types.Named)
	if !ok || named.TypeParams().Len() > 0 {
		c.errorf(c.pos(fd.Recv), "handler %s has a generic or unnamed receiver; use a method of a plain named type", h.Func)
		return
	}
	_, isStruct := named.Underlying().(*types.Struct)
	h.Recv = &model.Recv{Type: named.Obj().Name(), Pointer: pointer, Struct: isStruct}
}

// signature checks the parameters and results and returns the message's
// struct type.
func (c *checker) signature(fd *ast.FuncDecl, sig *types.Signature, h *model.Handler) (types.Type, bool) {
	if h.External() {
		return c.externalSignature(fd, sig, h)
	}
	const want = "want func(ctx context.Context, tx pgx.Tx, msg M) (R, error) or (...) error, or the same with out *idem.Outbox right after tx, with M a named struct type or a pointer to one " +
		"(or, set-based, msgs []M and ([]R, error) or error)"
	params := sig.Params()
	at := c.pos(fd.Type)
	if c.variadic(fd, sig, h, want) || !c.outbox(fd, sig, h) {
		return nil, false
	}
	msgAt := 2
	if h.Outbox {
		msgAt = 3
	}
	if params.Len() == 2 && isNamed(params.At(0).Type(), "context", "Context") && !isNamed(params.At(1).Type(), pgxPath, "Tx") {
		c.errorf(at, "handler %s takes no pgx.Tx: in mode=tx (the default) the business change commits in the inbox's transaction, "+
			"which the handler gets as its second parameter, func(ctx context.Context, tx pgx.Tx, msg M); "+
			"for a side effect outside the database (a payment API, an e-mail) that takes func(ctx context.Context, msg M), add mode=external to the directive", h.Func)
		return nil, false
	}
	if params.Len() != msgAt+1 {
		c.errorf(at, "handler %s has %d parameters; %s", h.Func, params.Len(), want)
		return nil, false
	}
	if !isNamed(params.At(0).Type(), "context", "Context") {
		c.errorf(c.paramPos(fd, 0), "the first parameter of handler %s must be context.Context, not %s", h.Func, c.typeString(params.At(0).Type()))
	}
	if !isNamed(params.At(1).Type(), pgxPath, "Tx") {
		c.errorf(c.paramPos(fd, 1), "the second parameter of handler %s must be pgx.Tx (%s), not %s: the business change must use the inbox's transaction",
			h.Func, pgxPath, c.typeString(params.At(1).Type()))
	}
	return c.resultAndMessage(fd, sig, h, msgAt, want)
}

// externalSignature checks the form of a mode=external handler,
// func(ctx context.Context, msg M) (R, error) or (...) error: no transaction
// and no outbox, which only mode=tx has.
func (c *checker) externalSignature(fd *ast.FuncDecl, sig *types.Signature, h *model.Handler) (types.Type, bool) {
	const want = "want func(ctx context.Context, msg M) (R, error) or (...) error for mode=external, with M a named struct type or a pointer to one"
	params := sig.Params()
	if c.variadic(fd, sig, h, want) {
		return nil, false
	}
	ok := true
	for i := range params.Len() {
		t := params.At(i).Type()
		if p, isPtr := types.Unalias(t).(*types.Pointer); isPtr {
			t = p.Elem()
		}
		switch {
		case isNamed(t, pgxPath, "Tx"):
			c.errorf(c.paramPos(fd, i), "handler %s takes a pgx.Tx (parameter %d), which mode=external does not give: the handler runs with no transaction open, "+
				"because its effect (a payment, an e-mail) is outside the database and cannot be rolled back with one; "+
				"remove the parameter and pass idem.KeyFrom(ctx) to the provider, or use mode=tx for a change to this database", h.Func, i+1)
			ok = false
		case isNamed(t, idemPath, "Outbox"):
			c.errorf(c.paramPos(fd, i), "handler %s takes an *idem.Outbox, which mode=external does not support: outgoing messages are written in the handler's transaction, and only mode=tx (the default) gives it one", h.Func)
			ok = false
		}
	}
	if !ok {
		return nil, false
	}
	if params.Len() != 2 {
		c.errorf(c.pos(fd.Type), "handler %s has %d parameters; %s", h.Func, params.Len(), want)
		return nil, false
	}
	if !isNamed(params.At(0).Type(), "context", "Context") {
		c.errorf(c.paramPos(fd, 0), "the first parameter of handler %s must be context.Context, not %s: the wrapper cancels it when the claim is lost, and idem.KeyFrom reads the idempotency key from it",
			h.Func, c.typeString(params.At(0).Type()))
	}
	return c.resultAndMessage(fd, sig, h, 1, want)
}

// variadic reports a variadic handler.
func (c *checker) variadic(fd *ast.FuncDecl, sig *types.Signature, h *model.Handler, want string) bool {
	if !sig.Variadic() {
		return false
	}
	params := sig.Params()
	last := params.At(params.Len() - 1)
	c.errorf(c.paramPos(fd, params.Len()-1), "handler %s is variadic (its last parameter %s is ...%s): one delivery is one message; %s",
		h.Func, last.Name(), c.typeString(last.Type().(*types.Slice).Elem()), want)
	return true
}

// resultAndMessage checks the results and the message, parameter msgAt, of
// either form, and returns the message's struct type.
func (c *checker) resultAndMessage(fd *ast.FuncDecl, sig *types.Signature, h *model.Handler, msgAt int, want string) (types.Type, bool) {
	params, results := sig.Params(), sig.Results()
	mt := params.At(msgAt).Type()
	if s, ok := types.Unalias(mt).(*types.Slice); ok {
		// A set-based handler: it takes the whole batch, msgs []M, and
		// returns one R a message.
		mt, h.Set = s.Elem(), true
	}
	errorType := types.Universe.Lookup("error").Type()
	switch {
	case results.Len() == 1 && types.Identical(results.At(0).Type(), errorType):
	case results.Len() == 2 && types.Identical(results.At(1).Type(), errorType):
		r := results.At(0).Type()
		rpos := c.pos(fd.Type.Results.List[0].Type)
		if h.Set {
			rs, ok := types.Unalias(r).(*types.Slice)
			if !ok {
				c.errorf(rpos, "the set-based handler %s (its message parameter is a slice) returns %s; want []R and error, one result a message in the order of msgs, or error alone",
					h.Func, c.typeString(r))
				break
			}
			r = rs.Elem()
		}
		if shape, problem := jsonShape(r, true, c.qualifier); problem != "" {
			c.errorf(rpos, "the result type %s of handler %s cannot be stored and replayed: %s", c.typeString(r), h.Func, problem)
		} else if t, ok := c.modelType(r, c.resultPos(fd)); ok {
			h.Result, h.ResultShape, h.ResultPos = &t, shape, rpos
		}
	default:
		c.errorf(c.resultPos(fd), "handler %s must return (R, error) or error; %s", h.Func, want)
	}

	named := mt
	if p, ok := mt.(*types.Pointer); ok {
		named = p.Elem()
	}
	n, isNamedType := types.Unalias(named).(*types.Named)
	_, isStruct := named.Underlying().(*types.Struct)
	mpos := c.paramPos(fd, msgAt)
	switch {
	case !isNamedType || !isStruct:
		c.errorf(mpos, "the message parameter of handler %s has type %s; want a named struct type or a pointer to one (or a slice of one, for a set-based handler)", h.Func, c.typeString(params.At(msgAt).Type()))
		return nil, false
	case isNamed(n, idemPath, "Message"), isNamed(n, idemPath, "Request"):
		if !c.envelopeBody(n, mpos, h) {
			return nil, false
		}
		h.Envelope, h.Request = true, isNamed(n, idemPath, "Request")
	case n.TypeParams().Len() > 0 || n.TypeArgs().Len() > 0:
		c.errorf(mpos, "the message type %s of handler %s is generic; use a plain named struct type, or idem.Message[T] or idem.Request[T] (the generic message types idemgen accepts)", c.typeString(mt), h.Func)
		return nil, false
	}
	if h.Envelope {
		// The fingerprint of an idem.Message (ID and Body) or an
		// idem.Request (Key, Client and Body) is the canonical encoding;
		// the body's IdemFingerprint is not consulted.
		if problem := jsonProblem(named, false, c.qualifier); problem != "" {
			c.errorf(mpos, "the message type %s of handler %s cannot be fingerprinted: %s", c.typeString(mt), h.Func, problem)
		}
	} else if !hasMethod(named, "IdemFingerprint") {
		if problem := jsonProblem(named, false, c.qualifier); problem != "" {
			c.errorf(mpos, "the message type %s of handler %s cannot be fingerprinted: %s (or give it an IdemFingerprint method, see idem.Fingerprinter)",
				c.typeString(mt), h.Func, problem)
		}
	}
	t, ok := c.modelType(mt, mpos)
	if !ok {
		return nil, false
	}
	h.Msg = t
	return named, true
}

// outbox finds the handler's *idem.Outbox parameter, if it has one, and
// records it in h. It must be the third of four, right after tx and before
// the message: a parameter of type idem.Outbox (not a pointer), an outbox
// anywhere else or a second one is reported, and false returned.
func (c *checker) outbox(fd *ast.FuncDecl, sig *types.Signature, h *model.Handler) bool {
	const form = "func(ctx context.Context, tx pgx.Tx, out *idem.Outbox, msg M)"
	params := sig.Params()
	ok, seen := true, false
	for i := range params.Len() {
		t := params.At(i).Type()
		pointer := false
		if p, isPtr := types.Unalias(t).(*types.Pointer); isPtr {
			t, pointer = p.Elem(), true
		}
		if !isNamed(t, idemPath, "Outbox") {
			continue
		}
		pos := c.paramPos(fd, i)
		switch {
		case seen:
			c.errorf(pos, "handler %s takes a second outbox (parameter %d); one *idem.Outbox takes all the messages of a run", h.Func, i+1)
		case !pointer:
			c.errorf(pos, "parameter %d of handler %s is an idem.Outbox, not a pointer; want out *idem.Outbox: every run gets its own outbox, whose messages the wrapper writes at the commit", i+1, h.Func)
		case i != 2:
			c.errorf(pos, "the *idem.Outbox of handler %s is its parameter %d; it must come right after tx: %s", h.Func, i+1, form)
		case params.Len() != 4:
			c.errorf(pos, "handler %s has %d parameters after its *idem.Outbox; want one, the message: %s", h.Func, params.Len()-3, form)
		default:
			h.Outbox = true
		}
		ok = ok && h.Outbox
		seen = true
	}
	return ok
}

// paramPos is the position of the i-th parameter's name, or of its type
// when it has none.
func (c *checker) paramPos(fd *ast.FuncDecl, i int) diag.Pos {
	n := 0
	for _, field := range fd.Type.Params.List {
		names := max(len(field.Names), 1)
		if i < n+names {
			if len(field.Names) > 0 {
				return c.pos(field.Names[i-n])
			}
			return c.pos(field.Type)
		}
		n += names
	}
	return c.pos(fd.Type)
}

// resultPos is the position of the results, or of the signature when there
// are none.
func (c *checker) resultPos(fd *ast.FuncDecl) diag.Pos {
	if fd.Type.Results != nil {
		return c.pos(fd.Type.Results)
	}
	return c.pos(fd.Type)
}

// envelopeBody checks the body type T of the message type idem.Message[T]
// or idem.Request[T]: a named struct type or a pointer to one, itself not
// generic.
func (c *checker) envelopeBody(n *types.Named, pos diag.Pos, h *model.Handler) bool {
	body := n.TypeArgs().At(0)
	elem := body
	if p, ok := types.Unalias(body).(*types.Pointer); ok {
		elem = p.Elem()
	}
	bn, isNamedType := types.Unalias(elem).(*types.Named)
	_, isStruct := elem.Underlying().(*types.Struct)
	switch {
	case !isNamedType || !isStruct:
		c.errorf(pos, "the message type %s of handler %s has the body type %s; want %s[T] with T a named struct type or a pointer to one",
			c.typeString(n), h.Func, c.typeString(body), "idem."+n.Obj().Name())
		return false
	case bn.TypeArgs().Len() > 0:
		c.errorf(pos, "the body type %s of the message type %s of handler %s is generic; use a plain named struct type",
			c.typeString(body), c.typeString(n), h.Func)
		return false
	}
	return true
}
