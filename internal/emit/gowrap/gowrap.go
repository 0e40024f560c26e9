// Package gowrap emits idem_gen.go: for each handler of a package, the
// wrapper type, its constructor and methods, the inbox table description and
// the key function. The protocol itself is the idem runtime's; what is emitted
// is only what is specific to one handler.
package gowrap

import (
	"bytes"
	"fmt"
	"strings"
	"time"

	"github.com/dave/jennifer/jen"

	"github.com/idemgen/idemgen/internal/emit/inboxsql"
	"github.com/idemgen/idemgen/internal/model"
)

const (
	idemPkg    = "github.com/idemgen/idemgen/idem"
	pgxPkg     = "github.com/jackc/pgx/v5"
	pgxpoolPkg = "github.com/jackc/pgx/v5/pgxpool"
)

// File renders idem_gen.go for pkg, which has at least one handler.
func File(pkg model.Package) ([]byte, error) {
	f := jen.NewFilePathName(pkg.Path, pkg.Name)
	f.HeaderComment(strings.TrimPrefix(model.GoHeader, "// "))
	f.ImportName(idemPkg, "idem")
	f.ImportName(pgxPkg, "pgx")
	f.ImportName(pgxpoolPkg, "pgxpool")
	importTypes(f, pkg)

	for i, h := range pkg.Handlers {
		if i > 0 {
			f.Line()
		}
		e := emitter{pkg: pkg, h: h, n: h.Names()}
		e.wrapper(f)
	}
	var b bytes.Buffer
	if err := f.Render(&b); err != nil {
		return nil, fmt.Errorf("render %s of %s: %w", model.WrapperFile, pkg.Path, err)
	}
	return groupImports(b.Bytes()), nil
}

// groupImports splits the import block of src, which jennifer renders as one
// sorted block of gofmt-ed lines, into the standard library's imports and the
// others, separated by a blank line: what goimports does, and what reviewers
// expect. It works on the text (each group stays sorted, and gofmt leaves
// import lines unaligned), because formatting the file again would double
// the cost of emitting it.
func groupImports(src []byte) []byte {
	const open, end = "\nimport (\n", "\n)\n"
	start := bytes.Index(src, []byte(open))
	if start < 0 {
		return src
	}
	start += len(open)
	n := bytes.Index(src[start:], []byte(end))
	if n < 0 {
		return src
	}
	var std, other [][]byte
	for _, line := range bytes.Split(src[start:start+n], []byte("\n")) {
		_, path, _ := bytes.Cut(line, []byte(`"`))
		first, _, _ := bytes.Cut(path, []byte("/"))
		if bytes.Contains(first, []byte(".")) {
			other = append(other, line)
		} else {
			std = append(std, line)
		}
	}
	if len(std) == 0 || len(other) == 0 {
		return src
	}
	var out bytes.Buffer
	out.Write(src[:start])
	out.Write(bytes.Join(std, []byte("\n")))
	out.WriteString("\n\n")
	out.Write(bytes.Join(other, []byte("\n")))
	out.Write(src[start+n:])
	return out.Bytes()
}

// importTypes names the packages of the handlers' types as they are called,
// so that jennifer does not guess (it would write v5 for a /v5 path).
func importTypes(f *jen.File, pkg model.Package) {
	var walk func(t model.Type)
	walk = func(t model.Type) {
		if t.PkgPath != "" && t.PkgPath != pkg.Path {
			f.ImportName(t.PkgPath, t.PkgName)
		}
		for _, a := range t.Args {
			walk(a)
		}
		if t.Elem != nil {
			walk(*t.Elem)
		}
		if t.Key != nil {
			walk(*t.Key)
		}
	}
	for _, h := range pkg.Handlers {
		walk(h.Msg)
		if h.Result != nil {
			walk(*h.Result)
		}
	}
}

type emitter struct {
	pkg model.Package
	h   model.Handler
	n   model.Names
}

func (e emitter) wrapper(f *jen.File) {
	h, n := e.h, e.n
	msg := typeCode(h.Msg)
	var result jen.Code = jen.Qual(idemPkg, "None")
	if h.Result != nil {
		result = typeCode(*h.Result)
	}

	f.Comment(doc(fmt.Sprintf(
		"%s delivers %s messages to %s at most once per key (%s) for the consumer %q: "+
			"the handler's writes commit together with the key's row in the inbox table %s, "+
			"and a redelivered message gets the stored result back without running the handler again. "+
			"Build it with %s.",
		n.Wrapper, h.Msg.Deref().Name, e.handlerName(), e.keyPaths(), h.Consumer, h.Table, n.Constructor)))
	f.Type().Id(n.Wrapper).Struct(
		jen.Id("inbox").Op("*").Qual(idemPkg, "Inbox").Types(msg, result),
	)
	f.Line()

	f.Comment(doc(fmt.Sprintf(
		"%s returns the idempotent wrapper of %s. db must reach the database that holds %s and the handler's own tables; "+
			"opts choose the isolation level (idem.WithIsolation) and how long a concurrent delivery of the same key waits (idem.WithClaimWait).",
		n.Constructor, e.handlerName(), h.Table)))
	params := []jen.Code{jen.Id("db").Op("*").Qual(pgxpoolPkg, "Pool")}
	handler := jen.Id(h.Func)
	if h.Recv != nil {
		recv := receiverName(h.Recv.Type)
		recvType := jen.Id(h.Recv.Type)
		if h.Recv.Pointer {
			recvType = jen.Op("*").Id(h.Recv.Type)
		}
		params = append(params, jen.Id(recv).Add(recvType))
		handler = jen.Id(recv).Dot(h.Func)
	}
	if h.Result == nil {
		handler = jen.Qual(idemPkg, "NoResult").Call(handler)
	}
	params = append(params, jen.Id("opts").Op("...").Qual(idemPkg, "Option"))
	f.Func().Id(n.Constructor).Params(params...).Op("*").Id(n.Wrapper).Block(
		jen.Return(jen.Op("&").Id(n.Wrapper).Values(jen.Dict{
			jen.Id("inbox"): jen.Qual(idemPkg, "NewInbox").Call(jen.Id("db"), jen.Id(n.TableVar), handler, jen.Id("opts").Op("...")),
		})),
	)
	f.Line()

	ctx := jen.Id("ctx").Qual("context", "Context")
	call := jen.Id("w").Dot("inbox").Dot("Handle").Call(jen.Id("ctx"), jen.Id("msg"))
	if h.Result != nil {
		f.Comment(doc(fmt.Sprintf(
			"Handle runs %s for msg in one transaction with the claim of its key, or, when the key was processed before, "+
				"returns the stored result as idem.Duplicate without running it. Ack the message exactly when err is nil.",
			h.Func)))
		f.Func().Params(jen.Id("w").Op("*").Id(n.Wrapper)).Id("Handle").
			Params(ctx, jen.Id("msg").Add(typeCode(h.Msg))).
			Params(typeCode(*h.Result), jen.Qual(idemPkg, "Outcome"), jen.Error()).
			Block(jen.Return(call))
	} else {
		f.Comment(doc(fmt.Sprintf(
			"Handle runs %s for msg in one transaction with the claim of its key, or, when the key was processed before, "+
				"returns idem.Duplicate without running it. Ack the message exactly when err is nil.",
			h.Func)))
		f.Func().Params(jen.Id("w").Op("*").Id(n.Wrapper)).Id("Handle").
			Params(ctx, jen.Id("msg").Add(typeCode(h.Msg))).
			Params(jen.Qual(idemPkg, "Outcome"), jen.Error()).
			Block(
				jen.List(jen.Id("_"), jen.Id("outcome"), jen.Err()).Op(":=").Add(call),
				jen.Return(jen.Id("outcome"), jen.Err()),
			)
	}
	f.Line()

	f.Comment(doc(fmt.Sprintf(
		"Purge deletes the rows of %s older than the retention of %s, in batches, and returns how many it deleted. "+
			"Run it periodically.", h.Table, durationText(h.Retain))))
	f.Func().Params(jen.Id("w").Op("*").Id(n.Wrapper)).Id("Purge").
		Params(jen.Id("ctx").Qual("context", "Context")).
		Params(jen.Int64(), jen.Error()).
		Block(jen.Return(jen.Id("w").Dot("inbox").Dot("Purge").Call(jen.Id("ctx"))))
	f.Line()

	e.table(f)
	f.Line()
	e.keyFunc(f)
}

func (e emitter) table(f *jen.File) {
	h, n := e.h, e.n
	st := inboxsql.StatementsFor(h)
	var fields []jen.Code
	for _, k := range h.Key {
		fields = append(fields, jen.Lit(k.Path))
	}
	f.Comment(doc(fmt.Sprintf("%s is the inbox of the consumer %q.", n.TableVar, h.Consumer)))
	f.Var().Id(n.TableVar).Op("=").Qual(idemPkg, "Table").Types(typeCode(h.Msg)).Values(fieldList(
		"Consumer", jen.Lit(h.Consumer),
		"Name", jen.Lit(h.Table),
		"KeyFields", jen.Index().String().Values(fields...),
		"Key", jen.Id(n.KeyFunc),
		"Retain", durationCode(h.Retain),
		"Claim", jen.Lit(st.Claim),
		"Complete", jen.Lit(st.Complete),
		"Lookup", jen.Lit(st.Lookup),
		"Purge", jen.Lit(st.Purge),
	)...)
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
	h, n := e.h, e.n
	var body []jen.Code
	first := h.Key[0].Path
	if h.Msg.Kind == model.Pointer {
		body = append(body, jen.If(jen.Id("msg").Op("==").Nil()).Block(
			jen.Return(jen.Nil(), jen.Qual(idemPkg, "InvalidKey").Call(jen.Lit(first), jen.Lit("is missing: the message is nil"))),
		))
	}
	checked := map[string]bool{}
	var values []jen.Code
	for _, k := range h.Key {
		expr := "msg"
		var shown []string
		for i, hop := range k.Hops {
			expr += "." + hop.Field
			shown = append(shown, hop.Field)
			if i < len(k.Hops)-1 && hop.Pointer && !checked[expr] {
				checked[expr] = true
				body = append(body, jen.If(jen.Id(expr).Op("==").Nil()).Block(
					jen.Return(jen.Nil(), jen.Qual(idemPkg, "InvalidKey").Call(
						jen.Lit(k.Path), jen.Lit("is missing: "+strings.Join(shown, ".")+" is nil"))),
				))
			}
		}
		value := jen.Id(expr)
		switch k.GoValue {
		case "":
		case "[16]byte":
			value = jen.Index(jen.Lit(16)).Byte().Parens(jen.Id(expr))
		default:
			value = jen.Id(k.GoValue).Parens(jen.Id(expr))
		}
		switch k.Kind {
		case model.KeyString:
			body = append(body, jen.If(
				jen.Err().Op(":=").Qual(idemPkg, "CheckString").Call(jen.Lit(k.Path), value),
				jen.Err().Op("!=").Nil(),
			).Block(jen.Return(jen.Nil(), jen.Err())))
		case model.KeyUUID:
			body = append(body, jen.If(
				jen.Err().Op(":=").Qual(idemPkg, "CheckUUID").Call(jen.Lit(k.Path), value),
				jen.Err().Op("!=").Nil(),
			).Block(jen.Return(jen.Nil(), jen.Err())))
		}
		values = append(values, value)
	}
	body = append(body, jen.Return(jen.Index().Any().Values(values...), jen.Nil()))

	f.Comment(doc(fmt.Sprintf("%s returns the key parts of msg in column order: %s.", n.KeyFunc, e.keyPaths())))
	f.Func().Id(n.KeyFunc).Params(jen.Id("msg").Add(typeCode(h.Msg))).Params(jen.Index().Any(), jen.Error()).Block(body...)
}

// handlerName names the handler as Go documentation does: Charge,
// Service.Charge or (*Service).Charge.
func (e emitter) handlerName() string {
	r := e.h.Recv
	switch {
	case r == nil:
		return e.h.Func
	case r.Pointer:
		return "(*" + r.Type + ")." + e.h.Func
	default:
		return r.Type + "." + e.h.Func
	}
}

func (e emitter) keyPaths() string {
	paths := make([]string, len(e.h.Key))
	for i, k := range e.h.Key {
		paths[i] = k.Path
	}
	return strings.Join(paths, ", ")
}

// receiverName is the constructor's parameter for the receiver: the type's
// initial, lower-cased, as receivers are usually called.
func receiverName(typeName string) string {
	r := strings.ToLower(typeName[:1])
	if r < "a" || r > "z" || r == "w" {
		return "recv"
	}
	return r
}

func typeCode(t model.Type) jen.Code {
	switch t.Kind {
	case model.Pointer:
		return jen.Op("*").Add(typeCode(*t.Elem))
	case model.Slice:
		return jen.Index().Add(typeCode(*t.Elem))
	case model.Array:
		return jen.Index(jen.Lit(int(t.Len))).Add(typeCode(*t.Elem))
	case model.Map:
		return jen.Map(typeCode(*t.Key)).Add(typeCode(*t.Elem))
	}
	var s *jen.Statement
	if t.PkgPath == "" {
		s = jen.Id(t.Name)
	} else {
		s = jen.Qual(t.PkgPath, t.Name)
	}
	if len(t.Args) > 0 {
		args := make([]jen.Code, len(t.Args))
		for i, a := range t.Args {
			args[i] = typeCode(a)
		}
		s = s.Types(args...)
	}
	return s
}

// durationCode spells d as a reader would: 720 * time.Hour.
func durationCode(d time.Duration) jen.Code {
	for _, u := range []struct {
		unit time.Duration
		name string
	}{{time.Hour, "Hour"}, {time.Minute, "Minute"}, {time.Second, "Second"}, {time.Millisecond, "Millisecond"}} {
		if d%u.unit == 0 {
			return jen.Lit(int(d/u.unit)).Op("*").Qual("time", u.name)
		}
	}
	return jen.Qual("time", "Duration").Call(jen.Lit(int64(d)))
}

// durationText spells d for documentation: 720h (30 days).
func durationText(d time.Duration) string {
	switch {
	case d%(24*time.Hour) == 0:
		days := int(d / (24 * time.Hour))
		unit := "days"
		if days == 1 {
			unit = "day"
		}
		return fmt.Sprintf("%dh (%d %s)", int(d/time.Hour), days, unit)
	case d%time.Hour == 0:
		return fmt.Sprintf("%dh", int(d/time.Hour))
	case d%time.Minute == 0:
		return fmt.Sprintf("%dm", int(d/time.Minute))
	}
	return d.String()
}

// doc wraps text into // comment lines of at most 80 columns.
func doc(text string) string {
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
	lines = append(lines, line)
	return "// " + strings.Join(lines, "\n// ")
}
