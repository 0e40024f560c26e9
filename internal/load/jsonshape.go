package load

import (
	"fmt"
	"go/types"
	"reflect"
	"slices"
	"strings"

	"github.com/idemgen/idemgen/internal/model"
)

// jsonShape returns the JSON shape of t's values as encoding/json encodes
// them, or a problem saying why they cannot be encoded (decode: or decoded
// back into a t that equals the one encoded).
func jsonShape(t types.Type, decode bool, qual types.Qualifier) (*model.Shape, string) {
	w := &jsonWalker{decode: decode, qual: qual, active: map[types.Type]bool{}}
	s := w.walk(t, "")
	return s, w.problem
}

// jsonProblem says why values of t cannot be encoded as JSON (decode: and
// decoded back into a t), or "" when they can.
func jsonProblem(t types.Type, decode bool, qual types.Qualifier) string {
	_, problem := jsonShape(t, decode, qual)
	return problem
}

type jsonWalker struct {
	decode  bool
	qual    types.Qualifier // spells type names in messages
	problem string
	// active are the named types being walked: a type met again inside
	// itself is recursive, and its shape is not repeated.
	active map[types.Type]bool
}

func (w *jsonWalker) str(t types.Type) string { return types.TypeString(t, w.qual) }

func (w *jsonWalker) fail(where, msg string) *model.Shape {
	if w.problem == "" {
		if where != "" {
			msg = where + ": " + msg
		}
		w.problem = msg
	}
	return &model.Shape{Kind: model.JSONAny}
}

func (w *jsonWalker) walk(t types.Type, where string) *model.Shape {
	t = types.Unalias(t)
	if p, ok := t.(*types.Pointer); ok {
		return w.walk(p.Elem(), where)
	}
	switch {
	case isNamed(t, "time", "Time"):
		return &model.Shape{Kind: model.JSONString}
	case isNamed(t, "encoding/json", "Number"):
		return &model.Shape{Kind: model.JSONNumber}
	case isNamed(t, "encoding/json", "RawMessage"):
		return &model.Shape{Kind: model.JSONAny}
	case hasMethod(t, "MarshalJSON"):
		if w.decode && !hasMethod(t, "UnmarshalJSON") {
			return w.fail(where, fmt.Sprintf("%s has a MarshalJSON method but no UnmarshalJSON, so what it writes cannot be read back", w.str(t)))
		}
		return &model.Shape{Kind: model.JSONAny}
	case hasMethod(t, "MarshalText"):
		if w.decode && !hasMethod(t, "UnmarshalText") && !hasMethod(t, "UnmarshalJSON") {
			return w.fail(where, fmt.Sprintf("%s has a MarshalText method but no UnmarshalText, so what it writes cannot be read back", w.str(t)))
		}
		return &model.Shape{Kind: model.JSONString}
	}
	if _, named := t.(*types.Named); named {
		if w.active[t] {
			kind := model.JSONAny
			switch t.Underlying().(type) {
			case *types.Struct, *types.Map:
				kind = model.JSONObject
			case *types.Slice, *types.Array:
				kind = model.JSONArray
			}
			return &model.Shape{Kind: kind, Recursive: true}
		}
		w.active[t] = true
		defer delete(w.active, t)
	}

	switch u := t.Underlying().(type) {
	case *types.Basic:
		switch {
		case u.Kind() == types.String:
			return &model.Shape{Kind: model.JSONString}
		case u.Kind() == types.Bool:
			return &model.Shape{Kind: model.JSONBool}
		case u.Info()&(types.IsInteger|types.IsFloat) != 0 && u.Kind() != types.Uintptr:
			return &model.Shape{Kind: model.JSONNumber}
		}
		return w.fail(where, fmt.Sprintf("%s has no JSON encoding", w.str(u)))
	case *types.Slice:
		if isByte(u.Elem()) {
			// encoding/json writes a []byte as a base64 string.
			return &model.Shape{Kind: model.JSONString}
		}
		return &model.Shape{Kind: model.JSONArray, Elem: w.walk(u.Elem(), where)}
	case *types.Array:
		return &model.Shape{Kind: model.JSONArray, Elem: w.walk(u.Elem(), where)}
	case *types.Map:
		keys := w.mapKeys(u.Key(), where)
		return &model.Shape{Kind: model.JSONObject, Keys: keys, Elem: w.walk(u.Elem(), where)}
	case *types.Struct:
		return w.object(t, u, where)
	case *types.Interface:
		if !w.decode {
			return &model.Shape{Kind: model.JSONAny}
		}
		if u.Empty() {
			return w.fail(where, fmt.Sprintf("a stored result decodes into %s as map[string]any, []any, float64, string or bool, not as the value the handler returned; use a concrete type (or json.RawMessage)", w.str(t)))
		}
		return w.fail(where, fmt.Sprintf("a stored result cannot be decoded back into the interface type %s (encoding/json cannot choose a concrete type); use a concrete type", w.str(t)))
	case *types.Chan:
		return w.fail(where, "a channel has no JSON encoding")
	case *types.Signature:
		return w.fail(where, "a func has no JSON encoding")
	case *types.TypeParam:
		return w.fail(where, "a type parameter has no known encoding")
	}
	return w.fail(where, fmt.Sprintf("%s has no JSON encoding", w.str(t)))
}

func isByte(t types.Type) bool {
	b, ok := t.Underlying().(*types.Basic)
	return ok && b.Kind() == types.Uint8 && !hasMethod(t, "MarshalJSON") && !hasMethod(t, "MarshalText")
}

// mapKeys returns the kind a map's keys are written from, as encoding/json
// accepts them: strings, integers, or types with MarshalText (and
// UnmarshalText to decode).
func (w *jsonWalker) mapKeys(k types.Type, where string) model.JSONKind {
	b, basic := k.Underlying().(*types.Basic)
	switch {
	case basic && b.Kind() == types.String:
		return model.JSONString
	case hasMethod(k, "MarshalText") && (!w.decode || hasMethod(k, "UnmarshalText")):
		return model.JSONString
	case basic && b.Info()&types.IsInteger != 0 && b.Kind() != types.Uintptr:
		return model.JSONNumber
	}
	w.fail(where, fmt.Sprintf("a map with %s keys has no JSON encoding (keys must be strings, integers, or types with MarshalText and UnmarshalText)", w.str(k)))
	return model.JSONString
}

// jsonField is a struct field as encoding/json sees it.
type jsonField struct {
	name   string
	typ    types.Type
	tagged bool // the name comes from a json tag
	quoted bool // ",string": the value is written inside a JSON string
	depth  int  // of embedding
	path   string
}

// object returns the shape of a struct: its fields as encoding/json selects
// them (exported or promoted from embedded structs, json:"-" skipped, the
// shallowest of equal names winning, a tie of untagged ones dropping all).
func (w *jsonWalker) object(t types.Type, st *types.Struct, where string) *model.Shape {
	var fields []jsonField
	w.fields(st, 0, "", map[*types.Struct]bool{}, &fields, where)
	shape := &model.Shape{Kind: model.JSONObject, Fields: map[string]*model.Shape{}}
	byName := map[string][]jsonField{}
	for _, f := range fields {
		byName[f.name] = append(byName[f.name], f)
	}
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for n := range byName {
			if !yield(n) {
				return
			}
		}
	}) {
		f, ok := dominant(byName[name])
		if !ok {
			if w.decode {
				var paths []string
				for _, g := range byName[name] {
					paths = append(paths, g.path)
				}
				w.fail(where, fmt.Sprintf("fields %s of %s all encode as %q at the same depth, so encoding/json drops them all; give them distinct json names", strings.Join(paths, " and "), w.str(t), name))
			}
			continue
		}
		fwhere := joinWhere(where, "field "+f.path)
		if f.quoted {
			shape.Fields[name] = &model.Shape{Kind: model.JSONString}
			continue
		}
		shape.Fields[name] = w.walk(f.typ, fwhere)
	}
	if w.decode && st.NumFields() > 0 && len(shape.Fields) == 0 {
		return w.fail(where, fmt.Sprintf("%s has no field that JSON encodes (its fields are unexported or tagged json:\"-\"), so a duplicate would get the zero value back; export the fields, or give the type MarshalJSON and UnmarshalJSON methods", w.str(t)))
	}
	return shape
}

func dominant(fs []jsonField) (jsonField, bool) {
	minDepth := fs[0].depth
	for _, f := range fs {
		minDepth = min(minDepth, f.depth)
	}
	var top []jsonField
	for _, f := range fs {
		if f.depth == minDepth {
			top = append(top, f)
		}
	}
	if len(top) == 1 {
		return top[0], true
	}
	var tagged []jsonField
	for _, f := range top {
		if f.tagged {
			tagged = append(tagged, f)
		}
	}
	if len(tagged) == 1 {
		return tagged[0], true
	}
	return jsonField{}, false
}

func (w *jsonWalker) fields(st *types.Struct, depth int, prefix string, seen map[*types.Struct]bool, out *[]jsonField, where string) {
	if seen[st] {
		return
	}
	seen[st] = true
	defer delete(seen, st)
	for i := range st.NumFields() {
		f := st.Field(i)
		tag := reflect.StructTag(st.Tag(i)).Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		ft := types.Unalias(f.Type())
		inner := ft
		if p, ok := ft.(*types.Pointer); ok {
			inner = types.Unalias(p.Elem())
		}
		innerStruct, isStruct := inner.Underlying().(*types.Struct)
		if f.Embedded() {
			if !f.Exported() && !isStruct {
				continue
			}
			if name == "" && isStruct && !hasMethod(inner, "MarshalJSON") && !hasMethod(inner, "MarshalText") {
				if _, ptr := ft.(*types.Pointer); ptr && w.decode && !f.Exported() {
					w.fail(where, fmt.Sprintf("field %s%s is an embedded pointer to the unexported struct type %s, which encoding/json cannot allocate when it decodes", prefix, f.Name(), w.str(inner)))
				}
				w.fields(innerStruct, depth+1, prefix+f.Name()+".", seen, out, where)
				continue
			}
		} else if !f.Exported() {
			continue
		}
		jf := jsonField{name: name, typ: f.Type(), tagged: name != "", depth: depth, path: prefix + f.Name()}
		if name == "" {
			jf.name = f.Name()
		}
		if slices.Contains(strings.Split(opts, ","), "string") {
			if b, ok := inner.Underlying().(*types.Basic); ok && b.Info()&(types.IsBoolean|types.IsInteger|types.IsFloat|types.IsString) != 0 {
				jf.quoted = true
			}
		}
		*out = append(*out, jf)
	}
}

// joinWhere extends the description of where in a type a JSON problem is.
func joinWhere(where, next string) string {
	if where == "" {
		return next
	}
	return where + "." + strings.TrimPrefix(next, "field ")
}
