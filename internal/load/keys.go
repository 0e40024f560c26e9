package load

import (
	"fmt"
	"go/types"
	"strings"

	"github.com/idemgen/idemgen/internal/diag"
	"github.com/idemgen/idemgen/internal/directive"
	"github.com/idemgen/idemgen/internal/model"
)

// key resolves the key option's field paths against the message struct.
func (c *checker) key(o directive.Option, msg types.Type) []model.KeyPart {
	var parts []model.KeyPart
	columns := map[string]string{}
	for _, item := range o.List() {
		path, pos := item.Text, item.Pos
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

// keyPart resolves one field path, at pos in the directive, against the
// message struct: the hops to the field, its key type and its column. The
// guard's fields are resolved the same way, with allowNull unset.
func (c *checker) keyPart(pos diag.Pos, path string, msg types.Type, allowNull bool) (model.KeyPart, bool) {
	part := model.KeyPart{Path: path}
	elems := strings.Split(path, ".")
	if problem := envelopeKeyProblem(msg, elems[0]); problem != "" {
		c.errorf(pos, "key field %s of %s: %s", path, c.typeString(msg), problem)
		return part, false
	}
	walked, ok := c.walkPath(pos, path, msg, keyPath)
	if !ok {
		return part, false
	}
	part.Hops = walked.hops
	cur, hopTypes := walked.leaf, walked.hopTypes

	if !c.keyType(pos, path, cur, &part, allowNull) {
		return part, false
	}
	column, problem := keyColumn(path)
	if problem != "" {
		c.errorf(pos, "%s", problem)
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
	if okV && (!ver.FitsInt64()) {
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

// envelopeKeyProblem says why the field name of the message type
// idem.Message[T] (or a pointer to it) cannot start a key path, or returns ""
// when it can or msg is another type.
func envelopeKeyProblem(msg types.Type, name string) string {
	if p, ok := types.Unalias(msg).(*types.Pointer); ok {
		msg = p.Elem()
	}
	if !isNamed(msg, idemPath, "Message") {
		return ""
	}
	return envelopeFieldProblem(name)
}

// envelopeFieldProblem says why the field name of idem.Message cannot start
// a key path, or returns "" when it can.
func envelopeFieldProblem(name string) string {
	switch name {
	case "Attempt":
		return "the delivery attempt changes between deliveries of one message and is not part of its fingerprint (json:\"-\"), so every redelivery would look new; key on ID (the broker's message id) or on a field of Body"
	case "Headers":
		return "the headers are not part of the message's fingerprint (json:\"-\") and may change between deliveries of one message; key on ID (the broker's message id) or on a field of Body"
	}
	return ""
}

// pathRules are what differs between the field paths of a directive: the
// key's parts (and the guard's fields) and the partition's time field.
type pathRules struct {
	what     string // the path in errors: "key field"
	pick     string // what the path is for: "key on"
	exported string // why its fields must be exported
	// pointers: whether the path may go through pointer fields (the
	// generated tests then allocate what they point to).
	pointers bool
}

var (
	keyPath = pathRules{what: "key field", pick: "key on", pointers: true,
		exported: "key fields must be exported (they are part of the message's encoding)"}
	timePath = pathRules{what: "time field", pick: "partition by",
		exported: "the time must be an exported field (it is part of the message's encoding)"}
)

// walkedPath is a field path resolved against a message type: a hop for each
// field it goes through (with the embedded fields a promoted field is
// reached through), the type of each hop's field, and the type it ends at.
type walkedPath struct {
	hops     []model.Hop
	hopTypes []types.Type
	leaf     types.Type
}

// walkPath resolves the dotted field path at pos against msg under rules,
// reporting what is wrong with it.
func (c *checker) walkPath(pos diag.Pos, path string, msg types.Type, rules pathRules) (walkedPath, bool) {
	var w walkedPath
	cur := msg
	if p, ok := cur.Underlying().(*types.Pointer); ok && !rules.pointers {
		cur = p.Elem() // a pointer to the message is not a hop
	}
	elems := strings.Split(path, ".")
	for i, name := range elems {
		prefix := strings.Join(elems[:i], ".")
		if name == "" {
			c.errorf(pos, "%s path %q has an empty element", rules.what, path)
			return w, false
		}
		base := cur
		if p, ok := base.Underlying().(*types.Pointer); ok && rules.pointers {
			base = p.Elem()
		}
		if _, ok := base.Underlying().(*types.Struct); !ok {
			c.errorf(pos, "%s %s: %s has type %s, which has no fields", rules.what, path, prefix, c.typeString(cur))
			return w, false
		}
		obj, index, _ := types.LookupFieldOrMethod(base, false, c.pkg.Types, name)
		field, isField := obj.(*types.Var)
		switch {
		case obj == nil && index != nil:
			c.errorf(pos, "%s %s: %s is ambiguous in %s: %s; name the one to %s by its full path",
				rules.what, path, name, c.describe(base, prefix), strings.Join(c.ambiguous(base, name, joinPath(prefix)), " and "), rules.pick)
			return w, false
		case obj == nil:
			msg := fmt.Sprintf("%s %s: %s has no field %s", rules.what, path, c.describe(base, prefix), name)
			if s := c.suggestField(base, name, joinPath(prefix)); s != "" {
				msg += fmt.Sprintf(" (did you mean %s?)", s)
			}
			c.errorf(pos, "%s", msg)
			return w, false
		case !isField:
			c.errorf(pos, "%s %s: %s is a method, not a field", rules.what, path, name)
			return w, false
		case !field.Exported():
			c.errorf(pos, "%s %s: field %s is unexported; %s", rules.what, path, name, rules.exported)
			return w, false
		}
		t := base
		for j, idx := range index {
			if p, ok := t.Underlying().(*types.Pointer); ok {
				t = p.Elem()
			}
			f := t.Underlying().(*types.Struct).Field(idx)
			_, isPtr := f.Type().Underlying().(*types.Pointer)
			if last := i == len(elems)-1 && j == len(index)-1; isPtr && !last && !rules.pointers {
				c.errorf(pos, "%s %s is reached through the pointer %s; partition by a time.Time field reached without one "+
					"(the generated tests set it on a copy of the message, which would share what the pointer points to)", rules.what, path, f.Name())
				return w, false
			}
			w.hops = append(w.hops, model.Hop{Field: f.Name(), Pointer: isPtr && rules.pointers})
			w.hopTypes = append(w.hopTypes, f.Type())
			t = f.Type()
		}
		cur = t
	}
	w.leaf = cur
	return w, true
}
