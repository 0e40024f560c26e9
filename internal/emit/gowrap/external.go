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

	f.Comment(gocode.Doc(fmt.Sprintf(
		"%s delivers %s messages to %s at most once per key (%s) for the consumer %q, whose effect is outside the database (mode=external): "+
			"it claims the key in the table %s with a lease of %s, calls the handler with no transaction open and the key's idempotency key in its context "+
			"(idem.KeyFrom), which the handler passes to its provider, and records the key done with the result only while the claim is still its own. "+
			"A redelivered message gets the stored result back without running the handler again. Build it with %s.",
		n.Wrapper, gocode.MessageName(h, e.Pkg.Path), gocode.HandlerName(h), gocode.KeyPaths(h), h.Consumer, h.Table, lease, n.Constructor)))
	f.Comment("//")
	f.Comment(gocode.Doc(fmt.Sprintf(
		"Its methods are those of the idemimpl.ExternalInbox it embeds%s: Handle and Deliver (idem.Handler), "+
			"Purge (rows that are not running and older than the retention of %s; the provider must keep idempotency keys at least as long), "+
			"Sweep (releases the claims whose lease expired, their worker gone, and reports the stuck ones) "+
			"and Maintenance (idem.Maintained, for an idem.Janitor). Ack a message exactly when its error is nil.",
		e.handleNote(), gocode.DurationText(h.Retain))))
	f.Type().Id(n.Wrapper).Struct(
		jen.Op("*").Qual(gocode.ImplPkg, "ExternalInbox").Types(msg, e.resultType()),
	)
	f.Line()

	f.Comment(gocode.Doc(fmt.Sprintf(
		"%s returns the idempotent wrapper of %s. db must reach the database that holds %s; "+
			"opts choose the lease (idem.WithLease, instead of the directive's %s) and the attempts above which Sweep reports a claim as stuck (idem.WithStuckAttempts).",
		n.Constructor, gocode.HandlerName(h), h.Table, lease)))
	params, handler := e.handlerRef()
	if h.Result == nil {
		handler = jen.Qual(gocode.ImplPkg, "NoResultExternal").Call(handler)
	}
	e.constructor(f, params, "NewExternalInbox", jen.Id("db"), jen.Id(n.TableVar), handler)

	duplicate := "returns idem.Duplicate"
	if h.Result != nil {
		duplicate = "returns the stored result as idem.Duplicate"
	}
	e.handle(f, "ExternalInbox", fmt.Sprintf(
		"Handle claims the key of msg, runs %s with idem.KeyFrom(ctx) as the idempotency key to pass to the provider, "+
			"extends the claim every third of its lease while the handler runs (cancelling ctx with idem.ErrClaimLost once the claim is lost), "+
			"and records the key done; when the key was processed before, it %s without running the handler. "+
			"A live claim of another worker is idem.ErrInProgress at once; a handler error releases the claim for the retry; "+
			"a claim lost while the handler ran is idem.ErrClaimLost, its result discarded. Ack the message exactly when err is nil.",
		h.Func, duplicate),
		jen.Qual(gocode.IdemPkg, "Maintained"))

	e.externalTable(f)
	f.Line()
	e.keyFunc(f)
}

func (e emitter) externalTable(f *jen.File) {
	h, n := e.H, e.N
	f.Comment(gocode.Doc(fmt.Sprintf("%s is the claims table of the consumer %q (mode=external, lease %s).", n.TableVar, h.Consumer, gocode.DurationText(h.Lease))))
	pairs := []any{
		"Consumer", jen.Lit(h.Consumer),
		"Name", jen.Lit(inboxsql.TableName(h.Table)),
		"Columns", e.columns(nil),
		"Key", jen.Id(n.KeyFunc),
		"Retain", gocode.Duration(h.Retain),
		"Lease", gocode.Duration(h.Lease),
	}
	f.Var().Id(n.TableVar).Op("=").Qual(gocode.ImplPkg, "ExternalTable").Types(gocode.Type(h.Msg)).Values(fieldList(pairs...)...)
}
