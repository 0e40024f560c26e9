// Package gowrap emits idem_gen.go: for each handler of a package, the
// wrapper type, its constructor and methods, the inbox table description
// (idem.Table, or idem.ExternalTable for a mode=external handler) and the key
// function. The protocol itself is the idem runtime's; what is emitted
// is only what is specific to one handler.
package gowrap

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/dave/jennifer/jen"

	"github.com/idemgen/idemgen/internal/emit/gocode"
	"github.com/idemgen/idemgen/internal/emit/inboxsql"
	"github.com/idemgen/idemgen/internal/model"
)

// File renders idem_gen.go for pkg, which has at least one handler: the line
// that names the runtime contract it is written for, then each handler's code.
func File(pkg model.Package) ([]byte, error) {
	return gocode.File(pkg, model.WrapperFile, gocode.Contract, func(f *jen.File, e gocode.Emitter) {
		emitter{e}.wrapper(f)
	})
}

// emitter writes the wrapper of one handler.
type emitter struct{ gocode.Emitter }

func (e emitter) wrapper(f *jen.File) {
	switch {
	case e.H.External():
		e.externalWrapper(f)
		return
	case e.H.EntityMode():
		e.entityWrapper(f)
		return
	case e.H.Natural():
		e.naturalWrapper(f)
		return
	}
	h, n := e.H, e.N
	msg := gocode.Type(h.Msg)
	var result jen.Code = jen.Qual(gocode.IdemPkg, "None")
	if h.Result != nil {
		result = gocode.Type(*h.Result)
	}

	publishes := ""
	if h.Outbox {
		publishes = "The handler publishes through the outbox: the messages it gives to its *idem.Outbox are written to idem_outbox " +
			"in the same commit, with ids derived from the consumer and the key, or not at all; an idem.Relay delivers them. "
	}
	f.Comment(gocode.Doc(fmt.Sprintf(
		"%s delivers %s messages to %s at most once per key (%s) for the consumer %q: "+
			"the handler's writes commit together with the key's row in the inbox table %s, "+
			"and a redelivered message gets the stored result back without running the handler again. "+
			"%sBuild it with %s.",
		n.Wrapper, gocode.MessageName(h, e.Pkg.Path), gocode.HandlerName(e.H), gocode.KeyPaths(e.H), h.Consumer, h.Table, publishes, n.Constructor)))
	f.Type().Id(n.Wrapper).Struct(
		jen.Id("inbox").Op("*").Qual(gocode.IdemPkg, "Inbox").Types(msg, result),
	)
	f.Line()

	holds, notify := h.Table, ""
	if h.Outbox {
		holds = h.Table + ", idem_outbox"
		notify = ", and whether its commits NOTIFY the relays (idem.WithoutNotify)"
	}
	f.Comment(gocode.Doc(fmt.Sprintf(
		"%s returns the idempotent wrapper of %s. db must reach the database that holds %s and the handler's own tables; "+
			"opts choose the isolation level (idem.WithIsolation) and how long a concurrent delivery of the same key waits (idem.WithClaimWait)%s.",
		n.Constructor, gocode.HandlerName(e.H), holds, notify)))
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
	newInbox, noResult := "NewInbox", "NoResult"
	if h.Outbox {
		newInbox, noResult = "NewPublishingInbox", "NoResultPublishing"
	}
	if h.Result == nil {
		handler = jen.Qual(gocode.IdemPkg, noResult).Call(handler)
	}
	params = append(params, jen.Id("opts").Op("...").Qual(gocode.IdemPkg, "Option"))
	f.Func().Id(n.Constructor).Params(params...).Op("*").Id(n.Wrapper).Block(
		jen.Return(jen.Op("&").Id(n.Wrapper).Values(jen.Dict{
			jen.Id("inbox"): jen.Qual(gocode.IdemPkg, newInbox).Call(jen.Id("db"), jen.Id(n.TableVar), handler, jen.Id("opts").Op("...")),
		})),
	)
	f.Line()

	duplicate := "returns idem.Duplicate"
	if h.Result != nil {
		duplicate = "returns the stored result as idem.Duplicate"
	}
	e.handleAndDeliver(f, fmt.Sprintf(
		"Handle runs %s for msg in one transaction with the claim of its key, or, when the key was processed before, "+
			"%s without running it. Ack the message exactly when err is nil.",
		h.Func, duplicate))

	e.batchMethods(f, result)

	f.Comment(gocode.Doc(fmt.Sprintf(
		"Purge deletes the rows of %s older than the retention of %s, in batches, and returns how many it deleted. "+
			"Run it periodically.", h.Table, gocode.DurationText(h.Retain))))
	f.Func().Params(jen.Id("w").Op("*").Id(n.Wrapper)).Id("Purge").
		Params(jen.Id("ctx").Qual("context", "Context")).
		Params(jen.Int64(), jen.Error()).
		Block(jen.Return(jen.Id("w").Dot("inbox").Dot("Purge").Call(jen.Id("ctx"))))
	f.Line()

	e.maintenance(f, "purge "+h.Table+" past its retention")

	e.table(f)
	f.Line()
	e.keyFunc(f)
	if h.Guard != nil {
		f.Line()
		e.orderFunc(f)
	}
}

// batchMethods emits HandleBatch and DeliverBatch, and the assertion that
// the wrapper is an idem.BatchHandler.
func (e emitter) batchMethods(f *jen.File, result jen.Code) {
	h, n := e.H, e.N
	msgs := jen.Id("msgs").Index().Add(gocode.Type(h.Msg))
	how := "in one transaction per batch (idem.WithBatchCap messages at most, 100 by default): the keys claimed in one statement, " +
		"the handlers run in order on that transaction, the results stored with its COMMIT"
	if h.Guard != nil || hasNullablePart(h) {
		how = "one transaction per message (its inbox has a stale-message guard or nullable key parts, which batches do not cover)"
	}
	f.Comment(gocode.Doc(fmt.Sprintf(
		"HandleBatch runs %s for msgs %s, and returns one idem.Result per message in input order, each what Handle would return for it. "+
			"A key twice in msgs is processed once; when a handler fails, the batch is rolled back and each message is delivered in a transaction of its own. "+
			"Ack each message exactly when its Err is nil.", h.Func, how)))
	f.Func().Params(jen.Id("w").Op("*").Id(n.Wrapper)).Id("HandleBatch").
		Params(jen.Id("ctx").Qual("context", "Context"), msgs).
		Params(jen.Index().Qual(gocode.IdemPkg, "Result").Types(result), jen.Error()).
		Block(jen.Return(jen.Id("w").Dot("inbox").Dot("HandleBatch").Call(jen.Id("ctx"), jen.Id("msgs"))))
	f.Line()

	f.Comment(gocode.Doc(fmt.Sprintf(
		"DeliverBatch is HandleBatch without the results' values: it makes %s an idem.BatchHandler, the form in which broker adapters "+
			"deliver what their broker hands them at once. Ack each message exactly when its Err is nil.", n.Wrapper)))
	f.Func().Params(jen.Id("w").Op("*").Id(n.Wrapper)).Id("DeliverBatch").
		Params(jen.Id("ctx").Qual("context", "Context"), jen.Id("msgs").Index().Add(gocode.Type(h.Msg))).
		Index().Qual(gocode.IdemPkg, "Result").Types(jen.Qual(gocode.IdemPkg, "None")).
		Block(jen.Return(jen.Id("w").Dot("inbox").Dot("DeliverBatch").Call(jen.Id("ctx"), jen.Id("msgs"))))
	f.Line()
	f.Var().Id("_").Qual(gocode.IdemPkg, "BatchHandler").Types(gocode.Type(h.Msg)).Op("=").Parens(jen.Op("*").Id(n.Wrapper)).Parens(jen.Nil())
	f.Line()
}

// hasNullablePart reports whether a key part of h can be NULL.
func hasNullablePart(h model.Handler) bool {
	for _, k := range h.Key {
		if k.Null != nil {
			return true
		}
	}
	return false
}

// maintenance emits the Maintenance method, which hands the wrapper's table
// to an idem.Janitor, and the assertion that the wrapper is an
// idem.Maintained.
func (e emitter) maintenance(f *jen.File, what string) {
	n := e.N
	f.Comment(gocode.Doc(fmt.Sprintf(
		"Maintenance returns what an idem.Janitor needs to %s: pass the wrapper to idem.NewJanitor.", what)))
	f.Func().Params(jen.Id("w").Op("*").Id(n.Wrapper)).Id("Maintenance").Params().
		Qual(gocode.IdemPkg, "Maintenance").
		Block(jen.Return(jen.Id("w").Dot("inbox").Dot("Maintenance").Call()))
	f.Line()
	f.Var().Id("_").Qual(gocode.IdemPkg, "Maintained").Op("=").Parens(jen.Op("*").Id(n.Wrapper)).Parens(jen.Nil())
	f.Line()
}

func (e emitter) table(f *jen.File) {
	h, n := e.H, e.N
	st := inboxsql.StatementsFor(h)
	var fields []jen.Code
	for _, k := range h.Key {
		fields = append(fields, jen.Lit(k.Path))
	}
	f.Comment(gocode.Doc(fmt.Sprintf("%s is the inbox of the consumer %q.", n.TableVar, h.Consumer)))
	pairs := []any{
		"Consumer", jen.Lit(h.Consumer),
		"Name", jen.Lit(inboxsql.TableName(h.Table)),
		"KeyFields", jen.Index().String().Values(fields...),
		"Key", jen.Id(n.KeyFunc),
	}
	if h.Guard != nil {
		pairs = append(pairs, "Order", jen.Id(n.OrderFunc))
	}
	pairs = append(pairs,
		"Retain", gocode.Duration(h.Retain),
		"Claim", jen.Lit(st.Claim),
		"Complete", jen.Lit(st.Complete),
		"Lookup", jen.Lit(st.Lookup),
		"Purge", jen.Lit(st.Purge),
	)
	if st.NullComplete != nil {
		pairs = append(pairs,
			"NullComplete", byNulls(st.NullComplete, len(h.Key)),
			"NullLookup", byNulls(st.NullLookup, len(h.Key)),
		)
	}
	if st.BatchClaim != "" {
		pairs = append(pairs,
			"BatchClaim", jen.Lit(st.BatchClaim),
			"BatchLookup", jen.Lit(st.BatchLookup),
			"BatchComplete", jen.Lit(st.BatchComplete),
		)
	}
	f.Var().Id(n.TableVar).Op("=").Qual(gocode.IdemPkg, "Table").Types(gocode.Type(h.Msg)).Values(fieldList(pairs...)...)
}

// byNulls renders statement variants by null pattern, in pattern order, with
// the patterns in binary (bit i: key part i is NULL).
func byNulls(m map[uint64]string, parts int) jen.Code {
	patterns := slices.Sorted(maps.Keys(m))
	var items []jen.Code
	for _, p := range patterns {
		items = append(items, jen.Line().Id(fmt.Sprintf("0b%0*b", parts, p)).Op(":").Lit(m[p]))
	}
	return jen.Map(jen.Uint64()).String().Values(append(items, jen.Line())...)
}

// fieldList lays out name, value pairs of a composite literal one a line, in
// the order given (jen.Dict would sort them).
func fieldList(pairs ...any) []jen.Code {
	var items []jen.Code
	for i := 0; i < len(pairs); i += 2 {
		items = append(items, jen.Line().Id(pairs[i].(string)).Op(":").Add(pairs[i+1].(jen.Code)))
	}
	return append(items, jen.Line())
}
func (e emitter) keyFunc(f *jen.File) {
	h, n := e.H, e.N
	x := &extractor{nils: 2}
	x.messageCheck(h, h.Key[0].Path)
	var values []jen.Code
	for i, k := range h.Key {
		values = append(values, x.part(k, fmt.Sprintf("part%d", i)))
	}
	body := append(x.body, jen.Return(jen.Index().Any().Values(values...), jen.Nil()))

	nulls := ""
	for _, k := range h.Key {
		if k.Null != nil {
			nulls = " (nil for a NULL part)"
		}
	}
	f.Comment(gocode.Doc(fmt.Sprintf("%s returns the key parts of msg in column order%s: %s.", n.KeyFunc, nulls, gocode.KeyPaths(e.H))))
	f.Func().Id(n.KeyFunc).Params(jen.Id("msg").Add(gocode.Type(h.Msg))).Params(jen.Index().Any(), jen.Error()).Block(body...)
}

// orderFunc emits the function that reads the stale-message guard's entity
// and version from a message.
func (e emitter) orderFunc(f *jen.File) {
	h, n, g := e.H, e.N, e.H.Guard
	x := &extractor{nils: 3}
	x.messageCheck(h, g.Entity.Path)
	entity := x.part(g.Entity, "entity")
	version := x.part(g.Version, "version")
	body := append(x.body, jen.Return(entity, version, jen.Nil()))

	f.Comment(gocode.Doc(fmt.Sprintf("%s returns the entity (%s) and the version (%s) of msg for the stale-message guard.", n.OrderFunc, g.Entity.Path, g.Version.Path)))
	f.Func().Id(n.OrderFunc).Params(jen.Id("msg").Add(gocode.Type(h.Msg))).Params(jen.Any(), jen.Int64(), jen.Error()).Block(body...)
}

// extractor builds the body of a function that reads fields of msg: nil
// checks of the pointers on the way, validation, NULL handling.
type extractor struct {
	body    []jen.Code
	checked map[string]bool
	nils    int // results of the function besides the error: nils to return with it
}

func (x *extractor) fail(err jen.Code) jen.Code {
	results := make([]jen.Code, 0, x.nils)
	switch x.nils {
	case 2:
		results = append(results, jen.Nil())
	case 3:
		results = append(results, jen.Nil(), jen.Lit(0))
	}
	return jen.Return(append(results, err)...)
}

func (x *extractor) messageCheck(h model.Handler, first string) {
	if h.Msg.Kind == model.Pointer {
		x.body = append(x.body, jen.If(jen.Id("msg").Op("==").Nil()).Block(
			x.fail(jen.Qual(gocode.IdemPkg, "InvalidKey").Call(jen.Lit(first), jen.Lit("is missing: the message is nil"))),
		))
	}
}

// part emits what reads k and returns the expression of its value; a
// nullable part is read into a variable called name that stays nil for NULL.
func (x *extractor) part(k model.KeyPart, name string) jen.Code {
	if x.checked == nil {
		x.checked = map[string]bool{}
	}
	expr := "msg"
	var shown []string
	for i, hop := range k.Hops {
		expr += "." + hop.Field
		shown = append(shown, hop.Field)
		if i < len(k.Hops)-1 && hop.Pointer && !x.checked[expr] {
			x.checked[expr] = true
			x.body = append(x.body, jen.If(jen.Id(expr).Op("==").Nil()).Block(
				x.fail(jen.Qual(gocode.IdemPkg, "InvalidKey").Call(jen.Lit(k.Path), jen.Lit("is missing: "+strings.Join(shown, ".")+" is nil"))),
			))
		}
	}
	if k.Null == nil {
		value := convert(k, jen.Id(expr))
		x.body = append(x.body, x.check(k, value)...)
		return value
	}

	present, inner := jen.Id(expr).Op("!=").Nil(), jen.Op("*").Id(expr)
	if !k.Null.Pointer {
		present, inner = jen.Id(expr).Dot("Valid"), jen.Id(expr).Dot(k.Null.ValueField)
	}
	value := convert(k, inner)
	block := append(x.check(k, value), jen.Id(name).Op("=").Add(value))
	x.body = append(x.body,
		jen.Var().Id(name).Any().Comment("nil: "+k.Path+" is NULL"),
		jen.If(present).Block(block...),
	)
	return jen.Id(name)
}

// check validates a string, UUID or integer value (an integer may be 0 only
// when the directive says so with zero=).
func (x *extractor) check(k model.KeyPart, value jen.Code) []jen.Code {
	var fn string
	switch {
	case k.Kind == model.KeyString:
		fn = "CheckString"
	case k.Kind == model.KeyUUID:
		fn = "CheckUUID"
	case k.Kind == model.KeyInt && !k.AllowZero:
		fn = "CheckInt"
	default:
		return nil
	}
	return []jen.Code{jen.If(
		jen.Err().Op(":=").Qual(gocode.IdemPkg, fn).Call(jen.Lit(k.Path), value),
		jen.Err().Op("!=").Nil(),
	).Block(x.fail(jen.Err()))}
}

// convert converts a value to the Go type it is sent as.
func convert(k model.KeyPart, value *jen.Statement) jen.Code {
	switch k.GoValue {
	case "":
		return value
	case "[16]byte":
		return jen.Index(jen.Lit(16)).Byte().Parens(value)
	default:
		return jen.Id(k.GoValue).Parens(value)
	}
}
