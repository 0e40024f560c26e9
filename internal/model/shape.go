package model

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// JSONKind is the kind of a JSON value.
type JSONKind string

// The JSON kinds a Shape tells apart. Any is a value whose kind the Go type
// does not fix: a custom MarshalJSON, json.RawMessage.
const (
	JSONString JSONKind = "string"
	JSONNumber JSONKind = "number"
	JSONBool   JSONKind = "bool"
	JSONObject JSONKind = "object"
	JSONArray  JSONKind = "array"
	JSONAny    JSONKind = "any"
)

// Shape is the JSON shape of a Go type's values as encoding/json writes and
// reads them: what decides whether a value stored by one version of a
// handler decodes into the result type of the next.
type Shape struct {
	Kind JSONKind
	// Fields are the members of an object encoded from a struct, by JSON
	// name; nil for a map (and for a recursive occurrence).
	Fields map[string]*Shape
	// Elem is the element of an array or the value of a map's entries.
	Elem *Shape
	// Keys is the kind a map's keys decode from: JSONString, or
	// JSONNumber for integer keys; empty for a struct.
	Keys JSONKind
	// Recursive marks an object whose type contains itself: its shape is
	// the one given further up and is not repeated.
	Recursive bool
}

// IsMap reports whether s is an object encoded from a map.
func (s *Shape) IsMap() bool { return s.Kind == JSONObject && s.Keys != "" }

// ShapeLines renders s as the lines of a record, one per path, parents
// first, members sorted by name:
//
//	$ object
//	$.Cents number
//	$.Lines array
//	$.Lines[] object
//	$.Lines[].SKU string
//	$.Tags object
//	$.Tags{string} string
//
// A member name that is not made of letters, digits and '_' is quoted (Go
// syntax); {number} is the value of a map with integer keys; "recursive"
// follows an object whose type contains itself.
func ShapeLines(s *Shape) []string {
	var lines []string
	var walk func(path string, s *Shape)
	walk = func(path string, s *Shape) {
		line := path + " " + string(s.Kind)
		if s.Recursive {
			line += " recursive"
		}
		lines = append(lines, line)
		switch {
		case s.Kind == JSONArray && s.Elem != nil:
			walk(path+"[]", s.Elem)
		case s.IsMap() && s.Elem != nil:
			walk(path+"{"+string(s.Keys)+"}", s.Elem)
		case s.Kind == JSONObject:
			for _, name := range slices.Sorted(maps.Keys(s.Fields)) {
				walk(path+"."+memberName(name), s.Fields[name])
			}
		}
	}
	walk("$", s)
	return lines
}

func memberName(name string) string {
	if name == "" {
		return strconv.Quote(name)
	}
	for _, r := range name {
		if !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return strconv.Quote(name)
		}
	}
	return name
}

// ParseShape reads the lines written by ShapeLines back into a Shape.
func ParseShape(lines []string) (*Shape, error) {
	var root *Shape
	for _, line := range lines {
		rest, recursive := strings.CutSuffix(line, " recursive")
		i := strings.LastIndexByte(rest, ' ')
		if i < 0 {
			return nil, fmt.Errorf("%q is not \"path kind\"", line)
		}
		path, kind := rest[:i], JSONKind(rest[i+1:])
		switch kind {
		case JSONString, JSONNumber, JSONBool, JSONObject, JSONArray, JSONAny:
		default:
			return nil, fmt.Errorf("%q: unknown kind %q", line, kind)
		}
		node := &Shape{Kind: kind, Recursive: recursive}
		if kind == JSONObject && !recursive {
			node.Fields = map[string]*Shape{}
		}
		if path == "$" {
			if root != nil {
				return nil, fmt.Errorf("%q: a second root", line)
			}
			root = node
			continue
		}
		if root == nil {
			return nil, fmt.Errorf("%q comes before the root line \"$ ...\"", line)
		}
		if err := root.insert(path, node); err != nil {
			return nil, fmt.Errorf("%q: %v", line, err)
		}
	}
	if root == nil {
		return nil, fmt.Errorf("no root line \"$ ...\"")
	}
	return root, nil
}

// step is one element of a shape path: [] (an array's element), {keys}
// (a map's value) or .name (a member).
type step struct {
	elem, value bool
	keys        JSONKind
	name        string
}

func parsePath(path string) ([]step, error) {
	rest, ok := strings.CutPrefix(path, "$")
	if !ok {
		return nil, fmt.Errorf("path does not start with $")
	}
	var steps []step
	for rest != "" {
		switch {
		case strings.HasPrefix(rest, "[]"):
			steps, rest = append(steps, step{elem: true}), rest[2:]
		case strings.HasPrefix(rest, "{"):
			end := strings.IndexByte(rest, '}')
			if end < 0 {
				return nil, fmt.Errorf("unclosed {")
			}
			keys := JSONKind(rest[1:end])
			if keys != JSONString && keys != JSONNumber {
				return nil, fmt.Errorf("unknown map key kind %q", keys)
			}
			steps, rest = append(steps, step{value: true, keys: keys}), rest[end+1:]
		case strings.HasPrefix(rest, `."`):
			q, err := strconv.QuotedPrefix(rest[1:])
			if err != nil {
				return nil, fmt.Errorf("malformed quoted name")
			}
			name, _ := strconv.Unquote(q)
			steps, rest = append(steps, step{name: name}), rest[1+len(q):]
		case strings.HasPrefix(rest, "."):
			end := strings.IndexAny(rest[1:], ".[{")
			if end < 0 {
				end = len(rest) - 1
			}
			if end == 0 {
				return nil, fmt.Errorf("empty member name")
			}
			steps, rest = append(steps, step{name: rest[1 : 1+end]}), rest[1+end:]
		default:
			return nil, fmt.Errorf("malformed path")
		}
	}
	return steps, nil
}

// insert puts node at path; its parent must be in s already.
func (s *Shape) insert(path string, node *Shape) error {
	steps, err := parsePath(path)
	if err != nil {
		return err
	}
	cur := s
	for i, st := range steps {
		last := i == len(steps)-1
		var next **Shape
		switch {
		case st.elem && cur.Kind == JSONArray:
			next = &cur.Elem
		case st.value && cur.Kind == JSONObject && (cur.IsMap() || len(cur.Fields) == 0):
			cur.Keys, cur.Fields = st.keys, nil
			next = &cur.Elem
		case !st.elem && !st.value && cur.Kind == JSONObject && cur.Fields != nil:
			n := cur.Fields[st.name]
			next = &n
			if last {
				cur.Fields[st.name] = node
				return nil
			}
		default:
			return fmt.Errorf("its parent is %s %s, which has no such member", article(cur.Kind), cur.Kind)
		}
		if last {
			*next = node
			return nil
		}
		if *next == nil {
			return fmt.Errorf("comes before its parent")
		}
		cur = *next
	}
	return fmt.Errorf("empty path")
}

// ShapeChanges lists the changes from old to next that values stored with
// old's shape cannot be decoded through: a member whose kind changed, a map
// whose keys became integers, a value of any kind that became one kind.
// Members added or removed decode fine (missing ones are left zero, unknown
// ones ignored) and are not listed.
func ShapeChanges(old, next *Shape) []string {
	var changes []string
	var compare func(path string, old, next *Shape)
	compare = func(path string, old, next *Shape) {
		switch {
		case old == nil || next == nil || next.Kind == JSONAny:
			return
		case old.Kind == JSONAny:
			changes = append(changes, fmt.Sprintf("%s was of any JSON kind (a custom MarshalJSON or json.RawMessage) and is a %s now", path, next.Kind))
			return
		case old.Kind != next.Kind:
			changes = append(changes, fmt.Sprintf("%s was %s %s and is %s %s now", path, article(old.Kind), old.Kind, article(next.Kind), next.Kind))
			return
		case old.Kind == JSONArray:
			compare(path+"[]", old.Elem, next.Elem)
		case old.Kind != JSONObject || old.Recursive || next.Recursive:
		case old.IsMap() && next.IsMap():
			if old.Keys == JSONString && next.Keys == JSONNumber {
				changes = append(changes, fmt.Sprintf("%s was a map with string keys and has integer keys now", path))
			}
			compare(path+"{"+string(next.Keys)+"}", old.Elem, next.Elem)
		case old.IsMap():
			for _, name := range slices.Sorted(maps.Keys(next.Fields)) {
				compare(path+"."+memberName(name), old.Elem, next.Fields[name])
			}
		case next.IsMap():
			for _, name := range slices.Sorted(maps.Keys(old.Fields)) {
				if _, err := strconv.ParseInt(name, 10, 64); err != nil && next.Keys == JSONNumber {
					changes = append(changes, fmt.Sprintf("%s became a map with integer keys, but its member %s is not an integer", path, memberName(name)))
					continue
				}
				compare(path+"."+memberName(name), old.Fields[name], next.Elem)
			}
		default:
			for _, name := range slices.Sorted(maps.Keys(old.Fields)) {
				compare(path+"."+memberName(name), old.Fields[name], next.Fields[name])
			}
		}
	}
	compare("$", old, next)
	return changes
}

func article(k JSONKind) string {
	if k == JSONObject || k == JSONArray || k == JSONAny {
		return "an"
	}
	return "a"
}
