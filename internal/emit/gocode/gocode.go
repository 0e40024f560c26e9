// Package gocode holds what the Go emitters share: the import paths of the
// runtime, how a model type and a handler are spelled, the file setup and
// the final formatting.
package gocode

import (
	"bytes"
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/dave/jennifer/jen"

	"github.com/idemgen/idemgen/internal/model"
)

// Import paths of the packages generated code uses.
const (
	IdemPkg     = "github.com/idemgen/idemgen/idem"
	ImplPkg     = "github.com/idemgen/idemgen/idem/idemimpl"
	IdemtestPkg = "github.com/idemgen/idemgen/idem/idemtest"
	PgxPkg      = "github.com/jackc/pgx/v5"
	PgxpoolPkg  = "github.com/jackc/pgx/v5/pgxpool"
)

// RuntimeContract is the constant of the idemimpl package that names the
// runtime contract the emitted code is written for (see
// idemimpl.SupportPackageIsVersion4): bump it together with the runtime's.
const RuntimeContract = "SupportPackageIsVersion4"

// Contract writes the line that makes code generated for another runtime
// contract than idem's fail to compile, with what to do about it right
// above, where the compiler's error points.
func Contract(f *jen.File) {
	f.Comment(Doc("This compile-time assertion fails when the idem in go.mod is of another version than the idemgen that wrote this file: " +
		"regenerate it with go.mod's (go generate ./... running go run github.com/idemgen/idemgen/cmd/idemgen)."))
	f.Const().Id("_").Op("=").Qual(ImplPkg, RuntimeContract)
}

// NewFile starts a generated file of pkg: the header line, and the names of
// the runtime's packages and of every package the handlers' types come from,
// so that jennifer does not guess them (it would write v5 for a /v5 path).
func NewFile(pkg model.Package) *jen.File {
	f := jen.NewFilePathName(pkg.Path, pkg.Name)
	f.HeaderComment(strings.TrimPrefix(model.GoHeader, "// "))
	f.ImportName(IdemPkg, "idem")
	f.ImportName(ImplPkg, "idemimpl")
	f.ImportName(IdemtestPkg, "idemtest")
	f.ImportName(PgxPkg, "pgx")
	f.ImportName(PgxpoolPkg, "pgxpool")
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
		for _, k := range h.Key {
			walk(k.Type)
			for _, hop := range k.Hops {
				if hop.Elem != nil {
					walk(*hop.Elem)
				}
			}
		}
	}
	return f
}

// Emitter is what a Go emitter writes one handler's code from: the
// handler, its package and the names derived from it. The emitters embed it
// in their own type, which carries their methods.
type Emitter struct {
	Pkg model.Package
	H   model.Handler
	N   model.Names
}

// File renders the generated file name of pkg, which has at least one
// handler: the setup of NewFile, then what intro writes (when not nil), then
// what emit writes for each handler, in the package's order and a blank line
// apart, then Render. Every Go emitter builds its file this way, so that the
// header, the import names and the formatting are the same in all of them.
func File(pkg model.Package, name string, intro func(f *jen.File), emit func(f *jen.File, e Emitter)) ([]byte, error) {
	f := NewFile(pkg)
	if intro != nil {
		intro(f)
		f.Line()
	}
	for i, h := range pkg.Handlers {
		if i > 0 {
			f.Line()
		}
		emit(f, Emitter{Pkg: pkg, H: h, N: h.Names()})
	}
	return Render(f, name, pkg)
}

// Render renders f (jennifer formats it with gofmt), with its imports
// grouped the way goimports does: the standard library first.
func Render(f *jen.File, name string, pkg model.Package) ([]byte, error) {
	var b bytes.Buffer
	if err := f.Render(&b); err != nil {
		return nil, fmt.Errorf("render %s of %s: %w", name, pkg.Path, err)
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

// Type spells a model type.
func Type(t model.Type) jen.Code {
	switch t.Kind {
	case model.Pointer:
		return jen.Op("*").Add(Type(*t.Elem))
	case model.Slice:
		return jen.Index().Add(Type(*t.Elem))
	case model.Array:
		return jen.Index(jen.Lit(int(t.Len))).Add(Type(*t.Elem))
	case model.Map:
		return jen.Map(Type(*t.Key)).Add(Type(*t.Elem))
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
			args[i] = Type(a)
		}
		s = s.Types(args...)
	}
	return s
}

// HandlerName names a handler as Go documentation does: Charge,
// Service.Charge or (*Service).Charge.
func HandlerName(h model.Handler) string {
	switch r := h.Recv; {
	case r == nil:
		return h.Func
	case r.Pointer:
		return "(*" + r.Type + ")." + h.Func
	default:
		return r.Type + "." + h.Func
	}
}

// KeyPaths lists a handler's key fields as the directive does.
func KeyPaths(h model.Handler) string {
	paths := make([]string, len(h.Key))
	for i, k := range h.Key {
		paths[i] = k.Path
	}
	return strings.Join(paths, ", ")
}

// ReceiverName is the parameter that holds a handler's receiver: the type's
// initial, lower-cased, as receivers are usually called, unless that is
// taken (w is the wrapper's receiver, t the test's *testing.T).
func ReceiverName(typeName string) string {
	r := strings.ToLower(typeName[:1])
	if r < "a" || r > "z" || r == "w" || r == "t" {
		return "recv"
	}
	return r
}

// MaxDocLines is the most lines a generated declaration's doc comment
// takes: what a declaration does in general is the runtime's documentation,
// and what is left is what is particular to one handler.
const MaxDocLines = 3

// ShortDoc is Doc of the first of texts that fits in MaxDocLines lines, or
// of the last one when none does: texts go from the fullest to the
// shortest, so that long names drop details rather than add lines.
func ShortDoc(texts ...string) string {
	for _, text := range texts {
		if doc := Doc(text); strings.Count(doc, "\n") < MaxDocLines {
			return doc
		}
	}
	return Doc(texts[len(texts)-1])
}

// Doc wraps text into // comment lines of at most 80 columns.
func Doc(text string) string {
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

// MessageName names a handler's message type in doc comments: the named
// type without its pointer, and for idem.Message[T] and idem.Request[T] the
// envelope with its body type, spelled as the code of pkgPath spells them.
func MessageName(h model.Handler, pkgPath string) string {
	switch {
	case !h.Envelope:
		return h.Msg.Deref().Name
	case h.Request:
		return "idem.Request[" + TypeText(h.Body(), pkgPath) + "]"
	}
	return "idem.Message[" + TypeText(h.Body(), pkgPath) + "]"
}

// TypeText spells a named type, a pointer to one or an instantiated generic
// type as the code of pkgPath spells it.
func TypeText(t model.Type, pkgPath string) string {
	if t.Kind == model.Pointer {
		return "*" + TypeText(*t.Elem, pkgPath)
	}
	s := t.Name
	if t.PkgPath != "" && t.PkgPath != pkgPath {
		s = t.PkgName + "." + t.Name
	}
	if len(t.Args) > 0 {
		args := make([]string, len(t.Args))
		for i, a := range t.Args {
			args[i] = TypeText(a, pkgPath)
		}
		s += "[" + strings.Join(args, ", ") + "]"
	}
	return s
}

// Duration spells d as a reader would: 720 * time.Hour.
func Duration(d time.Duration) jen.Code {
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

// DurationText spells d for documentation: 720h (30 days).
func DurationText(d time.Duration) string {
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

// Width is the longest line of a generated Go file, in columns (a tab
// counts as one, as awk's length does).
const Width = 100

// Fit returns what build makes of a list on one line when that is not Long,
// indent tabs in, and otherwise what it makes of the list one item a line.
// build spells the code with Items(multi, ...) where the list goes: a call's
// arguments, a literal's elements.
func (e Emitter) Fit(indent int, build func(multi bool) jen.Code) jen.Code {
	if single := build(false); !e.Long(indent, single) {
		return single
	}
	return build(true)
}

// Long reports whether the first line of code, rendered indent tabs in in
// the file of e's package, is longer than Width columns.
func (e Emitter) Long(indent int, code jen.Code) bool {
	line := firstLine(code)
	// Rendered outside a file, the package's own names are qualified.
	for _, name := range []string{e.Pkg.Name, path.Base(e.Pkg.Path)} {
		line = strings.ReplaceAll(line, name+".", "")
	}
	return indent+len(line) > Width
}

// Items lays out the items of a list (for Params, Call, Values): as they
// are, or with multi one a line, each ending with its comma.
func Items(multi bool, items ...jen.Code) []jen.Code {
	if !multi {
		return items
	}
	out := make([]jen.Code, 0, len(items)+1)
	for _, it := range items {
		out = append(out, jen.Line().Add(it))
	}
	return append(out, jen.Line())
}

// firstLine renders code, a declaration, or else a statement or expression
// (rendered in a function's body, whose gofmt it must pass), and returns
// its first line.
func firstLine(code jen.Code) string {
	s := fmt.Sprintf("%#v", code)
	if strings.HasPrefix(s, "%!") {
		s = fmt.Sprintf("%#v", jen.Func().Id("_").Params().Block(code))
		_, s, _ = strings.Cut(s, "{\n")
		s = strings.TrimPrefix(s, "\t")
	}
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// Bucket is the idemimpl constant of a partition= bucket: idemimpl.Day for
// day.
func Bucket(bucket string) jen.Code {
	return jen.Qual(ImplPkg, strings.ToUpper(bucket[:1])+bucket[1:])
}
