package migrate

import (
	"reflect"
	"strings"
	"testing"
)

// TestResultsRoundTrip: a record of result shapes reads back as written,
// comments and blank lines skipped.
func TestResultsRoundTrip(t *testing.T) {
	recorded := map[string][]string{
		"billing.charge": {"$ object", "$.Cents number", "$.Lines array", "$.Lines[] object", "$.Lines[].SKU string"},
		"billing.note":   {"$ string"},
	}
	data := formatResults(recorded)
	if !strings.HasPrefix(string(data), resultsHeader) || !strings.Contains(string(data), "\nbilling.charge $.Cents number\n") {
		t.Errorf("record is\n%s", data)
	}
	back, err := parseResults(append(data, "\n# a comment\n"...))
	if err != nil || !reflect.DeepEqual(back, recorded) {
		t.Errorf("parseResults = %+v, %v; want %+v", back, err, recorded)
	}
	if back, err := parseResults(nil); err != nil || len(back) != 0 {
		t.Errorf("no record = %+v, %v; want none", back, err)
	}
}

// TestResultsDamaged: a damaged record is an error naming the damage and its
// line.
func TestResultsDamaged(t *testing.T) {
	for data, want := range map[string]resultsError{
		"# header\nbilling.charge\n":                    {2, `line "billing.charge" is not "consumer path kind"`},
		"billing.charge $ object\nbilling.charge $.A\n": {1, "the shape of consumer billing.charge"},
		"billing.charge $.A number\n":                   {1, "the shape of consumer billing.charge"},
		"a $ string\nb $ object\nb $.X colour\n":        {1, "the shape of consumer b"},
	} {
		_, err := parseResults([]byte(data))
		if err == nil || err.line != want.line || !strings.Contains(err.msg, want.msg) {
			t.Errorf("parseResults(%q) = %v; want line %d: %s", data, err, want.line, want.msg)
		}
	}
}
