package directive

import (
	"strings"
	"testing"

	"github.com/idemgen/idemgen/internal/diag"
)

// FuzzParse parses any text after the directive prefix. Parse must not
// panic, every option it returns must be well formed and point at its own
// name and value in the text, every diagnostic must point into the text, and
// a directive that parsed without a diagnostic must read back the same from
// its options. Seeds: testdata/fuzz/FuzzParse.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		"handler consumer=billing.charge key=OrderID retain=2160h",
		"handler consumer=billing.charge  key=OrderID,Meta.ID\ttable=app.inbox_a",
		"handler consumer consumer=a key= consumer=b Bad=1",
		"retired consumer=shop.old",
		"",
		" handler",
		"Handler key=ID",
		"handler key==ID k=v=w =x",
		"handler key=ID key=ID",
		"handler\tkey=\u00e9t\u00e9 x=\x00",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, rest string) {
		text := Prefix + rest
		pos := diag.Pos{File: "/m/a.go", Line: 7, Col: 3}
		var diags diag.List
		d := Parse(text, pos, &diags)

		if d.Pos != pos {
			t.Errorf("directive at %v, want %v", d.Pos, pos)
		}
		offset := func(p diag.Pos) int {
			if p.File != pos.File || p.Line != pos.Line || p.Col < pos.Col || p.Col-pos.Col > len(text) {
				t.Fatalf("position %+v is outside the directive %q at %+v", p, text, pos)
			}
			return p.Col - pos.Col
		}
		seen := map[string]bool{}
		for _, o := range d.Options {
			if !isName(o.Name) || o.Value == "" || strings.ContainsAny(o.Value, " \t") {
				t.Errorf("malformed option %+v from %q", o, text)
			}
			if seen[o.Name] {
				t.Errorf("option %s returned twice from %q", o.Name, text)
			}
			seen[o.Name] = true
			if at := offset(o.Pos); !strings.HasPrefix(text[at:], o.Name+"="+o.Value) {
				t.Errorf("option %s= at column %d does not point at %q in %q", o.Name, o.Pos.Col, o.Name+"="+o.Value, text)
			}
			if at := offset(o.ValuePos); !strings.HasPrefix(text[at:], o.Value) || offset(o.Pos)+len(o.Name)+1 != at {
				t.Errorf("value of option %s= at column %d does not point at %q in %q", o.Name, o.ValuePos.Col, o.Value, text)
			}
		}
		for _, dg := range diags.Sorted() {
			offset(dg.Pos)
		}
		if diags.Len() > 0 {
			return
		}
		if !isName(d.Name) {
			t.Fatalf("directive name %q of %q accepted without a diagnostic", d.Name, text)
		}
		again := Prefix + d.Name
		for _, o := range d.Options {
			again += " " + o.Name + "=" + o.Value
		}
		var diags2 diag.List
		d2 := Parse(again, pos, &diags2)
		if diags2.Len() > 0 || d2.Name != d.Name || len(d2.Options) != len(d.Options) {
			t.Fatalf("%q reads back from %q as %+v (%v)", text, again, d2, diags2.Sorted())
		}
		for i, o := range d.Options {
			if d2.Options[i].Name != o.Name || d2.Options[i].Value != o.Value {
				t.Errorf("option %d of %q reads back as %+v, want %+v", i, text, d2.Options[i], o)
			}
		}
	})
}
