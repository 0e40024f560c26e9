package idemimpl

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/idemgen/idemgen/idem"
)

// The payload fingerprint stored in an inbox row records the scheme that
// computed it, so that a change of scheme can never make the redelivery of a
// message processed before the change look like a reused key: 33 bytes, the
// first fingerprintV1, then the SHA-256 of the message's canonical encoding
// (below), or of its Fingerprinter bytes.
//
// A row written by a newer scheme than this version knows is reported as
// such (an error to retry once the newer code is back), never as
// ErrKeyReused.
const (
	fingerprintV1  = 1
	fingerprintLen = 1 + sha256.Size
)

// The canonical encoding (scheme 1) is what the fingerprint hashes. It is
// built so that a message type may grow: a field left at its zero value
// contributes nothing, so adding a field changes no fingerprint while the
// field is zero.
//
//   - A struct is the set of its fields as encoding/json names them (json
//     tags, "-", embedded structs flattened by the same rules), with every
//     field whose value is empty left out: the zero value (reflect.Value's
//     IsZero, so a zero nested struct, time.Time or UUID too) or an empty
//     string, slice or map. The remaining fields are written sorted by name.
//   - A map is written with its entries sorted by key (keys rendered as
//     encoding/json renders them); entries are data and are never left out.
//   - A slice or array is written with its length and every element.
//   - Numbers are written as their shortest decimal text, so an int64 field
//     that becomes an int32 or a float64 keeps its fingerprint; strings and
//     []byte are written length-prefixed, byte for byte.
//   - A value whose type implements json.Marshaler is written as its compacted
//     JSON; one implementing encoding.TextMarshaler as the text (a string).
//   - NaN and ±Inf are refused, as encoding/json refuses them.
//
// Every item starts with a tag byte and every variable-length item carries
// its length, so two different values never share an encoding.
const (
	tagObject = '{'
	tagArray  = '['
	tagString = '"'
	tagNumber = 'n'
	tagTrue   = 't'
	tagFalse  = 'f'
	tagNull   = 'z'
	tagJSON   = 'j'
)

// fingerprint returns the payload fingerprint of msg in the current scheme.
func fingerprint(msg any) ([]byte, error) {
	out := make([]byte, 1, fingerprintLen)
	out[0] = fingerprintV1
	if f, ok := msg.(idem.Fingerprinter); ok {
		sum := sha256.Sum256(f.IdemFingerprint())
		return append(out, sum[:]...), nil
	}
	e := encStates.Get().(*encState)
	defer encStates.Put(e)
	e.reset()
	if err := e.value(reflect.ValueOf(msg)); err != nil {
		return nil, fmt.Errorf("%w: fingerprint the message: %w", idem.ErrUnencodable, err)
	}
	return e.sum(out), nil
}

// sameFingerprint reports whether the fingerprint stored in an inbox row is
// fp, the current fingerprint of the message.
func sameFingerprint(stored, fp []byte) (bool, error) {
	switch {
	case len(stored) == fingerprintLen && stored[0] == fingerprintV1:
		return bytes.Equal(stored, fp), nil
	case len(stored) == fingerprintLen:
		return false, fmt.Errorf("idem: the inbox row's fingerprint is of scheme %d, which this version of idem does not know (it knows 1); a newer version wrote it: deploy that version again, or retry once it is back", stored[0])
	default:
		return false, fmt.Errorf("idem: the inbox row's fingerprint is %d bytes long; want %d", len(stored), fingerprintLen)
	}
}

// encState is one canonical encoding in progress: the bytes go to the hash
// through a small buffer.
type encState struct {
	h     hash.Hash
	buf   []byte
	depth int
	keys  []mapEntry   // scratch for sorting map keys, reused
	json  bytes.Buffer // scratch for compacting MarshalJSON output, reused
}

type mapEntry struct {
	key string
	val reflect.Value
}

var encStates = sync.Pool{New: func() any {
	return &encState{h: sha256.New(), buf: make([]byte, 0, 512)}
}}

func (e *encState) reset() {
	e.h.Reset()
	e.buf = e.buf[:0]
	e.depth = 0
}

func (e *encState) flushIfFull() {
	if len(e.buf) >= 448 {
		e.h.Write(e.buf)
		e.buf = e.buf[:0]
	}
}

func (e *encState) sum(out []byte) []byte {
	e.h.Write(e.buf)
	e.buf = e.buf[:0]
	return e.h.Sum(out)
}

func (e *encState) byte1(b byte) {
	e.buf = append(e.buf, b)
	e.flushIfFull()
}

func (e *encState) length(n int) {
	e.buf = binary.AppendUvarint(e.buf, uint64(n))
}

func (e *encState) bytes(tag byte, s []byte) {
	e.buf = append(e.buf, tag)
	e.length(len(s))
	if len(s) > 256 {
		e.h.Write(e.buf)
		e.h.Write(s)
		e.buf = e.buf[:0]
		return
	}
	e.buf = append(e.buf, s...)
	e.flushIfFull()
}

func (e *encState) string(tag byte, s string) {
	e.buf = append(e.buf, tag)
	e.length(len(s))
	if len(s) > 256 {
		e.h.Write(e.buf)
		e.buf = append(e.buf[:0], s...) // hash.Hash has no WriteString; copy through the buffer
		e.h.Write(e.buf)
		e.buf = e.buf[:0]
		return
	}
	e.buf = append(e.buf, s...)
	e.flushIfFull()
}

// startNumber and endNumber enclose the decimal text of a number, which
// they length-prefix (it is at most 24 bytes long).
func (e *encState) startNumber() int {
	e.buf = append(e.buf, tagNumber, 0)
	return len(e.buf)
}

func (e *encState) endNumber(at int) {
	e.buf[at-1] = byte(len(e.buf) - at)
	e.flushIfFull()
}

var (
	jsonMarshalerType = reflect.TypeFor[json.Marshaler]()
	textMarshalerType = reflect.TypeFor[encoding.TextMarshaler]()
)

// maxDepth bounds the nesting of a message, as encoding/json bounds pointer
// cycles.
const maxDepth = 1000

func (e *encState) value(v reflect.Value) error {
	if !v.IsValid() {
		e.byte1(tagNull)
		return nil
	}
	if e.depth++; e.depth > maxDepth {
		return &json.UnsupportedValueError{Value: v, Str: "encountered a cycle or more than 1000 levels of nesting via " + v.Type().String()}
	}
	err := encoderFor(v.Type())(e, v)
	e.depth--
	return err
}

type encoderFunc func(e *encState, v reflect.Value) error

var encoders sync.Map // reflect.Type -> encoderFunc

// encoderFor returns the encoder of t, built once per type (recursive types
// wait for their own encoder, as encoding/json's do).
func encoderFor(t reflect.Type) encoderFunc {
	if f, ok := encoders.Load(t); ok {
		return f.(encoderFunc)
	}
	var (
		wg sync.WaitGroup
		f  encoderFunc
	)
	wg.Add(1)
	fi, loaded := encoders.LoadOrStore(t, encoderFunc(func(e *encState, v reflect.Value) error {
		wg.Wait()
		return f(e, v)
	}))
	if loaded {
		return fi.(encoderFunc)
	}
	f = newEncoder(t, true)
	wg.Done()
	encoders.Store(t, f)
	return f
}

func newEncoder(t reflect.Type, allowAddr bool) encoderFunc {
	if t.Kind() != reflect.Pointer && allowAddr && reflect.PointerTo(t).Implements(jsonMarshalerType) {
		return condAddrEncoder(addrMarshalerEncoder, newEncoder(t, false))
	}
	if t.Implements(jsonMarshalerType) {
		return marshalerEncoder
	}
	if t.Kind() != reflect.Pointer && allowAddr && reflect.PointerTo(t).Implements(textMarshalerType) {
		return condAddrEncoder(addrTextMarshalerEncoder, newEncoder(t, false))
	}
	if t.Implements(textMarshalerType) {
		return textMarshalerEncoder
	}
	switch t.Kind() {
	case reflect.Bool:
		return func(e *encState, v reflect.Value) error {
			if v.Bool() {
				e.byte1(tagTrue)
			} else {
				e.byte1(tagFalse)
			}
			return nil
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return func(e *encState, v reflect.Value) error {
			at := e.startNumber()
			e.buf = strconv.AppendInt(e.buf, v.Int(), 10)
			e.endNumber(at)
			return nil
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return func(e *encState, v reflect.Value) error {
			at := e.startNumber()
			e.buf = strconv.AppendUint(e.buf, v.Uint(), 10)
			e.endNumber(at)
			return nil
		}
	case reflect.Float32, reflect.Float64:
		bits := t.Bits()
		return func(e *encState, v reflect.Value) error {
			f := v.Float()
			if math.IsNaN(f) || math.IsInf(f, 0) {
				return &json.UnsupportedValueError{Value: v, Str: strconv.FormatFloat(f, 'g', -1, bits)}
			}
			if f == 0 {
				f = 0 // -0 and 0 are one number, as in JSON
			}
			at := e.startNumber()
			e.buf = strconv.AppendFloat(e.buf, f, 'g', -1, bits)
			e.endNumber(at)
			return nil
		}
	case reflect.String:
		return func(e *encState, v reflect.Value) error {
			e.string(tagString, v.String())
			return nil
		}
	case reflect.Interface:
		return func(e *encState, v reflect.Value) error {
			if v.IsNil() {
				e.byte1(tagNull)
				return nil
			}
			return e.value(v.Elem())
		}
	case reflect.Pointer:
		return func(e *encState, v reflect.Value) error {
			if v.IsNil() {
				e.byte1(tagNull)
				return nil
			}
			return e.value(v.Elem())
		}
	case reflect.Struct:
		return newStructEncoder(t)
	case reflect.Map:
		return newMapEncoder(t)
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 && !reflect.PointerTo(t.Elem()).Implements(jsonMarshalerType) && !reflect.PointerTo(t.Elem()).Implements(textMarshalerType) {
			return func(e *encState, v reflect.Value) error {
				e.bytes(tagString, v.Bytes())
				return nil
			}
		}
		return newArrayEncoder(t)
	case reflect.Array:
		return newArrayEncoder(t)
	default:
		return func(e *encState, v reflect.Value) error {
			return &json.UnsupportedTypeError{Type: v.Type()}
		}
	}
}

func condAddrEncoder(canAddr, cannot encoderFunc) encoderFunc {
	return func(e *encState, v reflect.Value) error {
		if v.CanAddr() {
			return canAddr(e, v)
		}
		return cannot(e, v)
	}
}

func marshalerEncoder(e *encState, v reflect.Value) error {
	if v.Kind() == reflect.Pointer && v.IsNil() {
		e.byte1(tagNull)
		return nil
	}
	m, ok := v.Interface().(json.Marshaler)
	if !ok {
		e.byte1(tagNull)
		return nil
	}
	return e.marshalJSON(v, m)
}

func addrMarshalerEncoder(e *encState, v reflect.Value) error {
	return e.marshalJSON(v, v.Addr().Interface().(json.Marshaler))
}

func (e *encState) marshalJSON(v reflect.Value, m json.Marshaler) error {
	data, err := m.MarshalJSON()
	if err != nil {
		return &json.MarshalerError{Type: v.Type(), Err: err}
	}
	e.json.Reset()
	if err := json.Compact(&e.json, data); err != nil {
		return &json.MarshalerError{Type: v.Type(), Err: err}
	}
	e.bytes(tagJSON, e.json.Bytes())
	return nil
}

func textMarshalerEncoder(e *encState, v reflect.Value) error {
	if v.Kind() == reflect.Pointer && v.IsNil() {
		e.byte1(tagNull)
		return nil
	}
	m, ok := v.Interface().(encoding.TextMarshaler)
	if !ok {
		e.byte1(tagNull)
		return nil
	}
	return e.marshalText(v, m)
}

func addrTextMarshalerEncoder(e *encState, v reflect.Value) error {
	return e.marshalText(v, v.Addr().Interface().(encoding.TextMarshaler))
}

func (e *encState) marshalText(v reflect.Value, m encoding.TextMarshaler) error {
	text, err := m.MarshalText()
	if err != nil {
		return &json.MarshalerError{Type: v.Type(), Err: err}
	}
	e.bytes(tagString, text)
	return nil
}

func newArrayEncoder(t reflect.Type) encoderFunc {
	elem := t.Elem()
	return func(e *encState, v reflect.Value) error {
		if v.Kind() == reflect.Slice && v.IsNil() {
			e.byte1(tagNull)
			return nil
		}
		n := v.Len()
		e.buf = append(e.buf, tagArray)
		e.length(n)
		enc := encoderFor(elem)
		for i := range n {
			if e.depth++; e.depth > maxDepth {
				return &json.UnsupportedValueError{Value: v, Str: "more than 1000 levels of nesting via " + t.String()}
			}
			err := enc(e, v.Index(i))
			e.depth--
			if err != nil {
				return err
			}
		}
		return nil
	}
}

func newMapEncoder(t reflect.Type) encoderFunc {
	key := t.Key()
	switch key.Kind() {
	case reflect.String, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
	default:
		if !key.Implements(textMarshalerType) {
			return func(e *encState, v reflect.Value) error { return &json.UnsupportedTypeError{Type: t} }
		}
	}
	elem := t.Elem()
	return func(e *encState, v reflect.Value) error {
		if v.IsNil() {
			e.byte1(tagNull)
			return nil
		}
		// The scratch slice is shared by nested maps: take the tail.
		start := len(e.keys)
		defer func() { clear(e.keys[start:]); e.keys = e.keys[:start] }()
		it := v.MapRange()
		for it.Next() {
			k, err := mapKey(it.Key())
			if err != nil {
				return &json.MarshalerError{Type: t, Err: err}
			}
			e.keys = append(e.keys, mapEntry{k, it.Value()})
		}
		entries := e.keys[start:]
		slices.SortFunc(entries, func(a, b mapEntry) int { return strings.Compare(a.key, b.key) })
		e.buf = append(e.buf, tagObject)
		e.length(len(entries))
		enc := encoderFor(elem)
		for _, kv := range entries {
			e.string(tagString, kv.key)
			if e.depth++; e.depth > maxDepth {
				return &json.UnsupportedValueError{Value: v, Str: "more than 1000 levels of nesting via " + t.String()}
			}
			err := enc(e, kv.val)
			e.depth--
			if err != nil {
				return err
			}
		}
		return nil
	}
}

// mapKey renders a map key as encoding/json does.
func mapKey(k reflect.Value) (string, error) {
	if k.Kind() == reflect.String {
		return k.String(), nil
	}
	if tm, ok := k.Interface().(encoding.TextMarshaler); ok {
		if k.Kind() == reflect.Pointer && k.IsNil() {
			return "", nil
		}
		b, err := tm.MarshalText()
		return string(b), err
	}
	switch k.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.FormatInt(k.Int(), 10), nil
	default:
		return strconv.FormatUint(k.Uint(), 10), nil
	}
}

// structField is one field of a struct's canonical encoding.
type structField struct {
	name  string
	index []int
	enc   func() encoderFunc
}

func newStructEncoder(t reflect.Type) encoderFunc {
	fields := jsonFields(t)
	return func(e *encState, v reflect.Value) error {
		e.byte1(tagObject)
		for i := range fields {
			f := &fields[i]
			fv, ok := fieldByIndex(v, f.index)
			if !ok || isEmpty(fv) {
				continue
			}
			e.string(tagString, f.name)
			if e.depth++; e.depth > maxDepth {
				return &json.UnsupportedValueError{Value: v, Str: "more than 1000 levels of nesting via " + t.String()}
			}
			err := f.enc()(e, fv)
			e.depth--
			if err != nil {
				return err
			}
		}
		// Fields are written only when present; the end marker keeps a
		// struct from running into what follows it.
		e.byte1('}')
		return nil
	}
}

// fieldByIndex follows index through embedded structs; ok is false when an
// embedded pointer on the way is nil (encoding/json leaves such fields out).
func fieldByIndex(v reflect.Value, index []int) (reflect.Value, bool) {
	for i, x := range index {
		if i > 0 && v.Kind() == reflect.Pointer {
			if v.IsNil() {
				return reflect.Value{}, false
			}
			v = v.Elem()
		}
		v = v.Field(x)
	}
	return v, true
}

// isEmpty reports whether a struct field's value contributes nothing to the
// encoding: its zero value, or an empty string, slice or map.
func isEmpty(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Slice, reflect.Map, reflect.String:
		return v.Len() == 0
	}
	return v.IsZero()
}

// jsonFields lists the fields encoding/json encodes for struct type t, with
// its names and its rules for embedded structs (a shallower field hides a
// deeper one of the same name, a tagged one an untagged one at the same depth,
// and two that still tie are both left out), sorted by name.
func jsonFields(t reflect.Type) []structField {
	type candidate struct {
		name   string
		index  []int
		typ    reflect.Type
		tagged bool
	}
	var found []candidate
	type level struct {
		typ   reflect.Type
		index []int
	}
	var current []level
	next := []level{{typ: t}}
	visited := map[reflect.Type]bool{}
	for len(next) > 0 {
		current, next = next, nil
		var atDepth []candidate
		for _, l := range current {
			if visited[l.typ] {
				continue
			}
			visited[l.typ] = true
			for i := range l.typ.NumField() {
				sf := l.typ.Field(i)
				ft := sf.Type
				if sf.Anonymous {
					if ft.Kind() == reflect.Pointer {
						ft = ft.Elem()
					}
					if !sf.IsExported() && ft.Kind() != reflect.Struct {
						continue
					}
				} else if !sf.IsExported() {
					continue
				}
				tag := sf.Tag.Get("json")
				if tag == "-" {
					continue
				}
				name, _, _ := strings.Cut(tag, ",")
				if !validTagName(name) {
					name = ""
				}
				index := append(slices.Clip(l.index), i)
				if name == "" && sf.Anonymous && ft.Kind() == reflect.Struct {
					next = append(next, level{typ: ft, index: index})
					continue
				}
				tagged := name != ""
				if name == "" {
					name = sf.Name
				}
				atDepth = append(atDepth, candidate{name: name, index: index, typ: sf.Type, tagged: tagged})
			}
		}
		found = append(found, atDepth...)
	}
	// Dominance: the shallowest (then tagged) field of a name wins; a tie
	// hides them all.
	slices.SortStableFunc(found, func(a, b candidate) int {
		return cmp.Or(strings.Compare(a.name, b.name), cmp.Compare(len(a.index), len(b.index)), boolOrder(b.tagged, a.tagged))
	})
	var fields []structField
	for i := 0; i < len(found); {
		j := i + 1
		for j < len(found) && found[j].name == found[i].name {
			j++
		}
		group := found[i:j]
		i = j
		if len(group) > 1 && len(group[0].index) == len(group[1].index) && group[0].tagged == group[1].tagged {
			continue
		}
		c := group[0]
		typ := c.typ
		fields = append(fields, structField{
			name:  c.name,
			index: c.index,
			enc:   sync.OnceValue(func() encoderFunc { return encoderFor(typ) }),
		})
	}
	return fields
}

func boolOrder(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	default:
		return -1
	}
}

// validTagName mirrors encoding/json's check of a tag's name.
func validTagName(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		switch {
		case strings.ContainsRune("!#$%&()*+-./:;<=>?@[]^_{|}~ ", c):
		case !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c > 127):
			return false
		}
	}
	return true
}
