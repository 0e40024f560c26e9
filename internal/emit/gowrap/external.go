package gowrap

import (
	"fmt"

	"github.com/dave/jennifer/jen"

	"github.com/idemgen/idemgen/internal/emit/gocode"
	"github.com/idemgen/idemgen/internal/emit/inboxsql"
)

// externalWrapper writes the wrapper of a mode=external handler, around an
// idem.ExternalInbox: the same methods as a mode=tx wrapper, and Sweep.
func (e emitter) externalWrapper(f *jen.File) {
	h, n := e.H, e.N
	msg := gocode.Type(h.Msg)
	var result jen.Code = jen.Qual(gocode.IdemPkg, "None")
	if h.Result != nil {
		result = gocode.Type(*h.Result)
	}
	lease := gocode.DurationText(h.Lease)

	f.Comment(gocode.Doc(fmt.Sprintf(
		"%s delivers %s messages to %s at most once per key (%s) for the consumer %q, whose effect is outside the database (mode=external): "+
			"it claims the key in the table %s with a lease of %s, calls the handler with no transaction open and the key's idempotency key in its context "+
			"(idem.KeyFrom), which the handler passes to its provider, and records the key done with the result only while the claim is still its own. "+
			"A redelivered message gets the stored result back without running the handler again. Build it with %s.",
		n.Wrapper, gocode.MessageName(h, e.Pkg.Path), gocode.HandlerName(h), gocode.KeyPaths(h), h.Consumer, h.Table, lease, n.Constructor)))
	f.Type().Id(n.Wrapper).Struct(
		jen.Id("inbox").Op("*").Qual(gocode.IdemPkg, "ExternalInbox").Types(msg, result),
	)
	f.Line()

	f.Comment(gocode.Doc(fmt.Sprintf(
		"%s returns the idempotent wrapper of %s. db must reach the database that holds %s; "+
			"opts choose the lease (idem.WithLease, instead of the directive's %s) and the attempts above which Sweep reports a claim as stuck (idem.WithStuckAttempts).",
		n.Constructor, gocode.HandlerName(h), h.Table, lease)))
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
	if h.Result == nil {
		handler = jen.Qual(gocode.IdemPkg, "NoResultExternal").Call(handler)
	}
	params = append(params, jen.Id("opts").Op("...").Qual(gocode.IdemPkg, "Option"))
	f.Func().Id(n.Constructor).Params(params...).Op("*").Id(n.Wrapper).Block(
		jen.Return(jen.Op("&").Id(n.Wrapper).Values(jen.Dict{
			jen.Id("inbox"): jen.Qual(gocode.IdemPkg, "NewExternalInbox").Call(jen.Id("db"), jen.Id(n.TableVar), handler, jen.Id("opts").Op("...")),
		})),
	)
	f.Line()

	duplicate := "returns idem.Duplicate"
	if h.Result != nil {
		duplicate = "returns the stored result as idem.Duplicate"
	}
	e.handleAndDeliver(f, fmt.Sprintf(
		"Handle claims the key of msg, runs %s with idem.KeyFrom(ctx) as the idempotency key to pass to the provider, "+
			"extends the claim every third of its lease while the handler runs (cancelling ctx with idem.ErrClaimLost once the claim is lost), "+
			"and records the key done; when the key was processed before, it %s without running the handler. "+
			"A live claim of another worker is idem.ErrInProgress at once; a handler error releases the claim for the retry; "+
			"a claim lost while the handler ran is idem.ErrClaimLost, its result discarded. Ack the message exactly when err is nil.",
		h.Func, duplicate))

	f.Comment(gocode.Doc(fmt.Sprintf(
		"Purge deletes the rows of %s that are not running and older than the retention of %s, in batches, and returns how many it deleted. "+
			"Run it periodically; the provider must keep idempotency keys at least as long.", h.Table, gocode.DurationText(h.Retain))))
	f.Func().Params(jen.Id("w").Op("*").Id(n.Wrapper)).Id("Purge").
		Params(jen.Id("ctx").Qual("context", "Context")).
		Params(jen.Int64(), jen.Error()).
		Block(jen.Return(jen.Id("w").Dot("inbox").Dot("Purge").Call(jen.Id("ctx"))))
	f.Line()

	f.Comment(gocode.Doc(fmt.Sprintf(
		"Sweep releases the claims of %s whose lease expired, their worker gone (attempts + 1, so that a job that keeps dying shows its attempts climbing), "+
			"and reports the claims above the stuck threshold (idem.WithStuckAttempts). Run it periodically.", h.Table)))
	f.Func().Params(jen.Id("w").Op("*").Id(n.Wrapper)).Id("Sweep").
		Params(jen.Id("ctx").Qual("context", "Context")).
		Params(jen.Qual(gocode.IdemPkg, "SweepReport"), jen.Error()).
		Block(jen.Return(jen.Id("w").Dot("inbox").Dot("Sweep").Call(jen.Id("ctx"))))
	f.Line()

	e.maintenance(f, "purge "+h.Table+" past its retention and reset its expired claims")

	e.externalTable(f)
	f.Line()
	e.keyFunc(f)
}

func (e emitter) externalTable(f *jen.File) {
	h, n := e.H, e.N
	st := inboxsql.ExternalStatementsFor(h)
	var fields []jen.Code
	for _, k := range h.Key {
		fields = append(fields, jen.Lit(k.Path))
	}
	f.Comment(gocode.Doc(fmt.Sprintf("%s is the claims table of the consumer %q (mode=external, lease %s).", n.TableVar, h.Consumer, gocode.DurationText(h.Lease))))
	pairs := []any{
		"Consumer", jen.Lit(h.Consumer),
		"Name", jen.Lit(inboxsql.TableName(h.Table)),
		"KeyFields", jen.Index().String().Values(fields...),
		"Key", jen.Id(n.KeyFunc),
		"Retain", gocode.Duration(h.Retain),
		"Lease", gocode.Duration(h.Lease),
		"Claim", jen.Lit(st.Claim),
		"Lookup", jen.Lit(st.Lookup),
		"Heartbeat", jen.Lit(st.Heartbeat),
		"Complete", jen.Lit(st.Complete),
		"Release", jen.Lit(st.Release),
		"Sweep", jen.Lit(st.Sweep),
		"Stuck", jen.Lit(st.Stuck),
		"Purge", jen.Lit(st.Purge),
	}
	f.Var().Id(n.TableVar).Op("=").Qual(gocode.IdemPkg, "ExternalTable").Types(gocode.Type(h.Msg)).Values(fieldList(pairs...)...)
}
