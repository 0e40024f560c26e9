package directive

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/internal/diag"
)

func TestParse(t *testing.T) {
	pos := diag.Pos{File: "/x/a.go", Line: 3, Col: 1}
	var diags diag.List
	d := Parse("//idem:handler consumer=billing.charge  key=OrderID,Meta.ID", pos, &diags)
	if diags.Len() != 0 {
		t.Fatalf("diagnostics: %v", diags.Sorted())
	}
	if d.Name != "handler" || len(d.Options) != 2 {
		t.Fatalf("got %+v", d)
	}
	key, _ := d.Lookup("key")
	if key.Value != "OrderID,Meta.ID" || key.Pos.Col != 41 || key.ValuePos.Col != 45 {
		t.Errorf("key option %+v", key)
	}
}

func TestParseErrors(t *testing.T) {
	pos := diag.Pos{File: "/x/a.go", Line: 3, Col: 1}
	var diags diag.List
	Parse("//idem:handler consumer consumer=a key= consumer=b Bad=1", pos, &diags)
	var got []string
	for _, d := range diags.Sorted() {
		got = append(got, d.Format("/x"))
	}
	want := []string{
		`a.go:3:16: option "consumer" has no value: want name=value`,
		`a.go:3:36: option key= has an empty value`,
		`a.go:3:41: option consumer= is given twice`,
		`a.go:3:52: malformed option name "Bad"`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestSuggest(t *testing.T) {
	names := []string{"consumer", "key", "table", "retain"}
	for in, want := range map[string]string{"consumr": "consumer", "keys": "key", "tabel": "table", "zzz": "", "retian": "retain"} {
		if got := Suggest(in, names); got != want {
			t.Errorf("Suggest(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestNearMiss(t *testing.T) {
	for text, want := range map[string]string{
		"// idem:handler consumer=a key=ID":     "a directive has no space after // => //idem:handler consumer=a key=ID",
		"//IDEM:handler consumer=a key=ID":      "the prefix is lower case => //idem:handler consumer=a key=ID",
		"/*idem:handler consumer=a  key=ID */":  "a directive is a // line comment, not a /* */ block => //idem:handler consumer=a key=ID",
		"//idemgen:retired consumer=a":          "the prefix is //idem:, not //idemgen: => //idem:retired consumer=a",
		"// Idem : Handler key=ID":              "a directive has no space after //; the prefix is lower case; a directive has no space around the colon; the directive is //idem:handler, not Handler => //idem:handler key=ID",
		"// idem:handlr key=ID":                 "a directive has no space after //; the directive is //idem:handler, not handlr => //idem:handler key=ID",
		"// idem:allow outside-tx why":          "a directive has no space after // => //idem:allow outside-tx why",
		"// idem: this package is about it":     "",
		"// Handle is an idem:handler function": "",
		"//go:generate go run ./cmd/idemgen":    "",
		"//	//idem:handler key=ID":              "",
	} {
		problem, fix, ok := NearMiss(text)
		got := ""
		if ok {
			got = problem + " => " + fix
		}
		if got != want {
			t.Errorf("NearMiss(%q) = %q, want %q", text, got, want)
		}
	}
}

// TestOptionListPositions: List splits a value at commas once, with each
// item at its byte column in the comment, empty items kept where they are.
// The directive starts at column 5, as in an indented comment.
func TestOptionListPositions(t *testing.T) {
	for _, c := range []struct {
		name, text, option string
		want               []string // text@column
	}{
		{"one item", "//idem:handler key=OrderID", "key", []string{"OrderID@24"}},
		{"paths", "//idem:handler key=Source,Meta.ID", "key", []string{"Source@24", "Meta.ID@31"}},
		{"after a tab and two spaces", "//idem:handler\tconsumer=a  zero=Line,Qty", "zero", []string{"Line@37", "Qty@42"}},
		{"empty middle", "//idem:handler key=A,,B", "key", []string{"A@24", "@26", "B@27"}},
		{"leading and trailing comma", "//idem:handler stable=,A,", "stable", []string{"@27", "A@28", "@30"}},
		{"quoted value kept verbatim", `//idem:handler key="A",B`, "key", []string{`"A"@24`, "B@28"}},
		{"quote does not protect a comma", `//idem:handler key="A,B"`, "key", []string{`"A@24`, `B"@27`}},
		{"byte columns after non-ASCII", "//idem:handler key=Été,ID", "key", []string{"Été@24", "ID@30"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var diags diag.List
			d := Parse(c.text, diag.Pos{File: "/x/a.go", Line: 9, Col: 5}, &diags)
			if diags.Len() != 0 {
				t.Fatalf("diagnostics: %v", diags.Sorted())
			}
			o, ok := d.Lookup(c.option)
			if !ok {
				t.Fatalf("no option %s= in %+v", c.option, d)
			}
			var got []string
			for _, it := range o.List() {
				if it.Pos.File != "/x/a.go" || it.Pos.Line != 9 {
					t.Errorf("item %q at %v, not on the directive's line", it.Text, it.Pos)
				}
				got = append(got, fmt.Sprintf("%s@%d", it.Text, it.Pos.Col))
				if start := it.Pos.Col - 5; !strings.HasPrefix(c.text[start:], it.Text) {
					t.Errorf("item %q at column %d, where the text reads %q", it.Text, it.Pos.Col, c.text[start:])
				}
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("List() = %q, want %q", got, c.want)
			}
			if texts := o.Texts(); len(texts) != len(got) {
				t.Errorf("Texts() = %q, %d items; List has %d", texts, len(texts), len(got))
			}
		})
	}
}

// TestParsePositions: where Parse puts options, values and the errors of
// directives that almost parse, for a directive at column 3.
func TestParsePositions(t *testing.T) {
	for _, c := range []struct {
		name, text string
		want       []string // name@col=value@col, or col: error
	}{
		{"two options", "//idem:handler consumer=a key=ID", []string{"consumer@18=a@27", "key@29=ID@33"}},
		{"tabs and spaces", "//idem:handler\t consumer=a\t\tkey=ID", []string{"consumer@19=a@28", "key@31=ID@35"}},
		{"quoted value", `//idem:handler table="inbox"`, []string{`table@18="inbox"@24`}},
		{"value with equals", "//idem:handler key==ID", []string{"key@18==ID@22"}},
		{"space after prefix", "//idem: handler key=ID", []string{`10: malformed directive "//idem: handler key=ID": no space after //idem:; write //idem:handler key=ID`}},
		{"upper-case name", "//idem:Handler key=ID", []string{`10: malformed directive "//idem:Handler key=ID": directive names are lower case; write //idem:handler key=ID`}},
		{"no name", "//idem:", []string{`10: malformed directive "//idem:": want //idem:name followed by name=value options`}},
		{"option without value", "//idem:handler key", []string{`18: option "key" has no value: want name=value`}},
		{"empty value", "//idem:handler key= consumer=a", []string{"18: option key= has an empty value", "consumer@23=a@32"}},
		{"repeated option", "//idem:handler key=A key=B", []string{"key@18=A@22", "24: option key= is given twice"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var diags diag.List
			d := Parse(c.text, diag.Pos{File: "/x/a.go", Line: 2, Col: 3}, &diags)
			var got []string
			for _, o := range d.Options {
				got = append(got, fmt.Sprintf("%s@%d=%s@%d", o.Name, o.Pos.Col, o.Value, o.ValuePos.Col))
			}
			for _, dg := range diags.Sorted() {
				got = append(got, fmt.Sprintf("%d: %s", dg.Pos.Col, dg.Msg))
			}
			slices.Sort(got)
			want := slices.Sorted(slices.Values(c.want))
			if !slices.Equal(got, want) {
				t.Errorf("Parse(%q):\n got %q\nwant %q", c.text, got, want)
			}
		})
	}
}

// TestParseTrailingComment: a // comment after the options is not an option.
func TestParseTrailingComment(t *testing.T) {
	pos := diag.Pos{File: "/x/a.go", Line: 3, Col: 1}
	var diags diag.List
	d := Parse("//idem:handler consumer=billing.charge key=OrderID // the order's id, key=x", pos, &diags)
	if diags.Len() != 0 || len(d.Options) != 2 {
		t.Fatalf("got %+v, diagnostics %v", d, diags.Sorted())
	}
	if key, _ := d.Lookup("key"); key.Value != "OrderID" {
		t.Errorf("key option %+v", key)
	}
}
