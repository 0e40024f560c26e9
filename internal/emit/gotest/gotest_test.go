package gotest

import (
	"strings"
	"testing"

	"github.com/idemgen/idemgen/internal/emit/gocode"
	"github.com/idemgen/idemgen/internal/model"
)

// TestDocAtMostTwoLines: whatever the lengths of the names, a generated
// test's doc comment has at most two lines of at most 80 columns.
func TestDocAtMostTwoLines(t *testing.T) {
	for _, fn := range []string{"A", "Charge", "NotifyChargeCompleted", strings.Repeat("VeryLongHandlerName", 3)} {
		for _, fixture := range []string{"", strings.ToLower(fn[:1]) + fn[1:] + "Fixture"} {
			for _, suite := range []string{"Suite", "EntitySuite", "NaturalSuite", "ExternalSuite"} {
				h := model.Handler{Func: fn, Fixture: fixture}
				e := emitter{gocode.Emitter{H: h, N: model.NamesFor(fn)}}
				lines := e.docLines(suite)
				if len(lines) > 2 || !strings.HasPrefix(strings.Join(lines, " "), "Test"+fn+"Idem runs ") {
					t.Errorf("%s, fixture %q, %s: %d lines:\n%s", fn, fixture, suite, len(lines), strings.Join(lines, "\n"))
				}
				for _, l := range lines {
					if len("// "+l) > 80 && strings.Contains(l, " ") {
						t.Errorf("%s: a line of %d columns: %s", fn, len("// "+l), l)
					}
				}
			}
		}
	}
}
