package load

import (
	"go/types"
	"slices"
	"strings"

	"github.com/idemgen/idemgen/internal/directive"
)

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

// describe names, in messages, the struct a field is looked up in: the
// message type, or the path prefix and its type.
func (c *checker) describe(t types.Type, prefix string) string {
	if prefix == "" {
		return "message type " + c.typeString(t)
	}
	return prefix + " (" + c.typeString(t) + ")"
}
