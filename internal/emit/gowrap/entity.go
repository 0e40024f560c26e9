package gowrap

import (
	"fmt"
	"strings"

	"github.com/dave/jennifer/jen"

	"github.com/idemgen/idemgen/internal/emit/gocode"
	"github.com/idemgen/idemgen/internal/emit/inboxsql"
	"github.com/idemgen/idemgen/internal/model"
)

// handlerRef returns the constructor's parameters up to the receiver and the
// expression of the handler (a method value, or the function).
func (e emitter) handlerRef() ([]jen.Code, *jen.Statement) {
	h := e.H
	params := []jen.Code{jen.Id("db").Qual(gocode.IdemPkg, "DB")}
	handler := jen.Id(h.Func)
	if h.Recv != nil {
		recv := gocode.ReceiverName(h.Recv.Type)
		recvType := jen.Id(h.Recv.Type)
		if h.Recv.Pointer {
			recvType = jen.Op("*").Id(h.Recv.Type)
		}
		params = append(params, jen.Id(recv).Add(recvType))
		handler = jen.Id(recv).Dot(h.Func)
	}
	return params, handler
}

// constructor writes the wrapper's constructor: params, then opts, and a
// body that returns the wrapper around idem.<newInbox>(args..., opts...).
func (e emitter) constructor(f *jen.File, params []jen.Code, newInbox string, args ...jen.Code) {
	n := e.N
	params = append(params, jen.Id("opts").Op("...").Qual(gocode.IdemPkg, "Option"))
	args = append(args, jen.Id("opts").Op("..."))
	sig := func(multi bool) *jen.Statement {
		return jen.Func().Id(n.Constructor).Params(gocode.Items(multi, params...)...).Op("*").Id(n.Wrapper)
	}
	f.Add(sig(e.Long(len(" {"), sig(false))).Block(
		e.Fit(1, func(multi bool) jen.Code {
			return jen.Return(jen.Op("&").Id(n.Wrapper).Values(jen.Qual(gocode.ImplPkg, newInbox).Call(gocode.Items(multi, args...)...)))
		}),
	))
	f.Line()
}

// handle writes Handle for a handler without a result, which returns the
// outcome and the error of the embedded runtime type's Handle (a handler
// with a result has that Handle itself), and the assertions that the
// wrapper implements idem.Handler and the interfaces in more.
func (e emitter) handle(f *jen.File, embedded, doc string, more ...jen.Code) {
	h, n := e.H, e.N
	if h.Result == nil {
		recv := jen.Id("w").Op("*").Id(n.Wrapper)
		params := []jen.Code{jen.Id("ctx").Qual("context", "Context"), jen.Id("msg").Add(gocode.Type(h.Msg))}
		results := []jen.Code{jen.Qual(gocode.IdemPkg, "Outcome"), jen.Error()}
		f.Comment(gocode.ShortDoc(doc, "Handle delivers msg. Ack the message exactly when err is nil."))
		sig := func(multi bool) *jen.Statement {
			return jen.Func().Params(recv).Id("Handle").Params(gocode.Items(multi, params...)...).Params(results...)
		}
		f.Add(sig(e.Long(len(" {"), sig(false))).Block(
			jen.List(jen.Id("_"), jen.Id("outcome"), jen.Err()).Op(":=").Id("w").Dot(embedded).Dot("Handle").Call(jen.Id("ctx"), jen.Id("msg")),
			jen.Return(jen.Id("outcome"), jen.Err()),
		))
		f.Line()
	}
	ifaces := append([]jen.Code{jen.Qual(gocode.IdemPkg, "Handler").Types(gocode.Type(h.Msg))}, more...)
	var defs []jen.Code
	for _, iface := range ifaces {
		defs = append(defs, jen.Id("_").Add(iface).Op("=").Parens(jen.Op("*").Id(n.Wrapper)).Parens(jen.Nil()))
	}
	f.Var().Defs(defs...)
	f.Line()
}

func (e emitter) resultType() jen.Code {
	if e.H.Result != nil {
		return gocode.Type(*e.H.Result)
	}
	return jen.Qual(gocode.IdemPkg, "None")
}

// entityWrapper writes the wrapper of a mode=entity handler, around an
// idemimpl.EntityInbox.
func (e emitter) entityWrapper(f *jen.File) {
	h, n, ent := e.H, e.N, e.H.Entity
	var extra []string
	if h.Outbox {
		extra = append(extra, "publishing through idem_outbox")
	}
	f.Comment(e.wrapperDoc("marked by its row in "+ent.Table, "EntityInbox", extra...))
	f.Type().Id(n.Wrapper).Struct(
		jen.Op("*").Qual(gocode.ImplPkg, "EntityInbox").Types(gocode.Type(h.Msg), e.resultType()),
	)
	f.Line()

	holds := ent.Table
	if h.Outbox {
		holds += ", idem_outbox"
	}
	f.Comment(e.constructorDoc(holds))
	params, handler := e.handlerRef()
	newInbox, noResult := "NewEntityInbox", "NoResult"
	if h.Outbox {
		newInbox, noResult = "NewPublishingEntityInbox", "NoResultPublishing"
	}
	var result jen.Code = jen.Nil()
	if h.Result == nil {
		handler = jen.Qual(gocode.ImplPkg, noResult).Call(handler)
	} else {
		// result= takes the key parts; the runtime hands it the message.
		var args []jen.Code
		args = append(args, jen.Id("ctx"), jen.Id("tx"))
		for _, k := range h.Key {
			args = append(args, jen.Id("msg."+strings.Join(hopFields(k.Hops), ".")))
		}
		params := []jen.Code{jen.Id("ctx").Qual("context", "Context"), jen.Id("tx").Qual(gocode.PgxPkg, "Tx"), jen.Id("msg").Add(gocode.Type(h.Msg))}
		sig := func(multi bool) *jen.Statement {
			return jen.Func().Params(gocode.Items(multi, params...)...).Params(gocode.Type(*h.Result), jen.Error())
		}
		result = sig(e.Long(len("\t\t {"), sig(false))).Block(
			e.Fit(3, func(multi bool) jen.Code { return jen.Return(jen.Id(ent.Result).Call(gocode.Items(multi, args...)...)) }),
		)
	}
	e.constructor(f, params, newInbox, jen.Id("db"), jen.Id(n.TableVar), handler, result)

	e.handle(f, "EntityInbox", fmt.Sprintf(
		"Handle runs %s for msg, or returns idem.Duplicate when its insert collides with the row of a key processed before. "+
			"Ack the message exactly when err is nil.", h.Func))

	f.Comment(gocode.ShortDoc(fmt.Sprintf("%s is the business table of the consumer %q (mode=entity), whose rows are its markers.", n.TableVar, h.Consumer)))
	pairs := []any{
		"Consumer", jen.Lit(h.Consumer),
		"Name", jen.Lit(inboxsql.TableName(ent.Table)),
		"Columns", e.columns(ent.Columns),
	}
	if ent.Constraint != "" {
		pairs = append(pairs, "Constraint", jen.Lit(ent.Constraint))
	}
	pairs = append(pairs, "Key", jen.Id(n.KeyFunc))
	pairs = append(pairs, e.migrations()...)
	f.Var().Id(n.TableVar).Op("=").Qual(gocode.ImplPkg, "EntityTable").Types(gocode.Type(h.Msg)).Values(fieldList(pairs...)...)
	f.Line()
	e.keyFunc(f)
}

func hopFields(hops []model.Hop) []string {
	var fields []string
	for _, hop := range hops {
		fields = append(fields, hop.Field)
	}
	return fields
}

// naturalWrapper writes the wrapper of a mode=natural handler, around an
// idemimpl.NaturalInbox.
func (e emitter) naturalWrapper(f *jen.File) {
	h, n := e.H, e.N
	tail := " It embeds idemimpl.NaturalInbox; call Check at start-up."
	runs := fmt.Sprintf("%s runs %s for the consumer %q", n.Wrapper, gocode.HandlerName(h), h.Consumer)
	f.Comment(gocode.ShortDoc(
		runs+fmt.Sprintf(", idempotent by construction (mode=natural, proven by %s), recording nothing.", n.Test)+tail,
		runs+", idempotent by construction (mode=natural)."+tail,
		runs+" (mode=natural)."))
	f.Type().Id(n.Wrapper).Struct(
		jen.Op("*").Qual(gocode.ImplPkg, "NaturalInbox").Types(gocode.Type(h.Msg), e.resultType()),
	)
	f.Line()

	f.Comment(gocode.ShortDoc(
		fmt.Sprintf("%s returns the wrapper of %s. db must reach the database that holds the handler's tables.", n.Constructor, gocode.HandlerName(h)),
		fmt.Sprintf("%s returns the wrapper of %s.", n.Constructor, gocode.HandlerName(h))))
	params, handler := e.handlerRef()
	if h.Result == nil {
		handler = jen.Qual(gocode.ImplPkg, "NoResult").Call(handler)
	}
	e.constructor(f, params, "NewNaturalInbox", jen.Id("db"), jen.Id(n.TableVar), handler)

	e.handle(f, "NaturalInbox", fmt.Sprintf(
		"Handle runs %s for msg in a transaction, retried on serialization failures and deadlocks. "+
			"Ack the message exactly when err is nil.", h.Func))

	var fields []jen.Code
	for _, k := range h.Key {
		fields = append(fields, jen.Lit(k.Path))
	}
	f.Comment(gocode.ShortDoc(fmt.Sprintf("%s describes the consumer %q (mode=natural): its key is only validated and named in errors.", n.TableVar, h.Consumer)))
	f.Var().Id(n.TableVar).Op("=").Qual(gocode.ImplPkg, "NaturalTable").Types(gocode.Type(h.Msg)).Values(fieldList(
		"Consumer", jen.Lit(h.Consumer),
		"KeyFields", e.Fit(len("\tKeyFields: "), func(multi bool) jen.Code { return jen.Index().String().Values(gocode.Items(multi, fields...)...) }),
		"Key", jen.Id(n.KeyFunc),
	)...)
	f.Line()
	e.keyFunc(f)
}
