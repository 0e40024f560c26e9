package main

import (
	"testing"
	"time"
)

// TestStatementsPartTiny runs the statements part small (50 messages a
// scenario, one round) on its own cluster or the test server, and checks
// what pg_stat_statements must have seen: one handler UPDATE per first
// delivery and none for a duplicate, the round trips the wrapper sends, and
// a section and a target line in the report.
func TestStatementsPartTiny(t *testing.T) {
	ctx, url := testDB(t, 3*time.Minute)
	cfg := &config{db: url, accounts: 100, rounds: 1, stmtMsgs: 50, stmtWorkers: []int{1}}
	res, err := runStatements(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*stmtScenario{}
	for _, s := range res.scenarios {
		byName[s.name] = s
		if s.msgs != 50 {
			t.Errorf("%s: %d messages measured, want 50", s.name, s.msgs)
		}
	}
	updates := func(s *stmtScenario) float64 {
		n := 0.0
		for _, c := range s.stmts {
			if _, role := stmtRole(c.query); role == "the handler's UPDATE" {
				n += s.perMsg(float64(c.calls))
			}
		}
		return n
	}
	// The wrapper's duplicate sends the handler's first statement with
	// BEGIN and the lookup, in one round trip, and rolls it back: the
	// server runs it. The claim-first protocol runs no handler statement
	// for a duplicate; the hand-written inbox neither.
	for name, want := range map[string]float64{scBare: 1, scHand: 1, scGenerated: 1, scPessimistic: 1, scGenSimple: 1, scDuplicate: 1, scHandDuplicate: 0} {
		if got := updates(byName[name]); got != want {
			t.Errorf("%s: %.2f handler UPDATEs a message in pg_stat_statements, want %.0f; its statements: %v", name, got, want, statementTexts(byName[name]))
		}
	}
	for name, want := range map[string]float64{scBare: 1, scHand: 5, scGenerated: 2, scPessimistic: 3, scDuplicate: 2} {
		if got := byName[name].perMsg(float64(byName[name].trips)); got != want {
			t.Errorf("%s: %.2f round trips a message, want %.0f", name, got, want)
		}
	}
	if res.own && byName[scGenerated].wal <= 0 {
		t.Errorf("generated: %d bytes of WAL on the part's own cluster", byName[scGenerated].wal)
	}
	r := &report{cfg: cfg, stmts: res}
	checkTargets(t, reportHas(t, []string{"## Statements", "| 1 | generated | mark, look the key up |", "| 1 | generated, duplicates | mark, look the key up |", "| 1 | generated | insert the row with its result |",
		"| 1 | generated, pessimistic | claim |", "| 1 | generated, pessimistic | mark done, store the result, claim check |",
		"server time in statements, first delivery / duplicate, reported", "- a first delivery, backend CPU a message at 1 worker: "},
		r.writeTargets, r.writeStatements))
}

func statementTexts(s *stmtScenario) []string {
	var out []string
	for _, c := range s.statements() {
		out = append(out, c.query)
	}
	return out
}
