// Package gowrap emits idem_gen.go: for each handler of a package, the
// wrapper type, which embeds the runtime's inbox and so has its methods, its
// constructor, the Handle of a handler without a result, the table's
// declaration (idemimpl.Table, idemimpl.ExternalTable, idemimpl.EntityTable or
// idemimpl.NaturalTable: names and key columns, no SQL) and the key function.
// The protocol and its statements are the idem runtime's; what is emitted is
// only what is specific to one handler, no line over gocode.Width columns.
package gowrap

import (
	"fmt"
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

	var extra []string
	if h.Outbox {
		extra = append(extra, "publishing through idem_outbox")
	}
	if p := h.Partition; p != nil {
		extra = append(extra, fmt.Sprintf("partitioned by the %s of %s", p.Bucket, p.Time.Path))
	}
	if h.Set {
		extra = append(extra, "a batch in one call")
	}
	f.Comment(e.wrapperDoc("recorded in "+h.Table, "Inbox", extra...))
	f.Type().Id(n.Wrapper).Struct(
		jen.Op("*").Qual(gocode.ImplPkg, "Inbox").Types(msg, result),
	)
	f.Line()

	holds := h.Table
	if h.Outbox {
		holds += ", idem_outbox"
	}
	f.Comment(e.constructorDoc(holds))
	params, handler := e.handlerRef()
	newInbox, noResult := "NewInbox", "NoResult"
	if h.Outbox {
		newInbox, noResult = "NewPublishingInbox", "NoResultPublishing"
	}
	if h.Set {
		newInbox, noResult = strings.TrimSuffix(newInbox, "Inbox")+"SetInbox", noResult+"Set"
	}
	if h.Result == nil {
		handler = jen.Qual(gocode.ImplPkg, noResult).Call(handler)
	}
	e.constructor(f, params, newInbox, jen.Id("db"), jen.Id(n.TableVar), handler)

	e.handle(f, "Inbox", fmt.Sprintf(
		"Handle runs %s for msg in one transaction with its key's row, or returns idem.Duplicate for a key processed before. "+
			"Ack the message exactly when err is nil.", h.Func),
		jen.Qual(gocode.IdemPkg, "BatchHandler").Types(gocode.Type(h.Msg)),
		jen.Qual(gocode.IdemPkg, "Maintained"))

	e.table(f)
	f.Line()
	e.keyFunc(f)
	if h.Guard != nil {
		f.Line()
		e.orderFunc(f)
	}
}

func (e emitter) table(f *jen.File) {
	h, n := e.H, e.N
	f.Comment(gocode.ShortDoc(fmt.Sprintf("%s is the inbox of the consumer %q.", n.TableVar, h.Consumer)))
	pairs := []any{
		"Consumer", jen.Lit(h.Consumer),
		"Name", jen.Lit(inboxsql.TableName(h.Table)),
		"Columns", e.columns(nil),
		"Key", jen.Id(n.KeyFunc),
	}
	if h.Guard != nil {
		in := inboxsql.Schema(h)
		pairs = append(pairs,
			"Order", jen.Id(n.OrderFunc),
			"Versions", jen.Lit(inboxsql.VersionsTable(in)),
			"EntityType", jen.Lit(in.Guard.Type),
		)
	}
	pairs = append(pairs, "Retain", gocode.Duration(h.Retain))
	if h.Partition != nil {
		pairs = append(pairs, "Partition", gocode.Bucket(h.Partition.Bucket))
	}
	if h.Set {
		pairs = append(pairs, "Handler", jen.Lit(gocode.HandlerName(h)))
	}
	pairs = append(pairs, e.migrations()...)
	f.Var().Id(n.TableVar).Op("=").Qual(gocode.ImplPkg, "Table").Types(gocode.Type(h.Msg)).Values(fieldList(pairs...)...)
}

// columns renders the key's columns (idemimpl.Column, see
// inboxsql.KeyColumns; names are a mode=entity handler's columns): on one
// line when they fit, else one a line, each of them over several lines when
// it does not fit on its own.
func (e emitter) columns(names []string) jen.Code {
	var cols []jen.Code
	long := false
	for _, c := range inboxsql.KeyColumns(e.H, names) {
		fields := []jen.Code{
			jen.Id("Field").Op(":").Lit(c.Field),
			jen.Id("Name").Op(":").Lit(c.Name),
			jen.Id("Type").Op(":").Lit(c.Type),
		}
		if c.Nullable {
			fields = append(fields, jen.Id("Nullable").Op(":").True())
		}
		col := jen.Values(fields...)
		if e.Long(2, jen.Values(fields...).Op(",")) {
			col, long = jen.Values(gocode.Items(true, fields...)...), true
		}
		cols = append(cols, col)
	}
	list := func(multi bool) jen.Code {
		return jen.Index().Qual(gocode.ImplPkg, "Column").Values(gocode.Items(multi, cols...)...)
	}
	if long {
		return list(true)
	}
	return e.Fit(len("\tColumns: "), list)
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
	x := &extractor{e: e, nils: 2}
	x.messageCheck(h, h.Key[0].Path)
	var values []jen.Code
	for i, k := range h.Key {
		values = append(values, x.part(k, fmt.Sprintf("part%d", i)))
	}
	if p := h.Partition; p != nil {
		values = append(values, x.part(p.Time, "at"))
	}
	body := append(x.body, e.Fit(1, func(multi bool) jen.Code {
		return jen.Return(jen.Index().Any().Values(gocode.Items(multi, values...)...), jen.Nil())
	}))

	nulls := ""
	for _, k := range h.Key {
		if k.Null != nil {
			nulls = " (nil for a NULL part)"
		}
	}
	paths := gocode.KeyPaths(e.H)
	if p := h.Partition; p != nil {
		paths += fmt.Sprintf(", then its time %s, which the inbox replaces with the start of its %s (the bucket column)", p.Time.Path, p.Bucket)
	}
	f.Comment(gocode.ShortDoc(
		fmt.Sprintf("%s returns the key parts of msg in column order%s: %s.", n.KeyFunc, nulls, paths),
		fmt.Sprintf("%s returns the key parts of msg in column order.", n.KeyFunc)))
	f.Func().Id(n.KeyFunc).Params(jen.Id("msg").Add(gocode.Type(h.Msg))).Params(jen.Index().Any(), jen.Error()).Block(body...)
}

// orderFunc emits the function that reads the stale-message guard's entity
// and version from a message.
func (e emitter) orderFunc(f *jen.File) {
	h, n, g := e.H, e.N, e.H.Guard
	x := &extractor{e: e, nils: 3}
	x.messageCheck(h, g.Entity.Path)
	entity := x.part(g.Entity, "entity")
	version := x.part(g.Version, "version")
	body := append(x.body, jen.Return(entity, version, jen.Nil()))

	f.Comment(gocode.ShortDoc(
		fmt.Sprintf("%s returns the entity (%s) and the version (%s) of msg for the stale-message guard.", n.OrderFunc, g.Entity.Path, g.Version.Path),
		fmt.Sprintf("%s returns the entity and the version of msg for the stale-message guard.", n.OrderFunc)))
	f.Func().Id(n.OrderFunc).Params(jen.Id("msg").Add(gocode.Type(h.Msg))).Params(jen.Any(), jen.Int64(), jen.Error()).Block(body...)
}

// extractor builds the body of a function that reads fields of msg: nil
// checks of the pointers on the way, validation, NULL handling.
type extractor struct {
	e       emitter
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

// invalid fails, indent tabs in, with the ErrInvalidKey of a part whose path
// is missing.
func (x *extractor) invalid(indent int, path, why string) jen.Code {
	return x.e.Fit(indent, func(multi bool) jen.Code {
		return x.fail(jen.Qual(gocode.ImplPkg, "InvalidKey").Call(gocode.Items(multi, jen.Lit(path), jen.Lit(why))...))
	})
}

func (x *extractor) messageCheck(h model.Handler, first string) {
	if h.Msg.Kind == model.Pointer {
		x.body = append(x.body, jen.If(jen.Id("msg").Op("==").Nil()).Block(
			x.invalid(2, first, "is missing: the message is nil"),
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
				x.invalid(2, k.Path, "is missing: "+strings.Join(shown, ".")+" is nil"),
			))
		}
	}
	if k.Null == nil {
		value := convert(k, jen.Id(expr))
		x.body = append(x.body, x.check(1, k, value)...)
		return value
	}

	present, inner := jen.Id(expr).Op("!=").Nil(), jen.Op("*").Id(expr)
	if !k.Null.Pointer {
		present, inner = jen.Id(expr).Dot("Valid"), jen.Id(expr).Dot(k.Null.ValueField)
	}
	value := convert(k, inner)
	block := append(x.check(2, k, value), jen.Id(name).Op("=").Add(value))
	x.body = append(x.body,
		jen.Var().Id(name).Any().Comment("nil: "+k.Path+" is NULL"),
		jen.If(present).Block(block...),
	)
	return jen.Id(name)
}

// check validates a string, UUID or integer value (an integer may be 0 only
// when the directive says so with zero=), indent tabs in.
func (x *extractor) check(indent int, k model.KeyPart, value jen.Code) []jen.Code {
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
	return []jen.Code{x.e.Fit(indent, func(multi bool) jen.Code {
		return jen.If(
			jen.Err().Op(":=").Qual(gocode.ImplPkg, fn).Call(gocode.Items(multi, jen.Lit(k.Path), value)...),
			jen.Err().Op("!=").Nil(),
		).Block(x.fail(jen.Err()))
	})}
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

// wrapperDoc is the doc comment of a wrapper that embeds idemimpl.<engine>:
// what it does with the handler, how (in the words of the mode), the
// details in extra, and that it has Check. The details, then how, then the
// key's fields are left out, in that order, while the comment would be
// longer than gocode.MaxDocLines lines: what every wrapper does is the
// runtime's documentation (docs/generated.md).
func (e emitter) wrapperDoc(how, engine string, extra ...string) string {
	h, n := e.H, e.N
	tail := fmt.Sprintf(" It embeds idemimpl.%s; call Check at start-up.", engine)
	once := fmt.Sprintf("%s runs %s at most once per key", n.Wrapper, gocode.HandlerName(h))
	var texts []string
	for i := len(extra); i >= 0; i-- {
		details := ""
		if i > 0 {
			details = ", " + strings.Join(extra[:i], ", ")
		}
		texts = append(texts, fmt.Sprintf("%s (%s) for the consumer %q, %s%s.", once, gocode.KeyPaths(h), h.Consumer, how, details)+tail)
	}
	texts = append(texts,
		fmt.Sprintf("%s (%s) for the consumer %q.", once, gocode.KeyPaths(h), h.Consumer)+tail,
		fmt.Sprintf("%s for the consumer %q.", once, h.Consumer)+tail,
		fmt.Sprintf("%s for the consumer %q; call Check at start-up.", once, h.Consumer))
	return gocode.ShortDoc(texts...)
}

// constructorDoc is the doc comment of the wrapper's constructor; holds
// lists idemgen's tables for it. The handler's own tables are added, except
// in mode=external, whose handler gets no transaction.
func (e emitter) constructorDoc(holds string) string {
	n, h := e.N, e.H
	if !h.External() {
		holds += " and the handler's own tables"
	}
	return gocode.ShortDoc(
		fmt.Sprintf("%s returns the wrapper of %s. db must reach the database that holds %s.", n.Constructor, gocode.HandlerName(h), holds),
		fmt.Sprintf("%s returns the wrapper of %s.", n.Constructor, gocode.HandlerName(h)))
}

// migrations are the fields of a table declaration that name the
// migrations that create what the handler needs, for Check.
func (e emitter) migrations() []any {
	var pairs []any
	if e.H.Migration != "" {
		pairs = append(pairs, "Migration", jen.Lit(e.H.Migration))
	}
	if e.H.OutboxMigration != "" {
		pairs = append(pairs, "OutboxMigration", jen.Lit(e.H.OutboxMigration))
	}
	return pairs
}
