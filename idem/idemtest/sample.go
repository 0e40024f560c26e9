package idemtest

import (
	"database/sql"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode"
	"unsafe"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
)

// SampleTime is the time Sample puts into every time.Time field: fixed, so
// that two deliveries of a sample message write the same values.
var SampleTime = time.Date(2024, time.January, 2, 3, 4, 5, 0, time.UTC)

// sampleDepth bounds how deep Sample fills nested values.
const sampleDepth = 8

// Sample returns a value of M with every field set, the same every time:
// strings "sample-" and the field's name in kebab case, integers 100, floats
// 1.5, bools true, time.Time SampleTime, time.Duration a second, byte arrays
// (UUIDs) the bytes 1 to n with a version 4 UUID's marks, json.RawMessage a
// JSON object, slices one element, maps one entry, pointers allocated, and
// the fields of structs filled in turn. Unexported fields, interfaces,
// channels and functions are left as they are, and a type met again inside
// itself is left zero (a pointer to it nil). The generated tests of a handler without fixture=
// deliver Sample's message: every field the handler reads holds something,
// so that its effect shows in the database.
func Sample[M any]() M {
	var m M
	fill(reflect.ValueOf(&m).Elem(), "value", 0, map[reflect.Type]bool{})
	return m
}

var (
	timeType     = reflect.TypeFor[time.Time]()
	durationType = reflect.TypeFor[time.Duration]()
	rawJSONType  = reflect.TypeFor[json.RawMessage]()
)

// fill sets v, a settable value of a field named name, as Sample says.
// open holds the types being filled, whose values inside themselves stay
// zero.
func fill(v reflect.Value, name string, depth int, open map[reflect.Type]bool) {
	t := v.Type()
	if depth > sampleDepth || open[t] {
		return
	}
	switch t {
	case timeType:
		v.Set(reflect.ValueOf(SampleTime))
		return
	case durationType:
		v.SetInt(int64(time.Second))
		return
	case rawJSONType:
		v.SetBytes([]byte(`{"sample":true}`))
		return
	}
	open[t] = true
	defer delete(open, t)
	if k := t.Kind(); (k == reflect.Pointer || k == reflect.Slice || k == reflect.Map) && open[t.Elem()] {
		return // a nil pointer, slice or map ends a type met inside itself
	}
	switch t.Kind() {
	case reflect.String:
		v.SetString("sample-" + kebab(name))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(100)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		v.SetUint(100)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(1.5)
	case reflect.Complex64, reflect.Complex128:
		v.SetComplex(complex(1.5, 0))
	case reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			fillBytes(v)
			return
		}
		for i := range v.Len() {
			fill(v.Index(i), name, depth+1, open)
		}
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			v.SetBytes([]byte("sample-" + kebab(name)))
			return
		}
		s := reflect.MakeSlice(t, 1, 1)
		fill(s.Index(0), singular(name), depth+1, open)
		v.Set(s)
	case reflect.Map:
		k, e := reflect.New(t.Key()).Elem(), reflect.New(t.Elem()).Elem()
		fill(k, name+"Key", depth+1, open)
		fill(e, singular(name), depth+1, open)
		m := reflect.MakeMapWithSize(t, 1)
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.Pointer:
		p := reflect.New(t.Elem())
		fill(p.Elem(), name, depth+1, open)
		v.Set(p)
	case reflect.Struct:
		for i := range t.NumField() {
			if f := t.Field(i); f.IsExported() {
				fill(v.Field(i), f.Name, depth+1, open)
			}
		}
	}
}

// fillBytes sets a byte array to 1, 2, ..., n; an array of 16 bytes gets the
// version and variant marks of a random (version 4) UUID, so that it is a
// valid UUID wherever one is checked.
func fillBytes(v reflect.Value) {
	n := v.Len()
	for i := range n {
		v.Index(i).SetUint(uint64(i + 1))
	}
	if n == 16 {
		v.Index(6).SetUint(uint64(v.Index(6).Uint()&0x0f | 0x40))
		v.Index(8).SetUint(uint64(v.Index(8).Uint()&0x3f | 0x80))
	}
}

// kebab spells a Go field name in kebab case: OrderID → order-id.
func kebab(name string) string {
	var b strings.Builder
	runes := []rune(name)
	for i, r := range runes {
		if unicode.IsUpper(r) {
			prevLower := i > 0 && !unicode.IsUpper(runes[i-1])
			nextLower := i > 0 && i+1 < len(runes) && unicode.IsLower(runes[i+1])
			if i > 0 && (prevLower || nextLower) {
				b.WriteByte('-')
			}
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

// singular is the name of an element of a field named name: Lines → Line.
func singular(name string) string {
	if s, ok := strings.CutSuffix(name, "s"); ok && s != "" {
		return s
	}
	return name
}

// handles are what a receiver's fields are given by fillReceiver.
type handles struct {
	pool     *pgxpool.Pool
	sqlDB    func() *sql.DB
	provider *Provider
}

var (
	poolType     = reflect.TypeFor[*pgxpool.Pool]()
	sqlDBType    = reflect.TypeFor[*sql.DB]()
	providerType = reflect.TypeFor[*Provider]()
)

// sampleReceiver returns a receiver of type V whose fields of database
// handle types hold db's pool (directly, as *sql.DB, or as an interface the
// pool satisfies, such as idem.DB or sqlc's DBTX), and whose fields of type
// *Provider, or of an interface it satisfies, hold p, exported or not, and also inside
// nested structs and pointers to structs. A handler that writes through its
// service's pool then really writes, and the scenarios see it.
func sampleReceiver[V any](t testing.TB, db *DB, p *Provider) V {
	var v V
	h := handles{provider: p}
	if db != nil {
		h.pool = db.Pool
		var opened *sql.DB
		h.sqlDB = func() *sql.DB {
			if opened == nil {
				opened = stdlib.OpenDBFromPool(db.Pool)
				t.Cleanup(func() { _ = opened.Close() })
			}
			return opened
		}
	}
	rv := reflect.ValueOf(&v).Elem()
	switch t := rv.Type(); {
	case t.Kind() == reflect.Pointer && t.Elem().Kind() == reflect.Struct:
		rv.Set(reflect.New(t.Elem()))
		h.fillStruct(rv.Elem(), 0)
	case t.Kind() == reflect.Pointer:
		rv.Set(reflect.New(t.Elem()))
	case t.Kind() == reflect.Struct:
		h.fillStruct(rv, 0)
	}
	return v
}

// handleFor returns the handle a field of type t gets, if any.
func (h handles) handleFor(t reflect.Type) (reflect.Value, bool) {
	switch {
	case h.pool != nil && t == poolType:
		return reflect.ValueOf(h.pool), true
	case h.pool != nil && t == sqlDBType:
		return reflect.ValueOf(h.sqlDB()), true
	case h.provider != nil && t == providerType:
		return reflect.ValueOf(h.provider), true
	case t.Kind() != reflect.Interface || t.NumMethod() == 0:
		return reflect.Value{}, false
	case h.pool != nil && poolType.Implements(t):
		return reflect.ValueOf(h.pool), true
	case h.pool != nil && sqlDBType.Implements(t):
		return reflect.ValueOf(h.sqlDB()), true
	case h.provider != nil && providerType.Implements(t):
		return reflect.ValueOf(h.provider), true
	}
	return reflect.Value{}, false
}

// fillStruct gives each field of v, an addressable struct, its handle, and
// reports whether it gave one. A nil pointer to a struct is allocated when
// that struct has a field to give.
func (h handles) fillStruct(v reflect.Value, depth int) bool {
	if depth > sampleDepth {
		return false
	}
	filled := false
	for i := range v.NumField() {
		// Unexported fields too: a service keeps its pool in one as often
		// as not.
		f := v.Field(i)
		f = reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem()
		if !f.IsZero() {
			continue
		}
		if hv, ok := h.handleFor(f.Type()); ok {
			f.Set(hv)
			filled = true
			continue
		}
		switch ft := f.Type(); {
		case ft.Kind() == reflect.Struct:
			filled = h.fillStruct(f, depth+1) || filled
		case ft.Kind() == reflect.Pointer && ft.Elem().Kind() == reflect.Struct && ft != poolType && ft != sqlDBType && ft != providerType:
			p := reflect.New(ft.Elem())
			if h.fillStruct(p.Elem(), depth+1) {
				f.Set(p)
				filled = true
			}
		}
	}
	return filled
}
