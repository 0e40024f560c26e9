package gowrap

import (
	"fmt"

	"github.com/dave/jennifer/jen"

	"github.com/idemgen/idemgen/internal/emit/gocode"
	"github.com/idemgen/idemgen/internal/emit/inboxsql"
)

// externalWrapper writes the wrapper of a mode=external handler, around an
// idemimpl.ExternalInbox: the same methods as a mode=tx wrapper, and Sweep.
func (e emitter) externalWrapper(f *jen.File) {
	h, n := e.H, e.N
	msg := gocode.Type(h.Msg)
	lease := gocode.DurationText(h.Lease)

	f.Comment(e.wrapperDoc(fmt.Sprintf("claimed in %s (lease %s)", h.Table, lease), "ExternalInbox",
		"passing idem.KeyFrom(ctx) to its provider"))
	f.Type().Id(n.Wrapper).Struct(
		jen.Op("*").Qual(gocode.ImplPkg, "ExternalInbox").Types(msg, e.resultType()),
	)
	f.Line()

	f.Comment(e.constructorDoc(h.Table))
	params, handler := e.handlerRef()
	if h.Result == nil {
		handler = jen.Qual(gocode.ImplPkg, "NoResultExternal").Call(handler)
	}
	e.constructor(f, params, "NewExternalInbox", jen.Id("db"), jen.Id(n.TableVar), handler)

	e.handle(f, "ExternalInbox", fmt.Sprintf(
		"Handle claims the key of msg and runs %s, or returns idem.Duplicate for a key processed before. "+
			"Ack the message exactly when err is nil.", h.Func),
		jen.Qual(gocode.IdemPkg, "Maintained"))

	e.externalTable(f)
	f.Line()
	e.keyFunc(f)
}

func (e emitter) externalTable(f *jen.File) {
	h, n := e.H, e.N
	f.Comment(gocode.ShortDoc(fmt.Sprintf("%s is the claims table of the consumer %q (mode=external, lease %s).", n.TableVar, h.Consumer, gocode.DurationText(h.Lease))))
	pairs := []any{
		"Consumer", jen.Lit(h.Consumer),
		"Name", jen.Lit(inboxsql.TableName(h.Table)),
		"Columns", e.columns(nil),
		"Key", jen.Id(n.KeyFunc),
		"Retain", gocode.Duration(h.Retain),
		"Lease", gocode.Duration(h.Lease),
	}
	pairs = append(pairs, e.migrations()...)
	f.Var().Id(n.TableVar).Op("=").Qual(gocode.ImplPkg, "ExternalTable").Types(gocode.Type(h.Msg)).Values(fieldList(pairs...)...)
}
