package load

import (
	"fmt"
	"go/types"
	"strings"

	"github.com/idemgen/idemgen/internal/diag"
	"github.com/idemgen/idemgen/internal/model"
)

// keyType classifies the key field's type and records its Go facts (kind,
// integer width and signedness, nullability) and the Go type its value is
// sent as. A nullable wrapper of a key type (a
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
			part.Kind, part.GoValue = model.KeyString, convert("string", types.Typ[types.String])
			return true
		case u.Info()&types.IsInteger != 0:
			part.Kind = model.KeyInt
			part.Bits, part.Unsigned = integerWidth(u.Kind())
			if part.FitsInt64() {
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
			part.Kind = model.KeyUUID
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

// kindName names the kind of a map, slice or interface type for messages.
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

// integerWidth returns the width in bits and the signedness of an integer
// kind. int, uint and uintptr count as 64 bits, whatever the build's word
// size, so that an inbox's columns are the same on every platform.
func integerWidth(k types.BasicKind) (bits int, unsigned bool) {
	switch k {
	case types.Int8:
		return 8, false
	case types.Int16:
		return 16, false
	case types.Int32:
		return 32, false
	case types.Int, types.Int64:
		return 64, false
	case types.Uint8:
		return 8, true
	case types.Uint16:
		return 16, true
	case types.Uint32:
		return 32, true
	default: // uint, uint64, uintptr
		return 64, true
	}
}
