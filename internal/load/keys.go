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
	var hopTypes []types.Type
	cur := msg
	elems := strings.Split(path, ".")
	if problem := envelopeKeyProblem(msg, elems[0]); problem != "" {
		c.errorf(pos, "key field %s of %s: %s", path, c.typeString(msg), problem)
		return part, false
	}
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
