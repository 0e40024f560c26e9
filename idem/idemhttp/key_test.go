package idemhttp

import (
	"errors"
	"testing"
)

// TestParseKey reads keys as the idempotency-key draft writes them (a
// structured-field string) and as Stripe's clients send them (bare), and
// refuses what is neither.
func TestParseKey(t *testing.T) {
	for _, c := range []struct {
		in      []string
		want    string
		missing bool
		invalid bool
	}{
		{in: nil, missing: true},
		{in: []string{""}, missing: true},
		{in: []string{"  "}, missing: true},
		{in: []string{`""`}, missing: true},
		{in: []string{"8e03978e-40d5-43e8-bc93-6894a57f9324"}, want: "8e03978e-40d5-43e8-bc93-6894a57f9324"},
		{in: []string{`"8e03978e-40d5-43e8-bc93-6894a57f9324"`}, want: "8e03978e-40d5-43e8-bc93-6894a57f9324"},
		{in: []string{` "k-1" `}, want: "k-1"},
		{in: []string{`"a \"quoted\" key \\ here"`}, want: `a "quoted" key \ here`},
		{in: []string{`k "1"`}, want: `k "1"`},
		{in: []string{`"open`}, invalid: true},
		{in: []string{`"k" extra`}, invalid: true},
		{in: []string{`"k\n"`}, invalid: true},
		{in: []string{`"k\`}, invalid: true},
		{in: []string{"\"k\x01\""}, invalid: true},
		{in: []string{"\"k\u00e9\""}, invalid: true},
		{in: []string{"k-1", "k-2"}, invalid: true},
	} {
		got, err := parseKey(c.in)
		switch {
		case c.missing && !errors.Is(err, errNoKey):
			t.Errorf("parseKey(%q) = %q, %v; want no key", c.in, got, err)
		case c.invalid && (err == nil || errors.Is(err, errNoKey)):
			t.Errorf("parseKey(%q) = %q, %v; want invalid", c.in, got, err)
		case !c.missing && !c.invalid && (err != nil || got != c.want):
			t.Errorf("parseKey(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
}

// TestValidHeaderName accepts RFC 9110 tokens only.
func TestValidHeaderName(t *testing.T) {
	for name, want := range map[string]bool{
		"webhook-id": true, "Idempotency-Key": true, "X_Key.1~": true,
		"": false, "a b": false, "a:b": false, "ké": false, "a\n": false,
	} {
		if got := validHeaderName(name); got != want {
			t.Errorf("validHeaderName(%q) = %v; want %v", name, got, want)
		}
	}
}
