package model

import (
	"slices"
	"strings"
	"testing"
)

func TestShapeLinesRoundTrip(t *testing.T) {
	lines := []string{
		"$ object",
		"$.Lines array",
		"$.Lines[] object",
		"$.Lines[].Children array",
		"$.Lines[].Children[] object recursive",
		"$.Lines[].sku string",
		"$.Raw any",
		"$.Tags object",
		"$.Tags{number} array",
		"$.Tags{number}[] bool",
		`$."a.b c" string`,
	}
	s, err := ParseShape(lines)
	if err != nil {
		t.Fatal(err)
	}
	if got := ShapeLines(s); !slices.Equal(got, lines) {
		t.Errorf("ShapeLines(ParseShape(lines)) =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(lines, "\n"))
	}
	for _, bad := range [][]string{
		{"$.A string"},
		{"$ object", "$.A.B string"},
		{"$ string", "$[] string"},
		{"$ object", "$.A strings"},
		{"$ object", "$ object"},
	} {
		if _, err := ParseShape(bad); err == nil {
			t.Errorf("ParseShape(%q) accepted it", bad)
		}
	}
}

func TestShapeChanges(t *testing.T) {
	parse := func(lines ...string) *Shape {
		t.Helper()
		s, err := ParseShape(lines)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	old := parse("$ object", "$.N number", "$.S string", "$.L array", "$.L[] object", "$.L[].X number", "$.M object", "$.M{string} number", "$.R any")
	for _, tc := range []struct {
		name string
		next *Shape
		want []string
	}{
		{"fields added and removed", parse("$ object", "$.N number", "$.New bool"), nil},
		{"number to string", parse("$ object", "$.N string"), []string{"$.N was a number and is a string now"}},
		{"inside an array", parse("$ object", "$.L array", "$.L[] object", "$.L[].X bool"), []string{"$.L[].X was a number and is a bool now"}},
		{"map keys become integers", parse("$ object", "$.M object", "$.M{number} number"), []string{"$.M was a map with string keys and has integer keys now"}},
		{"map to struct", parse("$ object", "$.M object", "$.M.A string"), []string{"$.M.A was a number and is a string now"}},
		{"any to a kind", parse("$ object", "$.R string"), []string{"$.R was of any JSON kind (a custom MarshalJSON or json.RawMessage) and is a string now"}},
		{"a kind to any", parse("$ object", "$.S any"), nil},
		{"root kind", parse("$ array", "$[] string"), []string{"$ was an object and is an array now"}},
	} {
		if got := ShapeChanges(old, tc.next); !slices.Equal(got, tc.want) {
			t.Errorf("%s: ShapeChanges = %q, want %q", tc.name, got, tc.want)
		}
	}
}
