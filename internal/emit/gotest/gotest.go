// Package gotest emits idem_gen_test.go: for each handler of a package, a test
// Test<Func>Idem that runs the scenarios of idemtest.Suite against the
// handler's generated wrapper on a real PostgreSQL. The scenarios themselves
// live once in idemtest, and so does their description: a test's doc is two
// lines. What is emitted is what is specific to one handler: its types, its
// inbox table and migrations, how to build the wrapper, and its fixture or
// the runtime's sample message with what the sample must not hold.
package gotest

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/dave/jennifer/jen"

	"github.com/idemgen/idemgen/internal/emit/gocode"
	"github.com/idemgen/idemgen/internal/model"
)

// File renders idem_gen_test.go for pkg, which has at least one handler.
func File(pkg model.Package) ([]byte, error) {
	return gocode.File(pkg, model.TestFile, nil, func(f *jen.File, e gocode.Emitter) {
		emitter{e}.test(f)
	})
}

// emitter writes the test of one handler.
type emitter struct{ gocode.Emitter }

func (e emitter) test(f *jen.File) {
	switch {
	case e.H.External():
		e.externalTest(f)
		return
	case e.H.EntityMode():
		e.entityTest(f)
		return
	case e.H.Natural():
		e.naturalTest(f)
		return
	}
	h := e.H
	recv, msg, result := e.recvType(), gocode.Type(h.Msg), e.resultType()

	suite := []jen.Code{
		jen.Id("Migrations"), jen.Qual("os", "DirFS").Call(jen.Lit(e.migrationsDir())),
		jen.Id("Inbox"), jen.Lit(h.Table),
		jen.Id("New"), e.newFunc(),
		e.fixtureField(), e.fixture(),
		jen.Id("Batch"), e.batchFunc(),
	}
	if h.Vary != nil {
		suite = append(suite, jen.Id("Variant"), e.variant())
	}
	if h.Set {
		if rekey := e.rekey(); rekey != nil {
			suite = append(suite, jen.Id("Rekey"), rekey)
		}
		suite = append(suite, jen.Id("SetWith"), e.setWith(), jen.Id("Handler"), jen.Lit(gocode.HandlerName(h)))
	}
	if h.Outbox {
		suite = append(suite, jen.Id("Outbox"), jen.Op("&").Qual(gocode.IdemtestPkg, "Outbox").Types(msg).Values(
			jen.Line().Id("Consumer").Op(":").Lit(h.Consumer),
			jen.Line().Id("Key").Op(":").Id(e.N.KeyFunc),
			jen.Line(),
		))
	}
	if h.Partition != nil {
		suite = append(suite, jen.Id("Partition"), e.partition())
	}
	e.doc(f, "Suite")
	f.Func().Id(e.N.Test).Params(jen.Id("t").Op("*").Qual("testing", "T")).Block(
		jen.Qual(gocode.IdemtestPkg, "Suite").Types(recv, msg, result).Values(fieldLines(suite)...).Dot("Run").Call(jen.Id("t")),
	)
}

// fieldLines lays out name, value pairs of a composite literal one a line.
func fieldLines(pairs []jen.Code) []jen.Code {
	var fields []jen.Code
	for i := 0; i < len(pairs); i += 2 {
		fields = append(fields, jen.Line().Add(pairs[i]).Op(":").Add(pairs[i+1]))
	}
	return append(fields, jen.Line())
}

// newFunc builds the wrapper on the scenario's pool:
//
//	func(s *Service, pool *pgxpool.Pool, opts ...idem.Option) idemtest.HandleFunc[M, R] {
//		return NewChargeIdem(pool, s, opts...).Handle
//	}
func (e emitter) newFunc() jen.Code {
	h := e.H
	args := []jen.Code{jen.Id("pool")}
	var recvParam jen.Code
	if h.Recv != nil {
		name := gocode.ReceiverName(h.Recv.Type)
		recvParam = jen.Id(name).Add(e.recvType())
		args = append(args, jen.Id(name))
	} else {
		recvParam = jen.Id("_").Add(e.recvType())
	}
	args = append(args, jen.Id("opts").Op("..."))
	handle := jen.Id(e.N.Constructor).Call(args...).Dot("Handle")
	if h.Result == nil {
		handle = jen.Qual(gocode.IdemtestPkg, "NoResult").Call(handle)
	}
	return e.funcLit([]jen.Code{
		recvParam,
		jen.Id("pool").Op("*").Qual(gocode.PgxpoolPkg, "Pool"),
		jen.Id("opts").Op("...").Qual(gocode.IdemPkg, "Option"),
	}, jen.Qual(gocode.IdemtestPkg, "HandleFunc").Types(gocode.Type(h.Msg), e.resultType()), jen.Return(handle))
}

// funcLit is a function literal in a field of the suite's literal (two tabs
// in, after a field name of up to 8 bytes): its parameters on the line of
// func when they fit, else one a line.
func (e emitter) funcLit(params []jen.Code, result jen.Code, body ...jen.Code) jen.Code {
	sig := func(multi bool) *jen.Statement {
		return jen.Func().Params(gocode.Items(multi, params...)...).Add(result)
	}
	return sig(e.Long(len("\t\tFixture: {"), sig(false))).Block(body...)
}

// batchFunc builds the wrapper's HandleBatch on the scenario's pool, as
// newFunc builds its Handle.
func (e emitter) batchFunc() jen.Code {
	h := e.H
	args := []jen.Code{jen.Id("pool")}
	var recvParam jen.Code
	if h.Recv != nil {
		name := gocode.ReceiverName(h.Recv.Type)
		recvParam = jen.Id(name).Add(e.recvType())
		args = append(args, jen.Id(name))
	} else {
		recvParam = jen.Id("_").Add(e.recvType())
	}
	args = append(args, jen.Id("opts").Op("..."))
	return e.funcLit([]jen.Code{
		recvParam,
		jen.Id("pool").Op("*").Qual(gocode.PgxpoolPkg, "Pool"),
		jen.Id("opts").Op("...").Qual(gocode.IdemPkg, "Option"),
	}, jen.Qual(gocode.IdemtestPkg, "BatchFunc").Types(gocode.Type(h.Msg), e.resultType()),
		jen.Return(jen.Id(e.N.Constructor).Call(args...).Dot("HandleBatch")))
}

// setWith builds a set-based handler's HandleBatch with the scenario's
// wrap around the handler:
//
//	func(s *Service, pool *pgxpool.Pool, wrap idemtest.SetWrap[M, R], opts ...idem.Option) idemtest.BatchFunc[M, R] {
//		handler := idemtest.Wrapped(wrap, s.PostAll)
//		return idemimpl.NewSetInbox(pool, idemPostAllTable, handler, opts...).HandleBatch
//	}
func (e emitter) setWith() jen.Code {
	h := e.H
	var recvParam jen.Code = jen.Id("_").Add(e.recvType())
	var handler jen.Code = jen.Id(h.Func)
	if h.Recv != nil {
		name := gocode.ReceiverName(h.Recv.Type)
		recvParam = jen.Id(name).Add(e.recvType())
		handler = jen.Id(name).Dot(h.Func)
	}
	newInbox, noResult, wrapped := "NewSetInbox", "NoResultSet", "Wrapped"
	if h.Outbox {
		newInbox, noResult, wrapped = "NewPublishingSetInbox", "NoResultPublishingSet", "WrappedPublishing"
	}
	if h.Result == nil {
		handler = jen.Qual(gocode.ImplPkg, noResult).Call(handler)
	}
	return e.funcLit([]jen.Code{
		recvParam,
		jen.Id("pool").Op("*").Qual(gocode.PgxpoolPkg, "Pool"),
		jen.Id("wrap").Qual(gocode.IdemtestPkg, "SetWrap").Types(gocode.Type(h.Msg), e.resultType()),
		jen.Id("opts").Op("...").Qual(gocode.IdemPkg, "Option"),
	}, jen.Qual(gocode.IdemtestPkg, "BatchFunc").Types(gocode.Type(h.Msg), e.resultType()),
		jen.Id("handler").Op(":=").Qual(gocode.IdemtestPkg, wrapped).Call(jen.Id("wrap"), handler),
		e.Fit(3, func(multi bool) jen.Code {
			return jen.Return(jen.Qual(gocode.ImplPkg, newInbox).Call(gocode.Items(multi,
				jen.Id("pool"), jen.Id(e.N.TableVar), jen.Id("handler"), jen.Id("opts").Op("..."))...).Dot("HandleBatch"))
		}))
}

// rekey returns a copy of the message with fresh unique values in its key
// parts (and the entity of a stale-message guard), for the batch scenarios
// of a set-based handler that need several keys; nil when no key part can
// be changed that way (every part nullable, or reached through a pointer,
// which a copy would share).
func (e emitter) rekey() jen.Code {
	h := e.H
	v, body := e.copyOf()
	parts := append([]model.KeyPart(nil), h.Key...)
	if h.Guard != nil {
		parts = append(parts, h.Guard.Entity)
	}
	changed := map[string]bool{}
	for _, k := range parts {
		if k.Null != nil || changed[k.Path] {
			continue
		}
		through := false
		for _, hop := range k.Hops[:len(k.Hops)-1] {
			through = through || hop.Pointer
		}
		unique, ok := map[model.KeyKind]string{model.KeyString: "UniqueString", model.KeyInt: "UniqueInt", model.KeyUUID: "UniqueUUID"}[k.Kind]
		if through || !ok {
			continue
		}
		changed[k.Path] = true
		field := jen.Id(v)
		for _, hop := range k.Hops {
			field = field.Dot(hop.Field)
		}
		body = append(body, field.Op("=").Qual(gocode.IdemtestPkg, unique).Types(gocode.Type(k.Type)).Call())
	}
	if len(changed) == 0 {
		return nil
	}
	return e.copyFunc(v, body)
}

// fixture is the fixture= function, or else the runtime's sampled fixture
// (idemtest.Sampled and its kin), whose message has every field set:
//
//	idemtest.Sampled[*Service, OrderPlaced](func(msg *OrderPlaced) {
//		msg.Batch = nil
//	})
//
// The function changes what the sample must not hold: a nullable key part
// stays NULL, and the time of a partitioned inbox is left to the scenarios.
func (e emitter) fixture() jen.Code {
	h := e.H
	if h.Fixture != "" {
		return jen.Id(h.Fixture)
	}
	sampled := "Sampled"
	switch {
	case h.External():
		sampled = "SampledExternal"
	case h.Natural():
		sampled = "SampledNatural"
	}
	msg := jen.Id("msg")
	if h.Msg.Kind == model.Pointer {
		msg = jen.Parens(jen.Op("*").Id("msg"))
	}
	var body []jen.Code
	nulled := map[string]bool{}
	null := func(k model.KeyPart) {
		if k.Null == nil || nulled[k.Path] {
			return
		}
		nulled[k.Path] = true
		field := jen.Add(msg)
		for _, hop := range k.Hops {
			field = field.Dot(hop.Field)
		}
		text := k.Path + " stays NULL: the scenarios prove the key with a NULL part."
		if len("\t\t\t// "+text) <= gocode.Width {
			body = append(body, jen.Comment(text))
		} else {
			body = append(body, jen.Comment(k.Path+" stays NULL: the scenarios prove the key"), jen.Comment("with a NULL part."))
		}
		if k.Null.Pointer {
			body = append(body, field.Op("=").Nil())
		} else {
			body = append(body, field.Dot("Valid").Op("=").False())
		}
	}
	for _, k := range h.Key {
		null(k)
	}
	if p := h.Partition; p != nil {
		body = append(body, jen.Comment("The scenarios time the message."),
			jen.Add(msg).Dot(p.Time.Path).Op("=").Qual("time", "Time").Values())
	}
	var set jen.Code = jen.Nil()
	if len(body) > 0 {
		param := gocode.Type(h.Msg)
		set = jen.Func().Params(jen.Id("msg").Op("*").Add(param)).Block(body...)
	}
	return jen.Qual(gocode.IdemtestPkg, sampled).Types(e.recvType(), gocode.Type(h.Msg)).Call(set)
}

// fixtureField is the name of the suite's Fixture field, with a comment
// above it when the message has no field to vary, saying why there is no
// Variant and so no key_reused scenario without a fixture's.
func (e emitter) fixtureField() jen.Code {
	h := e.H
	if h.Vary != nil || h.NoVary == "" {
		return jen.Id("Fixture")
	}
	text := "No key_reused: " + h.NoVary + "."
	if h.Fixture != "" {
		text = "key_reused needs the fixture's Variant: " + h.NoVary + "."
	}
	c := jen.Null()
	for _, line := range wrap(text) {
		c.Comment(line).Line()
	}
	return c.Id("Fixture")
}

// partition is the Suite's Partition of a partitioned inbox: the bucket, the
// message's time field read and set on a copy, and the wrapper for the
// janitor.
func (e emitter) partition() jen.Code {
	h := e.H
	msg, field := gocode.Type(h.Msg), h.Partition.Time.Path
	at := jen.Qual("time", "Time")
	set := []jen.Code{jen.Id("msg").Dot(field).Op("=").Id("at"), jen.Return(jen.Id("msg"))}
	if h.Msg.Kind == model.Pointer {
		set = []jen.Code{
			jen.Id("v").Op(":=").Op("*").Id("msg"),
			jen.Id("v").Dot(field).Op("=").Id("at"),
			jen.Return(jen.Op("&").Id("v")),
		}
	}
	args := []jen.Code{jen.Id("pool")}
	recvParam := jen.Id("_").Add(e.recvType())
	if h.Recv != nil {
		name := gocode.ReceiverName(h.Recv.Type)
		recvParam = jen.Id(name).Add(e.recvType())
		args = append(args, jen.Id(name))
	}
	args = append(args, jen.Id("opts").Op("..."))
	maintained := jen.Func().Params(gocode.Items(true,
		recvParam,
		jen.Id("pool").Op("*").Qual(gocode.PgxpoolPkg, "Pool"),
		jen.Id("opts").Op("...").Qual(gocode.IdemPkg, "Option"),
	)...).Qual(gocode.IdemPkg, "Maintained").Block(jen.Return(jen.Id(e.N.Constructor).Call(args...)))
	return jen.Op("&").Qual(gocode.IdemtestPkg, "Partition").Types(e.recvType(), msg).Values(
		jen.Line().Id("Bucket").Op(":").Add(gocode.Bucket(h.Partition.Bucket)),
		jen.Line().Id("Time").Op(":").Func().Params(jen.Id("msg").Add(msg)).Add(at).Block(jen.Return(jen.Id("msg").Dot(field))),
		jen.Line().Id("SetTime").Op(":").Func().Params(jen.Id("msg").Add(msg), jen.Id("at").Add(at)).Add(msg).Block(set...),
		jen.Line().Id("Maintained").Op(":").Add(maintained),
		jen.Line(),
	)
}

// variant changes the Vary field of a copy of the message.
func (e emitter) variant() jen.Code {
	h := e.H
	v, body := e.copyOf()
	if h.Envelope && h.Body().Kind == model.Pointer {
		// A copy of the envelope shares its body: change a copy of that.
		if v == "msg" {
			v = "v"
			body = append(body, jen.Id("v").Op(":=").Id("msg"))
		}
		body = append(body, jen.Id("b").Op(":=").Op("*").Id(v).Dot("Body"), jen.Id(v).Dot("Body").Op("=").Op("&").Id("b"))
	}
	field := jen.Id(v).Dot(h.Vary.Field)
	switch h.Vary.Kind {
	case model.VaryString:
		body = append(body, field.Op("+=").Lit("-variant"))
	case model.VaryInt:
		body = append(body, field.Op("++"))
	case model.VaryBool:
		body = append(body, field.Op("=").Op("!").Id(v).Dot(h.Vary.Field))
	}
	return e.copyFunc(v, body)
}

// copyOf begins a function of msg that changes a copy of it: the name of
// the copy, and the statement that makes it when msg is a pointer.
func (e emitter) copyOf() (string, []jen.Code) {
	if e.H.Msg.Kind == model.Pointer {
		return "v", []jen.Code{jen.Id("v").Op(":=").Op("*").Id("msg")}
	}
	return "msg", nil
}

// copyFunc is func(msg M) M of body, which changes the copy v (copyOf),
// then returns it.
func (e emitter) copyFunc(v string, body []jen.Code) jen.Code {
	h := e.H
	if h.Msg.Kind == model.Pointer {
		body = append(body, jen.Return(jen.Op("&").Id("v")))
	} else {
		body = append(body, jen.Return(jen.Id(v)))
	}
	return jen.Func().Params(jen.Id("msg").Add(gocode.Type(h.Msg))).Add(gocode.Type(h.Msg)).Block(body...)
}

func (e emitter) recvType() jen.Code {
	r := e.H.Recv
	switch {
	case r == nil:
		return jen.Qual(gocode.IdemtestPkg, "NoReceiver")
	case r.Pointer:
		return jen.Op("*").Id(r.Type)
	}
	return jen.Id(r.Type)
}

func (e emitter) resultType() jen.Code {
	if e.H.Result == nil {
		return jen.Qual(gocode.IdemPkg, "None")
	}
	return gocode.Type(*e.H.Result)
}

// migrationsDir is the handler's migrations folder relative to the package,
// where go test runs the test.
func (e emitter) migrationsDir() string {
	rel, err := filepath.Rel(e.Pkg.Dir, e.H.MigrationsDir)
	if err != nil {
		rel = e.H.MigrationsDir
	}
	return filepath.ToSlash(rel)
}

// doc writes the doc comment of a handler's test, at most two lines: what
// it runs against which wrapper, and where its message comes from. What the
// scenarios prove is told once, in the docs of package idemtest.
func (e emitter) doc(f *jen.File, suite string) {
	for _, line := range e.docLines(suite) {
		f.Comment(line)
	}
}

// docLines are the lines of the doc comment of a handler's test: the
// longest of these forms that fits in two.
func (e emitter) docLines(suite string) []string {
	source := "the message of " + e.H.Fixture
	if e.H.Fixture == "" {
		source = "a sample message (no fixture=)"
	}
	test, wrapper := e.N.Test, e.N.Wrapper
	forms := []string{
		fmt.Sprintf("%s runs the scenarios of idemtest.%s against %s, with %s.", test, suite, wrapper, source),
		fmt.Sprintf("%s runs idemtest.%s against %s, with %s.", test, suite, wrapper, source),
		fmt.Sprintf("%s runs idemtest.%s, with %s.", test, suite, source),
	}
	for _, form := range forms {
		if lines := wrap(form); len(lines) <= 2 {
			return lines
		}
	}
	return wrap(fmt.Sprintf("%s runs idemtest.%s.", test, suite))
}

// wrap fills text into comment lines of at most 77 columns, 80 with "// ".
func wrap(text string) []string {
	const width = 77
	var lines []string
	line := ""
	for _, word := range strings.Fields(text) {
		if line != "" && len(line)+1+len(word) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += word
	}
	return append(lines, line)
}
