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

// handleAndDeliver writes Handle and Deliver, which return what the inner
// inbox's do (without a result, only the outcome and the error).
func (e emitter) handleAndDeliver(f *jen.File, handleDoc string) {
	h, n := e.H, e.N
	call := jen.Id("w").Dot("inbox").Dot("Handle").Call(jen.Id("ctx"), jen.Id("msg"))
	results := []jen.Code{jen.Qual(gocode.IdemPkg, "Outcome"), jen.Error()}
	body := []jen.Code{jen.Return(call)}
	if h.Result != nil {
		results = append([]jen.Code{gocode.Type(*h.Result)}, results...)
	} else {
		body = []jen.Code{
			jen.List(jen.Id("_"), jen.Id("outcome"), jen.Err()).Op(":=").Add(call),
			jen.Return(jen.Id("outcome"), jen.Err()),
		}
	}
	f.Comment(gocode.Doc(handleDoc))
	f.Func().Params(jen.Id("w").Op("*").Id(n.Wrapper)).Id("Handle").
		Params(jen.Id("ctx").Qual("context", "Context"), jen.Id("msg").Add(gocode.Type(h.Msg))).
		Params(results...).
		Block(body...)
	f.Line()

	f.Comment(gocode.Doc(fmt.Sprintf(
		"Deliver is Handle without the result: it makes %s an idem.Handler, the form broker adapters take "+
			"(idem/rabbitmq). Ack the message exactly when err is nil.", n.Wrapper)))
	f.Func().Params(jen.Id("w").Op("*").Id(n.Wrapper)).Id("Deliver").
		Params(jen.Id("ctx").Qual("context", "Context"), jen.Id("msg").Add(gocode.Type(h.Msg))).
		Params(jen.Qual(gocode.IdemPkg, "Outcome"), jen.Error()).
		Block(jen.Return(jen.Id("w").Dot("inbox").Dot("Deliver").Call(jen.Id("ctx"), jen.Id("msg"))))
	f.Line()
	f.Var().Id("_").Qual(gocode.IdemPkg, "Handler").Types(gocode.Type(h.Msg)).Op("=").Parens(jen.Op("*").Id(n.Wrapper)).Parens(jen.Nil())
	f.Line()
}

func (e emitter) resultType() jen.Code {
	if e.H.Result != nil {
		return gocode.Type(*e.H.Result)
	}
	return jen.Qual(gocode.IdemPkg, "None")
}

// entityWrapper writes the wrapper of a mode=entity handler, around an
// idem.EntityInbox.
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
	f.Type().Id(n.Wrapper).Struct(
		jen.Id("inbox").Op("*").Qual(gocode.IdemPkg, "EntityInbox").Types(gocode.Type(h.Msg), e.resultType()),
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
		handler = jen.Qual(gocode.IdemPkg, noResult).Call(handler)
	} else {
		// result= takes the key parts; the runtime hands it the message.
		var args []jen.Code
		args = append(args, jen.Id("ctx"), jen.Id("tx"))
		for _, k := range h.Key {
			args = append(args, jen.Id("msg."+strings.Join(hopFields(k.Hops), ".")))
		}
		result = jen.Func().Params(jen.Id("ctx").Qual("context", "Context"), jen.Id("tx").Qual(gocode.PgxPkg, "Tx"), jen.Id("msg").Add(gocode.Type(h.Msg))).
			Params(gocode.Type(*h.Result), jen.Error()).Block(jen.Return(jen.Id(ent.Result).Call(args...)))
	}
	params = append(params, jen.Id("opts").Op("...").Qual(gocode.IdemPkg, "Option"))
	f.Func().Id(n.Constructor).Params(params...).Op("*").Id(n.Wrapper).Block(
		jen.Return(jen.Op("&").Id(n.Wrapper).Values(jen.Dict{
			jen.Id("inbox"): jen.Qual(gocode.IdemPkg, newInbox).Call(jen.Id("db"), jen.Id(n.TableVar), handler, result, jen.Id("opts").Op("...")),
		})),
	)
	f.Line()

	duplicate := "idem.Duplicate"
	if h.Result != nil {
		duplicate = fmt.Sprintf("idem.Duplicate with the result %s reads back", ent.Result)
	}
	e.handleAndDeliver(f, fmt.Sprintf(
		"Handle runs %s for msg in a transaction begun with the fingerprint of msg and commits it once the row of its key is in %s with that fingerprint. "+
			"When the handler's insert violates %s, the row's fingerprint decides, read after the rollback: the same message is %s, "+
			"another one with the key idem.ErrKeyReused. Any other error, another unique violation included, is the handler's; nothing was committed. "+
			"Ack the message exactly when err is nil.", h.Func, ent.Table, constraint, duplicate))

	st := inboxsql.EntityStatementsFor(h)
	var fields, columns []jen.Code
	for _, k := range h.Key {
		fields = append(fields, jen.Lit(k.Path))
	}
	for _, c := range ent.Columns {
		columns = append(columns, jen.Lit(c))
	}
	f.Comment(gocode.Doc(fmt.Sprintf("%s is the business table of the consumer %q (mode=entity), whose rows are its markers.", n.TableVar, h.Consumer)))
	pairs := []any{
		"Consumer", jen.Lit(h.Consumer),
		"Name", jen.Lit(inboxsql.TableName(ent.Table)),
		"Columns", jen.Index().String().Values(columns...),
	}
	if ent.Constraint != "" {
		pairs = append(pairs, "Constraint", jen.Lit(ent.Constraint))
	}
	pairs = append(pairs,
		"KeyFields", jen.Index().String().Values(fields...),
		"Key", jen.Id(n.KeyFunc),
		"Lookup", jen.Lit(st.Lookup),
		"Check", jen.Lit(st.Check),
	)
	f.Var().Id(n.TableVar).Op("=").Qual(gocode.IdemPkg, "EntityTable").Types(gocode.Type(h.Msg)).Values(fieldList(pairs...)...)
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
// idem.NaturalInbox.
func (e emitter) naturalWrapper(f *jen.File) {
	h, n := e.H, e.N
	f.Comment(gocode.Doc(fmt.Sprintf(
		"%s delivers %s messages to %s for the consumer %q, whose handler is idempotent by construction (mode=natural): "+
			"nothing records a message, and every delivery, a redelivery included, runs the handler in a transaction of its own, "+
			"retried on serialization failures and deadlocks. %s proves that running it again leaves its state as one run did. Build it with %s.",
		n.Wrapper, gocode.MessageName(h, e.Pkg.Path), gocode.HandlerName(h), h.Consumer, n.Test, n.Constructor)))
	f.Type().Id(n.Wrapper).Struct(
		jen.Id("inbox").Op("*").Qual(gocode.IdemPkg, "NaturalInbox").Types(gocode.Type(h.Msg), e.resultType()),
	)
	f.Line()

	f.Comment(gocode.Doc(fmt.Sprintf(
		"%s returns the wrapper of %s. db must reach the database that holds the handler's tables; "+
			"opts choose the isolation level (idem.WithIsolation).", n.Constructor, gocode.HandlerName(h))))
	params, handler := e.handlerRef()
	if h.Result == nil {
		handler = jen.Qual(gocode.IdemPkg, "NoResult").Call(handler)
	}
	params = append(params, jen.Id("opts").Op("...").Qual(gocode.IdemPkg, "Option"))
	f.Func().Id(n.Constructor).Params(params...).Op("*").Id(n.Wrapper).Block(
		jen.Return(jen.Op("&").Id(n.Wrapper).Values(jen.Dict{
			jen.Id("inbox"): jen.Qual(gocode.IdemPkg, "NewNaturalInbox").Call(jen.Id("db"), jen.Id(n.TableVar), handler, jen.Id("opts").Op("...")),
		})),
	)
	f.Line()

	e.handleAndDeliver(f, fmt.Sprintf(
		"Handle runs %s for msg in a transaction and commits it: always idem.Processed, since nothing tells a redelivery from a first delivery. "+
			"A serialization failure or deadlock is retried (idem.NaturalAttempts runs in all) and then returned as retryable. "+
			"Ack the message exactly when err is nil.", h.Func))

	var fields []jen.Code
	for _, k := range h.Key {
		fields = append(fields, jen.Lit(k.Path))
	}
	f.Comment(gocode.Doc(fmt.Sprintf("%s describes the consumer %q (mode=natural): its key is only validated and named in errors.", n.TableVar, h.Consumer)))
	f.Var().Id(n.TableVar).Op("=").Qual(gocode.IdemPkg, "NaturalTable").Types(gocode.Type(h.Msg)).Values(fieldList(
		"Consumer", jen.Lit(h.Consumer),
		"KeyFields", jen.Index().String().Values(fields...),
		"Key", jen.Id(n.KeyFunc),
	)...)
	f.Line()
	e.keyFunc(f)
}
