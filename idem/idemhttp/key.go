package idemhttp

import (
	"errors"
	"strings"
)

// errNoKey is parseKey's error for a request without the header, or with
// an empty one.
var errNoKey = errors.New("no key")

// parseKey returns the idempotency key of a request whose key header has
// values: one line, holding a structured-field string as the
// idempotency-key draft writes it ("8e03978e-40d5"), or a bare value as
// Stripe's clients send it (8e03978e-40d5). A quoted key is unescaped; a
// string left open, an escape other than \" or \\, a character outside
// printable ASCII inside the quotes, or anything after them is invalid.
func parseKey(values []string) (string, error) {
	switch len(values) {
	case 0:
		return "", errNoKey
	case 1:
	default:
		return "", errors.New("the header is sent more than once")
	}
	v := strings.TrimSpace(values[0])
	if v == "" || v == `""` {
		return "", errNoKey
	}
	if v[0] != '"' {
		return v, nil
	}
	var b strings.Builder
	for i := 1; i < len(v); i++ {
		switch c := v[i]; {
		case c == '\\':
			i++
			if i == len(v) || (v[i] != '"' && v[i] != '\\') {
				return "", errors.New(`a quoted key may escape only " and \`)
			}
			b.WriteByte(v[i])
		case c == '"':
			if i != len(v)-1 {
				return "", errors.New("the quoted key is followed by more text")
			}
			return b.String(), nil
		case c < 0x20 || c > 0x7e:
			return "", errors.New("a quoted key holds printable ASCII only")
		default:
			b.WriteByte(c)
		}
	}
	return "", errors.New("the quoted key has no closing quote")
}
