package migrate

import (
	"reflect"
	"strings"
	"testing"
)

// TestSumRoundTrip: the checksum file reads back as written, every kind of
// entry included, and its first line hashes the others.
func TestSumRoundTrip(t *testing.T) {
	entries := []sumEntry{
		{Name: "00001_accounts.sql", Hash: hashOf([]byte("a"))},
		{Name: "00002_idem_a.sql", Hash: hashOf([]byte("b")), Consumer: "app.a", Package: "example.com/app"},
		{Name: "00003_idem_b.sql", Hash: hashOf([]byte("c")), Consumer: "app.b", Package: "unknown", Retired: true},
		{Name: "00004_idem_outbox.sql", Hash: hashOf([]byte("d")), Chain: ChainID{"outbox", "idem_outbox"}},
	}
	data := formatSum(entries)
	first, body, _ := strings.Cut(string(data), "\n")
	if first != hashOf([]byte(body)) {
		t.Errorf("first line %q does not hash the others", first)
	}
	if !strings.Contains(body, "00002_idem_a.sql "+hashOf([]byte("b"))+" consumer=app.a package=example.com/app\n") ||
		!strings.Contains(body, " consumer=app.b package=unknown retired\n") || !strings.Contains(body, " chain=outbox/idem_outbox\n") {
		t.Errorf("entries are written as\n%s", body)
	}
	back, err := parseSum(data)
	if err != nil || !reflect.DeepEqual(back, entries) {
		t.Errorf("parseSum = %+v, %v; want %+v", back, err, entries)
	}
	if got, err := parseSum(formatSum(nil)); err != nil || got != nil {
		t.Errorf("empty checksum file = %+v, %v", got, err)
	}
}

// TestSumDamaged: a damaged checksum file is an error naming the damage and
// its line.
func TestSumDamaged(t *testing.T) {
	sum := func(body string) string { return hashOf([]byte(body)) + "\n" + body }
	h := hashOf([]byte("x"))
	for data, msg := range map[string]string{
		"":                                "first line is not a h1: hash",
		"00001_a.sql h1:x\n":              "first line is not a h1: hash",
		"h1:abc\n00001_a.sql " + h + "\n": "first line does not match the lines below it",
		sum("00001_a.sql "+h+"\n") + "x":  "first line does not match",
		sum("00001_a.sql\n"):              `line 2 is not "name h1:hash"`,
		sum("00001_a.sql " + h + "\nb.sql sha:1\n"): `line 3 is not "name h1:hash"`,
		sum("00001_a.sql " + h + " owner=x\n"):      `line 2 has an unknown field "owner=x"`,
		sum("00001_a.sql " + h + " retired=yes\n"):  `line 2 has a malformed field "retired=yes"`,
		sum("00001_a.sql " + h + " chain=outbox\n"): `line 2 has a malformed field "chain=outbox"`,
	} {
		entries, err := parseSum([]byte(data))
		if err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("parseSum(%q) = %+v, %v; want an error containing %q", data, entries, err, msg)
		}
	}
}
