package idemhttp

import (
	"os"
	"strings"
	"testing"
)

// TestProblemTypesDocumented: every problem type's anchor is a heading of
// docs/http.md, so that a type's URL leads to what it means.
func TestProblemTypesDocumented(t *testing.T) {
	page, err := os.ReadFile("../../docs/http.md")
	if err != nil {
		t.Fatal(err)
	}
	headings := map[string]bool{}
	for _, line := range strings.Split(string(page), "\n") {
		if h, ok := strings.CutPrefix(line, "### "); ok {
			headings[h] = true
		}
	}
	if len(titles) != 12 {
		t.Errorf("%d problem types have a title; want the 12 constants", len(titles))
	}
	for typ, title := range titles {
		name, ok := strings.CutPrefix(typ, ProblemBase)
		if !ok || !headings[name] || title == "" {
			t.Errorf("problem type %s: docs/http.md has no heading ### %s (or the type has no title)", typ, name)
		}
	}
}
