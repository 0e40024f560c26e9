package directive

import (
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
