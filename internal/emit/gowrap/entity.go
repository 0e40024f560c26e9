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
		f.Comment(gocode.Doc(doc))
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

// handleNote is what the wrapper's doc says of its Handle: nothing for a
// handler with a result, whose Handle is the embedded type's.
func (e emitter) handleNote() string {
	if e.H.Result != nil {
		return ""
	}
	return " (Handle, written out below, returns only the outcome and the error, the handler having no result)"
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
	constraint := "the unique constraint over (" + strings.Join(ent.Columns, ", ") + ")"
	if ent.Constraint != "" {
		constraint = "the constraint " + ent.Constraint
	}
	f.Comment(gocode.Doc(fmt.Sprintf(
		"%s delivers %s messages to %s at most once per key (%s) for the consumer %q, whose marker is the row the handler inserts (mode=entity): "+
			"it begins the transaction with the message's fingerprint in the setting %s, which the default of %s.%s records in the handler's own INSERT, "+
			"and a unique violation of %s of %s means the key was processed before. There is no inbox table: "+
			"a deleted or re-keyed row of %s forgets its message. Build it with %s.",
		n.Wrapper, gocode.MessageName(h, e.Pkg.Path), gocode.HandlerName(h), gocode.KeyPaths(h), h.Consumer,
		inboxsql.FingerprintSetting, ent.Table, inboxsql.FingerprintColumn, constraint, ent.Table, ent.Table, n.Constructor)))
	f.Comment("//")
	f.Comment(gocode.Doc(fmt.Sprintf(
		"Its methods are those of the idemimpl.EntityInbox it embeds%s: Handle and Deliver (idem.Handler). "+
			"Ack a message exactly when its error is nil.", e.handleNote())))
	f.Type().Id(n.Wrapper).Struct(
		jen.Op("*").Qual(gocode.ImplPkg, "EntityInbox").Types(gocode.Type(h.Msg), e.resultType()),
	)
	f.Line()

	holds := ent.Table
	if h.Outbox {
		holds += " and idem_outbox"
	}
	f.Comment(gocode.Doc(fmt.Sprintf(
		"%s returns the idempotent wrapper of %s. db must reach the database that holds %s; "+
			"opts choose the isolation level (idem.WithIsolation).", n.Constructor, gocode.HandlerName(h), holds)))
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

	duplicate := "idem.Duplicate"
	if h.Result != nil {
		duplicate = fmt.Sprintf("idem.Duplicate with the result %s reads back", ent.Result)
	}
	e.handle(f, "EntityInbox", fmt.Sprintf(
		"Handle runs %s for msg in a transaction begun with the fingerprint of msg and commits it once the row of its key is in %s with that fingerprint. "+
			"When the handler's insert violates %s, the row's fingerprint decides, read after the rollback: the same message is %s, "+
			"another one with the key idem.ErrKeyReused. Any other error, another unique violation included, is the handler's; nothing was committed. "+
			"Ack the message exactly when err is nil.", h.Func, ent.Table, constraint, duplicate))

	f.Comment(gocode.Doc(fmt.Sprintf("%s is the business table of the consumer %q (mode=entity), whose rows are its markers.", n.TableVar, h.Consumer)))
	pairs := []any{
		"Consumer", jen.Lit(h.Consumer),
		"Name", jen.Lit(inboxsql.TableName(ent.Table)),
		"Columns", e.columns(ent.Columns),
	}
	if ent.Constraint != "" {
		pairs = append(pairs, "Constraint", jen.Lit(ent.Constraint))
	}
	pairs = append(pairs, "Key", jen.Id(n.KeyFunc))
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
	f.Comment(gocode.Doc(fmt.Sprintf(
		"%s delivers %s messages to %s for the consumer %q, whose handler is idempotent by construction (mode=natural): "+
			"nothing records a message, and every delivery, a redelivery included, runs the handler in a transaction of its own, "+
			"retried on serialization failures and deadlocks. %s proves that running it again leaves its state as one run did. Build it with %s.",
		n.Wrapper, gocode.MessageName(h, e.Pkg.Path), gocode.HandlerName(h), h.Consumer, n.Test, n.Constructor)))
	f.Comment("//")
	f.Comment(gocode.Doc(fmt.Sprintf(
		"Its methods are those of the idemimpl.NaturalInbox it embeds%s: Handle and Deliver (idem.Handler). "+
			"Ack a message exactly when its error is nil.", e.handleNote())))
	f.Type().Id(n.Wrapper).Struct(
		jen.Op("*").Qual(gocode.ImplPkg, "NaturalInbox").Types(gocode.Type(h.Msg), e.resultType()),
	)
	f.Line()

	f.Comment(gocode.Doc(fmt.Sprintf(
		"%s returns the wrapper of %s. db must reach the database that holds the handler's tables; "+
			"opts choose the isolation level (idem.WithIsolation).", n.Constructor, gocode.HandlerName(h))))
	params, handler := e.handlerRef()
	if h.Result == nil {
		handler = jen.Qual(gocode.ImplPkg, "NoResult").Call(handler)
	}
	e.constructor(f, params, "NewNaturalInbox", jen.Id("db"), jen.Id(n.TableVar), handler)

	e.handle(f, "NaturalInbox", fmt.Sprintf(
		"Handle runs %s for msg in a transaction and commits it: always idem.Processed, since nothing tells a redelivery from a first delivery. "+
			"A serialization failure or deadlock is retried (idemimpl.NaturalAttempts runs in all) and then returned as retryable. "+
			"Ack the message exactly when err is nil.", h.Func))

	var fields []jen.Code
	for _, k := range h.Key {
		fields = append(fields, jen.Lit(k.Path))
	}
	f.Comment(gocode.Doc(fmt.Sprintf("%s describes the consumer %q (mode=natural): its key is only validated and named in errors.", n.TableVar, h.Consumer)))
	f.Var().Id(n.TableVar).Op("=").Qual(gocode.ImplPkg, "NaturalTable").Types(gocode.Type(h.Msg)).Values(fieldList(
		"Consumer", jen.Lit(h.Consumer),
		"KeyFields", e.Fit(len("\tKeyFields: "), func(multi bool) jen.Code { return jen.Index().String().Values(gocode.Items(multi, fields...)...) }),
		"Key", jen.Id(n.KeyFunc),
	)...)
	f.Line()
	e.keyFunc(f)
}
