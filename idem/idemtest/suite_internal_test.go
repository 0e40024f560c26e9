package idemtest

import (
	"strings"
	"testing"
)

// TestOptionalScenarios: Run leaves key_reused and business_unique_violation
// out once a fixture showed it has no Variant or Conflict, and runs them as
// long as it does not know.
func TestOptionalScenarios(t *testing.T) {
	type msg struct{ ID string }
	applies := func(s Suite[NoReceiver, msg, int], parts *fixtureParts) map[string]bool {
		seen := &fixtureSeen{}
		if parts != nil {
			// In a real run, the first scenario records what its fixture
			// supplied.
			seen.record(*parts)
		}
		scenarios := s.scenarios(seen)
		got := map[string]bool{}
		for _, sc := range scenarios {
			ok, why := sc.applies()
			got[sc.Name] = ok
			if !ok && why == "" {
				t.Errorf("%s: left out without a reason", sc.Name)
			}
		}
		return got
	}
	variant := func(m msg) msg { return m }

	for _, c := range []struct {
		name           string
		suite          Suite[NoReceiver, msg, int]
		parts          *fixtureParts
		keyReused, buv bool
	}{
		{"no fixture returned yet", Suite[NoReceiver, msg, int]{}, nil, true, true},
		{"fixture without options", Suite[NoReceiver, msg, int]{}, &fixtureParts{}, false, false},
		{"fixture with both", Suite[NoReceiver, msg, int]{}, &fixtureParts{variant: true, conflict: true}, true, true},
		{"suite variant", Suite[NoReceiver, msg, int]{Variant: variant}, &fixtureParts{}, true, false},
	} {
		got := applies(c.suite, c.parts)
		if got[ScenarioKeyReused] != c.keyReused || got[ScenarioBusinessUniqueViolation] != c.buv {
			t.Errorf("%s: key_reused %v, business_unique_violation %v; want %v, %v", c.name,
				got[ScenarioKeyReused], got[ScenarioBusinessUniqueViolation], c.keyReused, c.buv)
		}
		for _, name := range []string{ScenarioConcurrent, ScenarioFailureBeforeCommit, ScenarioCrashAfterCommit, ScenarioSequentialDuplicate} {
			if !got[name] {
				t.Errorf("%s: %s left out", c.name, name)
			}
		}
	}
}

func TestUniqueValues(t *testing.T) {
	if s := UniqueString[string](); !strings.HasPrefix(s, "idemtest-") || len(s) != len("idemtest-")+16 || s == UniqueString[string]() {
		t.Errorf("UniqueString: %q", s)
	}
	for range 100 {
		if v := UniqueInt[int8](); v <= 0 {
			t.Fatalf("UniqueInt[int8]: %d", v)
		}
		if v := UniqueInt[int64](); v <= 0 {
			t.Fatalf("UniqueInt[int64]: %d", v)
		}
		if v := UniqueInt[uint16](); v == 0 {
			t.Fatalf("UniqueInt[uint16]: %d", v)
		}
	}
	if u := UniqueUUID[[16]byte](); u == ([16]byte{}) || u[6]>>4 != 4 || u[8]>>6 != 2 {
		t.Errorf("UniqueUUID: %x", u)
	}
}
