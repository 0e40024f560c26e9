package load

import (
	"fmt"
	"go/ast"
	"go/types"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"golang.org/x/tools/go/packages"

	"github.com/idemgen/idemgen/internal/diag"
	"github.com/idemgen/idemgen/internal/directive"
	"github.com/idemgen/idemgen/internal/model"
)

// The options of //idem:handler. Those in laterOptions belong to the design
// but are not implemented by this version; they are refused with that
// explanation rather than as unknown.
var (
	handlerOptions = []string{"consumer", "key", "table", "retain", "order", "version", "stable", "zero", "fixture"}
	laterOptions   = []string{"mode", "lease"}
)

// DefaultRetain is how long inbox rows are kept when the directive says
// nothing: 30 days.
const DefaultRetain = 720 * time.Hour

// MaxNullable bounds the nullable parts of a key. Each null pattern needs its
// own partial unique index (2^k of them, all maintained by every claim) and
// its own variant of the lookup and completion statements.
const MaxNullable = 3

// MaxConsumer bounds the length of a consumer name, so that the default table
// name and the names derived from it fit PostgreSQL's 63-byte identifiers.
const MaxConsumer = 48

var (
	consumerRE = regexp.MustCompile(`^[a-z][a-z0-9_.-]*$`)
	tableRE    = regexp.MustCompile(`^[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)?$`)
	columnRE   = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)
)

const (
	pgxPath  = "github.com/jackc/pgx/v5"
	idemPath = "github.com/idemgen/idemgen/idem"
)

// checker checks one annotated function of a package.
type checker struct {
	pkg   *packages.Package
	diags *diag.List
	ok    bool
	// tests are the package's test files, where fixtures are.
	tests *testFiles
}

func (c *checker) errorf(pos diag.Pos, format string, args ...any) {
	c.ok = false
	c.diags.Errorf(pos, format, args...)
}

func (c *checker) pos(n ast.Node) diag.Pos { return position(c.pkg.Fset, n.Pos()) }

// handler checks fd and its directive and returns the handler's model. It
// reports every problem it finds, not only the first.
func (c *checker) handler(fd *ast.FuncDecl, d directive.Directive) (model.Handler, bool) {
	c.ok = true
	h := model.Handler{Pos: c.pos(fd.Name), Func: fd.Name.Name, Retain: DefaultRetain}

	for _, o := range d.Options {
		switch {
		case contains(handlerOptions, o.Name):
		case contains(laterOptions, o.Name):
			c.errorf(o.Pos, "option %s= is not supported by this version of idemgen", o.Name)
		default:
			msg := fmt.Sprintf("unknown option %s=", o.Name)
			if s := directive.Suggest(o.Name, append(handlerOptions, laterOptions...)); s != "" {
				msg += fmt.Sprintf(" (did you mean %s=?)", s)
			}
			c.errorf(o.Pos, "%s", msg)
		}
	}

	if o, ok := d.Lookup("consumer"); !ok {
		c.errorf(d.Pos, "%shandler needs consumer=: a stable name such as billing.charge", directive.Prefix)
	} else if !consumerRE.MatchString(o.Value) {
		c.errorf(o.ValuePos, "consumer %q is not a safe name: want lower-case letters, digits, '_', '.' and '-', starting with a letter, at most %d bytes", o.Value, MaxConsumer)
	} else if len(o.Value) > MaxConsumer {
		c.errorf(o.ValuePos, "consumer %q is %d bytes long, more than %d: the inbox table and its indexes are named after it, within PostgreSQL's 63-byte identifiers; use a shorter name", o.Value, len(o.Value), MaxConsumer)
	} else {
		h.Consumer = o.Value
		h.Table = "idem_" + strings.NewReplacer(".", "_", "-", "_").Replace(o.Value)
	}
	if o, ok := d.Lookup("table"); ok {
		if !tableRE.MatchString(o.Value) {
			c.errorf(o.ValuePos, "table %q is not a plain PostgreSQL name: want lower-case letters, digits and '_' (optionally schema.table), at most 63 bytes each", o.Value)
		} else if n := longestPart(o.Value); n > 63 {
			c.errorf(o.ValuePos, "table %q has a name of %d bytes, more than PostgreSQL's 63-byte identifiers (which would cut it short); use a shorter name", o.Value, n)
		} else {
			h.Table = o.Value
		}
	}
	if o, ok := d.Lookup("retain"); ok {
		r, err := time.ParseDuration(o.Value)
		switch {
		case err != nil:
			c.errorf(o.ValuePos, "retain %q is not a Go duration such as 720h", o.Value)
		case r <= 0:
			c.errorf(o.ValuePos, "retain must be positive, not %s", o.Value)
		default:
			h.Retain = r
		}
	}

	fn, _ := c.pkg.TypesInfo.Defs[fd.Name].(*types.Func)
	if fn == nil {
		c.errorf(h.Pos, "no type information for %s", fd.Name.Name)
		return h, false
	}
	sig := fn.Type().(*types.Signature)
	c.receiver(fd, sig, &h)
	msg, msgOK := c.signature(fd, sig, &h)

	keyOpt, hasKey := d.Lookup("key")
	if !hasKey {
		c.errorf(d.Pos, "%shandler needs key=: the message fields that identify it, such as key=OrderID", directive.Prefix)
	} else if msgOK {
		h.Key = c.key(keyOpt, msg)
		c.checkNullable(keyOpt, h.Key)
		c.hygiene(d, keyOpt, h.Key)
	}
	if msgOK {
		h.Guard = c.guard(d, msg)
	}
	if msgOK && hasKey {
		c.zero(d, &h)
	}
	if msgOK {
		h.Vary, h.NoVary = c.vary(msg, h)
	}
	if o, ok := d.Lookup("fixture"); ok && msgOK {
		c.fixture(o, &h)
	}
	return h, c.ok
}

// checkNullable enforces MaxNullable.
func (c *checker) checkNullable(o directive.Option, parts []model.KeyPart) {
	n := 0
	for _, p := range parts {
		if p.Null != nil {
			n++
		}
	}
	if n > MaxNullable {
		c.errorf(o.ValuePos, "the key has %d nullable parts, more than %d: each null pattern needs its own partial unique index (%d here, all maintained by every claim) and its own lookup; make some parts required, or split the consumer",
			n, MaxNullable, 1<<n)
	}
}

// zero reads zero=, the integer key parts (and order= entity) for which 0 is
// a real value. The others reject 0, which is what an unset field holds.
func (c *checker) zero(d directive.Directive, h *model.Handler) {
	o, ok := d.Lookup("zero")
	if !ok {
		return
	}
	parts := map[string]*model.KeyPart{}
	for i := range h.Key {
		parts[h.Key[i].Path] = &h.Key[i]
	}
	if h.Guard != nil {
		parts[h.Guard.Entity.Path] = &h.Guard.Entity
	}
	offset := 0
	for _, path := range strings.Split(o.Value, ",") {
		pos := o.ValuePos
		pos.Col += offset
		offset += len(path) + 1
		part, ok := parts[path]
		switch {
		case path == "":
			c.errorf(pos, "zero= has an empty field path")
		case !ok:
			c.errorf(pos, "zero=%s names no key part: zero= lists the integer parts of key= (or the order= field) for which 0 is a real value", path)
		case part.Kind != model.KeyInt:
			c.errorf(pos, "zero=%s names a key part of type %s; zero= is for integer parts, for which 0 is otherwise refused as unset", path, typeName(part.Type))
		case part.AllowZero:
			c.errorf(pos, "zero=%s is listed twice", path)
		default:
			part.AllowZero = true
		}
	}
}

// guard reads order= and version=, the stale-message guard.
func (c *checker) guard(d directive.Directive, msg types.Type) *model.Guard {
	order, hasOrder := d.Lookup("order")
	version, hasVersion := d.Lookup("version")
	switch {
	case !hasOrder && !hasVersion:
		return nil
	case !hasVersion:
		c.errorf(order.Pos, "order= needs version=: the message field that increases with every change of the entity")
		return nil
	case !hasOrder:
		c.errorf(version.Pos, "version= needs order=: the message field that names the entity the versions are of")
		return nil
	}
	entity, okE := c.keyPart(order.ValuePos, order.Value, msg, false)
	ver, okV := c.keyPart(version.ValuePos, version.Value, msg, false)
	if okV && (ver.Kind != model.KeyInt || ver.SQLType == "numeric(20)") {
		c.errorf(version.ValuePos, "version field %s has type %s; it must be a signed integer (or uint8 to uint32): versions are compared as bigint",
			version.Value, typeName(ver.Type))
		okV = false
	}
	if !okE || !okV {
		return nil
	}
	entity.Column = "entity"
	// A version may start at 0; only the entity is an identity.
	ver.AllowZero = true
	return &model.Guard{Entity: entity, Version: ver}
}

func typeName(t model.Type) string {
	if t.PkgName != "" {
		return t.PkgName + "." + t.Name
	}
	return t.Name
}

// unstableWords are words of field names that name values which differ
// between deliveries of one message; a key on them defeats deduplication.
var unstableWords = []struct {
	match func(words []string) bool
	what  string
}{
	{hasAny("attempt", "attempts", "retry", "retries", "redelivered", "redelivery", "redeliveries"),
		"a delivery attempt counter or redelivery flag"},
	{hasPair([]string{"delivery", "deliveries", "num"}, []string{"count", "tag", "delivered", "number"}),
		"a delivery counter"},
	{hasPair([]string{"received", "receive", "processed", "processing", "handled", "consumed", "arrived", "delivered", "enqueued"},
		[]string{"at", "time", "ts", "on", "timestamp"}),
		"a receive or processing time"},
	{hasAny("correlation", "trace", "span"),
		"a correlation or trace id (shared by every message of a flow, or new on every hop)"},
	{hasAny("nonce", "random", "rand"),
		"a random value"},
}

func hasAny(words ...string) func([]string) bool {
	return func(ws []string) bool {
		for _, w := range ws {
			if contains(words, w) {
				return true
			}
		}
		return false
	}
}

func hasPair(first, second []string) func([]string) bool {
	return func(ws []string) bool {
		for i := 0; i+1 < len(ws); i++ {
			if contains(first, ws[i]) && contains(second, ws[i+1]) {
				return true
			}
		}
		return false
	}
}

// hygiene warns about key fields whose names say they are not stable, unless
// the directive vouches for them with stable=.
func (c *checker) hygiene(d directive.Directive, keyOpt directive.Option, parts []model.KeyPart) {
	vouched := map[string]bool{}
	stable, hasStable := d.Lookup("stable")
	if hasStable {
		for _, path := range strings.Split(stable.Value, ",") {
			vouched[path] = false
		}
	}
	offset := 0
	for _, path := range strings.Split(keyOpt.Value, ",") {
		pos := keyOpt.ValuePos
		pos.Col += offset
		offset += len(path) + 1
		elems := strings.Split(path, ".")
		words := strings.Split(snake(elems[len(elems)-1]), "_")
		for _, u := range unstableWords {
			if !u.match(words) {
				continue
			}
			if _, ok := vouched[path]; ok {
				vouched[path] = true
				break
			}
			c.diags.Warnf(pos, "key field %s looks like %s: it differs between deliveries of one message, so a redelivery would not be recognised as a duplicate; key on the message's own id (if %s really is stable, say so with stable=%s)",
				path, u.what, path, path)
			break
		}
	}
	if !hasStable {
		return
	}
	for _, path := range strings.Split(stable.Value, ",") {
		inKey := slices.Contains(strings.Split(keyOpt.Value, ","), path)
		switch {
		case !inKey:
			c.errorf(stable.ValuePos, "stable=%s names no key field; stable= lists key fields whose names look unstable but are not", path)
		case !vouched[path]:
			c.diags.Warnf(stable.ValuePos, "stable=%s silences nothing: idemgen has no doubt about key field %s", path, path)
		}
	}
}

func (c *checker) receiver(fd *ast.FuncDecl, sig *types.Signature, h *model.Handler) {
	if sig.TypeParams().Len() > 0 {
		c.errorf(h.Pos, "handler %s is generic; idemgen needs concrete message and result types", h.Func)
	}
	recv := sig.Recv()
	if recv == nil {
		return
	}
	t, pointer := recv.Type(), false
	if p, ok := t.(*types.Pointer); ok {
		t, pointer = p.Elem(), true
	}
	named, ok := types.Unalias(t).(*types.Named)
	if !ok || named.TypeParams().Len() > 0 {
		c.errorf(c.pos(fd.Recv), "handler %s has a generic or unnamed receiver; use a method of a plain named type", h.Func)
		return
	}
	_, isStruct := named.Underlying().(*types.Struct)
	h.Recv = &model.Recv{Type: named.Obj().Name(), Pointer: pointer, Struct: isStruct}
}

// signature checks the parameters and results and returns the message's
// struct type.
func (c *checker) signature(fd *ast.FuncDecl, sig *types.Signature, h *model.Handler) (types.Type, bool) {
	const want = "want func(ctx context.Context, tx pgx.Tx, msg M) (R, error) or (...) error, with M a named struct type or a pointer to one"
	params, results := sig.Params(), sig.Results()
	at := c.pos(fd.Type)
	if sig.Variadic() {
		last := params.At(params.Len() - 1)
		c.errorf(c.paramPos(fd, params.Len()-1), "handler %s is variadic (its last parameter %s is ...%s): one delivery is one message; %s",
			h.Func, last.Name(), c.typeString(last.Type().(*types.Slice).Elem()), want)
		return nil, false
	}
	if params.Len() != 3 {
		c.errorf(at, "handler %s has %d parameters; %s", h.Func, params.Len(), want)
		return nil, false
	}
	if !isNamed(params.At(0).Type(), "context", "Context") {
		c.errorf(c.paramPos(fd, 0), "the first parameter of handler %s must be context.Context, not %s", h.Func, c.typeString(params.At(0).Type()))
	}
	if !isNamed(params.At(1).Type(), pgxPath, "Tx") {
		c.errorf(c.paramPos(fd, 1), "the second parameter of handler %s must be pgx.Tx (%s), not %s: the business change must use the inbox's transaction",
			h.Func, pgxPath, c.typeString(params.At(1).Type()))
	}

	errorType := types.Universe.Lookup("error").Type()
	switch {
	case results.Len() == 1 && types.Identical(results.At(0).Type(), errorType):
	case results.Len() == 2 && types.Identical(results.At(1).Type(), errorType):
		r := results.At(0).Type()
		rpos := c.pos(fd.Type.Results.List[0].Type)
		if shape, problem := jsonShape(r, true, c.qualifier); problem != "" {
			c.errorf(rpos, "the result type %s of handler %s cannot be stored and replayed: %s", c.typeString(r), h.Func, problem)
		} else if t, ok := c.modelType(r, c.resultPos(fd)); ok {
			h.Result, h.ResultShape, h.ResultPos = &t, shape, rpos
		}
	default:
		c.errorf(c.resultPos(fd), "handler %s must return (R, error) or error; %s", h.Func, want)
	}

	mt := params.At(2).Type()
	named := mt
	if p, ok := mt.(*types.Pointer); ok {
		named = p.Elem()
	}
	n, isNamedType := types.Unalias(named).(*types.Named)
	_, isStruct := named.Underlying().(*types.Struct)
	mpos := c.paramPos(fd, 2)
	switch {
	case !isNamedType || !isStruct:
		c.errorf(mpos, "the message parameter of handler %s has type %s; want a named struct type or a pointer to one", h.Func, c.typeString(mt))
		return nil, false
	case n.TypeParams().Len() > 0 || n.TypeArgs().Len() > 0:
		c.errorf(mpos, "the message type %s of handler %s is generic; use a plain named struct type", c.typeString(mt), h.Func)
		return nil, false
	}
	if !hasMethod(named, "IdemFingerprint") {
		if problem := jsonProblem(named, false, c.qualifier); problem != "" {
			c.errorf(mpos, "the message type %s of handler %s cannot be fingerprinted: %s (or give it an IdemFingerprint method, see idem.Fingerprinter)",
				c.typeString(mt), h.Func, problem)
		}
	}
	t, ok := c.modelType(mt, mpos)
	if !ok {
		return nil, false
	}
	h.Msg = t
	return named, true
}

func (c *checker) paramPos(fd *ast.FuncDecl, i int) diag.Pos {
	n := 0
	for _, field := range fd.Type.Params.List {
		names := max(len(field.Names), 1)
		if i < n+names {
			if len(field.Names) > 0 {
				return c.pos(field.Names[i-n])
			}
			return c.pos(field.Type)
		}
		n += names
	}
	return c.pos(fd.Type)
}

func (c *checker) resultPos(fd *ast.FuncDecl) diag.Pos {
	if fd.Type.Results != nil {
		return c.pos(fd.Type.Results)
	}
	return c.pos(fd.Type)
}

// key resolves the key option's field paths against the message struct.
func (c *checker) key(o directive.Option, msg types.Type) []model.KeyPart {
	var parts []model.KeyPart
	columns := map[string]string{}
	offset := 0
	for _, path := range strings.Split(o.Value, ",") {
		pos := o.ValuePos
		pos.Col += offset
		offset += len(path) + 1
		if path == "" {
			c.errorf(pos, "key has an empty field path")
			continue
		}
		part, ok := c.keyPart(pos, path, msg, true)
		if !ok {
			continue
		}
		if other, dup := columns[part.Column]; dup {
			if other == path {
				c.errorf(pos, "key field %s is listed twice", path)
			} else {
				c.errorf(pos, "key fields %s and %s would both be stored in column %s", other, path, part.Column)
			}
			continue
		}
		columns[part.Column] = path
		parts = append(parts, part)
	}
	return parts
}

func (c *checker) keyPart(pos diag.Pos, path string, msg types.Type, allowNull bool) (model.KeyPart, bool) {
	part := model.KeyPart{Path: path}
	var hopTypes []types.Type
	cur := msg
	elems := strings.Split(path, ".")
	for i, name := range elems {
		prefix := strings.Join(elems[:i], ".")
		if name == "" {
			c.errorf(pos, "key field path %q has an empty element", path)
			return part, false
		}
		base := cur
		if p, ok := base.Underlying().(*types.Pointer); ok {
			base = p.Elem()
		}
		if _, ok := base.Underlying().(*types.Struct); !ok {
			c.errorf(pos, "key field %s: %s has type %s, which has no fields", path, prefix, c.typeString(cur))
			return part, false
		}
		obj, index, _ := types.LookupFieldOrMethod(base, false, c.pkg.Types, name)
		field, isField := obj.(*types.Var)
		switch {
		case obj == nil && index != nil:
			c.errorf(pos, "key field %s: %s is ambiguous in %s: %s; name the one to key on by its full path",
				path, name, c.describe(base, prefix), strings.Join(c.ambiguous(base, name, joinPath(prefix)), " and "))
			return part, false
		case obj == nil:
			msg := fmt.Sprintf("key field %s: %s has no field %s", path, c.describe(base, prefix), name)
			if s := c.suggestField(base, name, joinPath(prefix)); s != "" {
				msg += fmt.Sprintf(" (did you mean %s?)", s)
			}
			c.errorf(pos, "%s", msg)
			return part, false
		case !isField:
			c.errorf(pos, "key field %s: %s is a method, not a field", path, name)
			return part, false
		case !field.Exported():
			c.errorf(pos, "key field %s: field %s is unexported; key fields must be exported (they are part of the message's encoding)", path, name)
			return part, false
		}
		// Follow the index path, which includes the embedded fields a
		// promoted field is reached through.
		t := base
		for _, idx := range index {
			if p, ok := t.Underlying().(*types.Pointer); ok {
				t = p.Elem()
			}
			f := t.Underlying().(*types.Struct).Field(idx)
			_, isPtr := f.Type().Underlying().(*types.Pointer)
			part.Hops = append(part.Hops, model.Hop{Field: f.Name(), Pointer: isPtr})
			hopTypes = append(hopTypes, f.Type())
			t = f.Type()
		}
		cur = t
	}

	if !c.keyType(pos, path, cur, &part, allowNull) {
		return part, false
	}
	column := "key_" + snake(strings.Join(elems, "_"))
	switch {
	case !columnRE.MatchString(column):
		c.errorf(pos, "key field %s cannot be named as a column (%q): idemgen names key columns after the field path in lower-case ASCII letters, digits and '_'; use ASCII field names", path, column)
		return part, false
	case len(column) > 63:
		c.errorf(pos, "key field %s would be stored in column %s, %d bytes long, more than PostgreSQL's 63-byte identifiers; key on a field with a shorter name (or path)", path, column, len(column))
		return part, false
	}
	part.Column = column
	// The generated tests allocate the structs that pointer hops lead
	// through when they build a message.
	for i := range part.Hops[:len(part.Hops)-1] {
		if p, ok := hopTypes[i].Underlying().(*types.Pointer); ok {
			elem, ok := c.modelType(p.Elem(), pos)
			if !ok {
				return part, false
			}
			part.Hops[i].Elem = &elem
		}
	}
	t, ok := c.modelType(cur, pos)
	part.Type = t
	return part, ok
}

// keyType classifies the key field's type and records its column type and
// the Go type its value is sent as. A nullable wrapper of a key type (a
// pointer, a database/sql Null type, a pgtype type) makes the part nullable
// when allowNull is set.
func (c *checker) keyType(pos diag.Pos, path string, t types.Type, part *model.KeyPart, allowNull bool) bool {
	inner, null, problem := unwrapNullable(t)
	switch {
	case problem != "":
		c.errorf(pos, "key field %s has type %s: %s", path, c.typeString(t), problem)
		return false
	case null != nil && !allowNull:
		c.errorf(pos, "field %s has type %s; it must not be nullable", path, c.typeString(t))
		return false
	}
	part.Null = null
	convert := func(goType string, basic types.Type) string {
		if types.Identical(inner, basic) {
			return ""
		}
		return goType
	}
	switch u := inner.Underlying().(type) {
	case *types.Basic:
		switch {
		case u.Kind() == types.String:
			part.Kind, part.SQLType, part.GoValue = model.KeyString, "text", convert("string", types.Typ[types.String])
			return true
		case u.Info()&types.IsInteger != 0:
			part.Kind = model.KeyInt
			part.SQLType, part.GoValue = integerColumn(u.Kind())
			if part.GoValue == "int64" {
				part.GoValue = convert("int64", types.Typ[types.Int64])
			} else {
				part.GoValue = convert("uint64", types.Typ[types.Uint64])
			}
			return true
		case u.Info()&types.IsFloat != 0:
			c.errorf(pos, "key field %s is a floating-point number (%s): rounding makes it an unstable key; use a string or an integer", path, c.typeString(t))
			return false
		case u.Kind() == types.Bool:
			c.errorf(pos, "key field %s is a bool: two values cannot identify a message", path)
			return false
		}
	case *types.Array:
		if b, ok := u.Elem().Underlying().(*types.Basic); ok && b.Kind() == types.Byte && u.Len() == 16 {
			part.Kind, part.SQLType = model.KeyUUID, "uuid"
			part.GoValue = convert("[16]byte", types.NewArray(types.Typ[types.Byte], 16))
			return true
		}
	case *types.Map, *types.Slice, *types.Interface:
		c.errorf(pos, "key field %s has type %s: a %s has no stable identity to deduplicate on; use a string, an integer or a UUID",
			path, c.typeString(t), kindName(u))
		return false
	}
	if isNamed(inner, "time", "Time") {
		c.errorf(pos, "key field %s is a time: receive and processing times differ between deliveries, and even a sender's timestamp is not unique; use the message id", path)
		return false
	}
	c.errorf(pos, "key field %s has type %s; a key part must be a string, an integer or a UUID ([16]byte, such as uuid.UUID), or a pointer, sql.Null or pgtype wrapper of one", path, c.typeString(t))
	return false
}

func kindName(t types.Type) string {
	switch t.(type) {
	case *types.Map:
		return "map"
	case *types.Slice:
		return "slice"
	default:
		return "interface"
	}
}

// The nullable wrappers of key types, with the field that holds the value.
var (
	sqlNullValue = map[string]string{
		"NullString": "String", "NullInt64": "Int64", "NullInt32": "Int32", "NullInt16": "Int16", "NullByte": "Byte", "Null": "V",
	}
	pgtypeValue = map[string]string{
		"Text": "String", "Int2": "Int16", "Int4": "Int32", "Int8": "Int64", "UUID": "Bytes",
	}
)

// unwrapNullable returns the value type of a nullable wrapper and how NULL is
// represented, or t itself and nil when t is not nullable. problem is set for
// a wrapper of a type that cannot be a key.
func unwrapNullable(t types.Type) (inner types.Type, null *model.Null, problem string) {
	if p, ok := t.Underlying().(*types.Pointer); ok {
		return p.Elem(), &model.Null{Pointer: true}, ""
	}
	named, ok := types.Unalias(t).(*types.Named)
	if !ok || named.Obj().Pkg() == nil {
		return t, nil, ""
	}
	var field string
	switch named.Obj().Pkg().Path() {
	case "database/sql":
		name := named.Obj().Name()
		if !strings.HasPrefix(name, "Null") {
			return t, nil, ""
		}
		if field, ok = sqlNullValue[name]; !ok {
			return t, nil, fmt.Sprintf("sql.%s wraps a type that cannot be a key part (floats, bools and times are not stable keys)", name)
		}
	case pgxPath + "/pgtype":
		if field, ok = pgtypeValue[named.Obj().Name()]; !ok {
			return t, nil, "of the pgtype types only Text, Int2, Int4, Int8 and UUID can be key parts"
		}
	default:
		return t, nil, ""
	}
	st, _ := named.Underlying().(*types.Struct)
	for i := range st.NumFields() {
		if st.Field(i).Name() == field {
			return st.Field(i).Type(), &model.Null{ValueField: field}, ""
		}
	}
	return t, nil, "its value field " + field + " is missing"
}

// integerColumn maps an integer kind to its column type and the Go type its
// values are sent as (int64 or uint64).
func integerColumn(k types.BasicKind) (sqlType, goType string) {
	switch k {
	case types.Int8, types.Int16, types.Uint8:
		return "smallint", "int64"
	case types.Int32, types.Uint16:
		return "integer", "int64"
	case types.Int, types.Int64, types.Uint32:
		return "bigint", "int64"
	default: // uint, uint64, uintptr
		return "numeric(20)", "uint64"
	}
}

// modelType converts t to the model's type expression.
func (c *checker) modelType(t types.Type, pos diag.Pos) (model.Type, bool) {
	switch t := types.Unalias(t).(type) {
	case *types.Basic:
		return model.Type{Kind: model.Basic, Name: t.Name()}, true
	case *types.Named:
		obj := t.Obj()
		mt := model.Type{Kind: model.Named, Name: obj.Name()}
		if obj.Pkg() != nil {
			if !obj.Exported() && obj.Pkg() != c.pkg.Types {
				c.errorf(pos, "type %s is unexported in package %s and cannot be named in generated code", obj.Name(), obj.Pkg().Path())
				return mt, false
			}
			mt.PkgPath, mt.PkgName = obj.Pkg().Path(), obj.Pkg().Name()
		}
		for i := range t.TypeArgs().Len() {
			a, ok := c.modelType(t.TypeArgs().At(i), pos)
			if !ok {
				return mt, false
			}
			mt.Args = append(mt.Args, a)
		}
		return mt, true
	case *types.Pointer:
		return c.elemType(model.Pointer, t.Elem(), pos)
	case *types.Slice:
		return c.elemType(model.Slice, t.Elem(), pos)
	case *types.Array:
		mt, ok := c.elemType(model.Array, t.Elem(), pos)
		mt.Len = t.Len()
		return mt, ok
	case *types.Map:
		key, ok := c.modelType(t.Key(), pos)
		if !ok {
			return key, false
		}
		mt, ok := c.elemType(model.Map, t.Elem(), pos)
		mt.Key = &key
		return mt, ok
	}
	c.errorf(pos, "type %s cannot be named in generated code; declare a named type for it", c.typeString(t))
	return model.Type{}, false
}

func (c *checker) elemType(kind model.TypeKind, elem types.Type, pos diag.Pos) (model.Type, bool) {
	e, ok := c.modelType(elem, pos)
	return model.Type{Kind: kind, Elem: &e}, ok
}

// typeString spells t as the package's own code would: local names bare,
// others qualified by package name.
func (c *checker) typeString(t types.Type) string {
	return types.TypeString(t, c.qualifier)
}

func (c *checker) qualifier(p *types.Package) string {
	if p == c.pkg.Types {
		return ""
	}
	return p.Name()
}

// ambiguous lists, for a field name that LookupFieldOrMethod found more than
// once at the shallowest depth, the full paths it is reached by.
func (c *checker) ambiguous(t types.Type, name, prefix string) []string {
	type node struct {
		t    types.Type
		path string
	}
	level := []node{{t: t}}
	seen := map[types.Type]bool{}
	for len(level) > 0 {
		var found []string
		var next []node
		for _, n := range level {
			base := n.t
			if p, ok := base.Underlying().(*types.Pointer); ok {
				base = p.Elem()
			}
			st, ok := base.Underlying().(*types.Struct)
			if !ok || seen[base] {
				continue
			}
			seen[base] = true
			for i := range st.NumFields() {
				f := st.Field(i)
				if f.Name() == name && n.path != "" {
					found = append(found, prefix+n.path+name)
				}
				if f.Embedded() {
					next = append(next, node{t: f.Type(), path: n.path + f.Name() + "."})
				}
			}
		}
		if len(found) > 1 {
			return found
		}
		level = next
	}
	return []string{"it is promoted from more than one embedded struct at the same depth"}
}

// suggestField returns the path of the field of t (promoted ones included)
// whose name differs from name only in case, or is a likely typo of it: the
// bare name when it is unambiguous, else its full paths.
func (c *checker) suggestField(t types.Type, name, prefix string) string {
	st, ok := t.Underlying().(*types.Struct)
	if !ok {
		return ""
	}
	var names []string
	for _, f := range fieldsOf(st, map[*types.Struct]bool{}) {
		if f.Exported() && !f.Embedded() && !slices.Contains(names, f.Name()) {
			names = append(names, f.Name())
		}
	}
	best := ""
	for _, n := range names {
		if strings.EqualFold(n, name) {
			best = n
			break
		}
	}
	if best == "" {
		best = directive.Suggest(name, names)
	}
	if best == "" {
		return ""
	}
	if obj, index, _ := types.LookupFieldOrMethod(t, false, c.pkg.Types, best); obj == nil && index != nil {
		return strings.Join(c.ambiguous(t, best, prefix), " or ")
	}
	return prefix + best
}

// fieldsOf returns the fields of st and those promoted through its embedded
// structs.
func fieldsOf(st *types.Struct, seen map[*types.Struct]bool) []*types.Var {
	if seen[st] {
		return nil
	}
	seen[st] = true
	var out []*types.Var
	for i := range st.NumFields() {
		f := st.Field(i)
		out = append(out, f)
		if !f.Embedded() {
			continue
		}
		t := f.Type()
		if p, ok := t.Underlying().(*types.Pointer); ok {
			t = p.Elem()
		}
		if inner, ok := t.Underlying().(*types.Struct); ok {
			out = append(out, fieldsOf(inner, seen)...)
		}
	}
	return out
}

// joinPath returns prefix with a trailing dot, or "" for the message itself.
func joinPath(prefix string) string {
	if prefix == "" {
		return ""
	}
	return prefix + "."
}

func (c *checker) describe(t types.Type, prefix string) string {
	if prefix == "" {
		return "message type " + c.typeString(t)
	}
	return prefix + " (" + c.typeString(t) + ")"
}

func joinWhere(where, next string) string {
	if where == "" {
		return next
	}
	return where + "." + strings.TrimPrefix(next, "field ")
}

// hasMethod reports whether t or *t has a method called name.
func hasMethod(t types.Type, name string) bool {
	if _, isPtr := t.(*types.Pointer); !isPtr {
		t = types.NewPointer(t)
	}
	return types.NewMethodSet(t).Lookup(nil, name) != nil
}

func isNamed(t types.Type, pkgPath, name string) bool {
	n, ok := types.Unalias(t).(*types.Named)
	return ok && n.Obj().Pkg() != nil && n.Obj().Pkg().Path() == pkgPath && n.Obj().Name() == name
}

func reflectTag(tag, key string) string {
	v, _, _ := strings.Cut(structTagLookup(tag, key), ",")
	return v
}

// structTagLookup is reflect.StructTag.Get without reflect.
func structTagLookup(tag, key string) string {
	for tag != "" {
		i := 0
		for i < len(tag) && tag[i] == ' ' {
			i++
		}
		tag = tag[i:]
		i = 0
		for i < len(tag) && tag[i] > ' ' && tag[i] != ':' && tag[i] != '"' {
			i++
		}
		if i == 0 || i+1 >= len(tag) || tag[i] != ':' || tag[i+1] != '"' {
			return ""
		}
		name := tag[:i]
		tag = tag[i+1:]
		i = 1
		for i < len(tag) && tag[i] != '"' {
			if tag[i] == '\\' {
				i++
			}
			i++
		}
		if i >= len(tag) {
			return ""
		}
		value := tag[:i+1]
		tag = tag[i+1:]
		if name == key {
			v, err := unquote(value)
			if err != nil {
				return ""
			}
			return v
		}
	}
	return ""
}

// snake turns a Go field path into a column name: OrderID → order_id,
// HTTPServer → http_server.
func snake(s string) string {
	var b strings.Builder
	r := []rune(s)
	for i, c := range r {
		if unicode.IsUpper(c) {
			if i > 0 && r[i-1] != '_' && (unicode.IsLower(r[i-1]) || unicode.IsDigit(r[i-1]) ||
				(i+1 < len(r) && unicode.IsLower(r[i+1]))) {
				b.WriteByte('_')
			}
			b.WriteRune(unicode.ToLower(c))
			continue
		}
		b.WriteRune(c)
	}
	return b.String()
}

func longestPart(name string) int {
	n := 0
	for _, p := range strings.Split(name, ".") {
		n = max(n, len(p))
	}
	return n
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func unquote(s string) (string, error) { return strconv.Unquote(s) }
