package idem

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
)

// matchesLegacy reports whether a legacy fingerprint (the SHA-256 of the
// json.Marshal of the message as it was typed when the row was written)
// belongs to msg. The message type may have gained fields since: their zero
// values are in msg's JSON but were not in the stored one. So besides the
// exact JSON, it tries the JSON with any subset of its zero-valued members
// left out (at most 2^maxLegacyZeros subsets; beyond that only none and all
// of them), which matches exactly when the two messages agree on every field
// the old type had and the new fields are zero: the same rule as the current
// scheme's. It runs only for rows written before the scheme byte.
func matchesLegacy(stored []byte, msg any) (bool, error) {
	if f, ok := msg.(Fingerprinter); ok {
		sum := sha256.Sum256(f.IdemFingerprint())
		return bytes.Equal(stored, sum[:]), nil
	}
	data, err := json.Marshal(msg)
	if err != nil {
		return false, fmt.Errorf("%w: fingerprint the message (legacy scheme): %w", ErrUnencodable, err)
	}
	if sum := sha256.Sum256(data); bytes.Equal(stored, sum[:]) {
		return true, nil
	}
	p := jsonTree{data: data}
	root, ok := p.value()
	if !ok || len(p.zeros) == 0 {
		return false, nil
	}
	n := len(p.zeros)
	var subsets []uint64
	if n <= maxLegacyZeros {
		for s := uint64(1); s < 1<<n; s++ {
			subsets = append(subsets, s)
		}
	} else {
		subsets = []uint64{^uint64(0)}
	}
	var buf []byte
	for _, s := range subsets {
		for i, m := range p.zeros {
			m.drop = s&(1<<i) != 0 || (i >= 64 && s == ^uint64(0))
		}
		buf = root.append(buf[:0])
		if sum := sha256.Sum256(buf); bytes.Equal(stored, sum[:]) {
			return true, nil
		}
	}
	return false, nil
}

const maxLegacyZeros = 12

// jsonTree parses the compact JSON that json.Marshal writes, keeping every
// token's bytes as they are, so that it can be written back byte for byte
// with members left out.
type jsonTree struct {
	data  []byte
	pos   int
	zeros []*jsonMember // members whose value is a zero value, in order
}

type jsonNode struct {
	raw     []byte // a scalar
	object  bool
	array   bool
	members []*jsonMember
	elems   []*jsonNode
}

type jsonMember struct {
	key  []byte // with its quotes
	val  *jsonNode
	drop bool
}

func (n *jsonNode) append(b []byte) []byte {
	switch {
	case n.object:
		b = append(b, '{')
		first := true
		for _, m := range n.members {
			if m.drop {
				continue
			}
			if !first {
				b = append(b, ',')
			}
			first = false
			b = append(append(b, m.key...), ':')
			b = m.val.append(b)
		}
		return append(b, '}')
	case n.array:
		b = append(b, '[')
		for i, e := range n.elems {
			if i > 0 {
				b = append(b, ',')
			}
			b = e.append(b)
		}
		return append(b, ']')
	}
	return append(b, n.raw...)
}

// zeroJSON are the encodings of Go zero values that json.Marshal writes for
// a field without omitempty (a nil pointer, slice or map is null; a zero
// time.Time and a zero UUID are strings).
var zeroJSON = []string{`0`, `""`, `false`, `null`, `[]`, `"0001-01-01T00:00:00Z"`, `"00000000-0000-0000-0000-000000000000"`}

// value parses one value; zero reports whether it is a zero value (an object
// is when all its members are).
func (p *jsonTree) value() (*jsonNode, bool) {
	n, _, ok := p.parse()
	return n, ok
}

func (p *jsonTree) parse() (n *jsonNode, zero, ok bool) {
	if p.pos >= len(p.data) {
		return nil, false, false
	}
	switch p.data[p.pos] {
	case '{':
		p.pos++
		n = &jsonNode{object: true}
		zero = true
		for p.pos < len(p.data) && p.data[p.pos] != '}' {
			if len(n.members) > 0 {
				if p.data[p.pos] != ',' {
					return nil, false, false
				}
				p.pos++
			}
			start := p.pos
			if !p.skipString() || p.pos >= len(p.data) || p.data[p.pos] != ':' {
				return nil, false, false
			}
			m := &jsonMember{key: p.data[start:p.pos]}
			p.pos++
			val, vzero, ok := p.parse()
			if !ok {
				return nil, false, false
			}
			m.val = val
			n.members = append(n.members, m)
			if vzero {
				p.zeros = append(p.zeros, m)
			}
			zero = zero && vzero
		}
		if p.pos >= len(p.data) {
			return nil, false, false
		}
		p.pos++
		return n, zero, true
	case '[':
		p.pos++
		n = &jsonNode{array: true}
		for p.pos < len(p.data) && p.data[p.pos] != ']' {
			if len(n.elems) > 0 {
				if p.data[p.pos] != ',' {
					return nil, false, false
				}
				p.pos++
			}
			e, _, ok := p.parse()
			if !ok {
				return nil, false, false
			}
			n.elems = append(n.elems, e)
		}
		if p.pos >= len(p.data) {
			return nil, false, false
		}
		p.pos++
		return n, len(n.elems) == 0, true
	case '"':
		start := p.pos
		if !p.skipString() {
			return nil, false, false
		}
		n = &jsonNode{raw: p.data[start:p.pos]}
	default:
		start := p.pos
		for p.pos < len(p.data) && !bytes.ContainsRune([]byte(",}]"), rune(p.data[p.pos])) {
			p.pos++
		}
		n = &jsonNode{raw: p.data[start:p.pos]}
	}
	for _, z := range zeroJSON {
		if string(n.raw) == z {
			return n, true, true
		}
	}
	return n, false, true
}

func (p *jsonTree) skipString() bool {
	if p.pos >= len(p.data) || p.data[p.pos] != '"' {
		return false
	}
	for p.pos++; p.pos < len(p.data); p.pos++ {
		switch p.data[p.pos] {
		case '\\':
			p.pos++
		case '"':
			p.pos++
			return true
		}
	}
	return false
}
