package main

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/idemgen/idemgen/bench/internal/mdtable"
)

// stmtRole names what a statement does in a delivery, and ranks it in the
// order a delivery sends it, from its text.
func stmtRole(query string) (rank int, role string) {
	q := strings.ToLower(query)
	has := func(s ...string) bool {
		for _, x := range s {
			if !strings.Contains(q, x) {
				return false
			}
		}
		return true
	}
	switch {
	case strings.HasPrefix(q, "begin") || strings.HasPrefix(q, "start transaction"):
		return 0, "begin"
	case strings.HasPrefix(q, "set ") || (has("set_config('lock_timeout'") && !has("insert") && !has("update")):
		return 1, "set the claim's lock_timeout"
	// pg_stat_statements shows constants as $n: the optimistic delivery's
	// statements are told by their aliases (markLookupSQL, insertSQL).
	case has("as marker", "left join"):
		return 2, "mark, look the key up"
	case has("insert into", "on conflict") && !has("update accounts"):
		return 2, "claim"
	case has("insert into", "as delivery") && !has("update accounts"):
		return 5, "insert the row with its result"
	case has("attempts = t.attempts + 1"):
		return 3, "take over a running row"
	case has("update accounts"):
		return 4, "the handler's UPDATE"
	case has("select fingerprint, status, result"):
		return 6, "read the stored row"
	case has("update", "set status") && has("select case"):
		return 5, "mark done, store the result, claim check"
	case has("update", "set status"):
		return 5, "mark done, store the result"
	case has("select case"):
		return 5, "claim check"
	case strings.HasPrefix(q, "commit"):
		return 7, "commit"
	case strings.HasPrefix(q, "rollback"):
		return 8, "rollback"
	}
	return 9, "other"
}

// statements returns a scenario's statements in the order a delivery sends
// them.
func (s *stmtScenario) statements() []*stmtCost {
	var out []*stmtCost
	for _, c := range s.stmts {
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b *stmtCost) int {
		ra, _ := stmtRole(a.query)
		rb, _ := stmtRole(b.query)
		return cmp.Or(cmp.Compare(ra, rb), cmp.Compare(a.query, b.query))
	})
	return out
}

// total is the sum of a scenario's statements.
func (s *stmtScenario) total() *stmtCost {
	t := &stmtCost{}
	for _, c := range s.stmts {
		t.add(c)
	}
	return t
}

// perMsg is x per message of s.
func (s *stmtScenario) perMsg(x float64) float64 { return x / float64(max(s.msgs, 1)) }

// msDur is a number of milliseconds as a duration.
func msDur(ms float64) time.Duration { return time.Duration(ms * float64(time.Millisecond)) }

// shortSQL is a statement's text for a table cell: at most n characters, the
// pipe escaped.
func shortSQL(q string, n int) string {
	if r := []rune(q); len(r) > n {
		q = string(r[:n]) + "…"
	}
	return "`" + strings.ReplaceAll(q, "|", `\|`) + "`"
}

// scenario is the named scenario at n workers (nil if it did not run).
func (r *stmtResults) scenario(name string, n int) *stmtScenario {
	for _, s := range r.scenarios {
		if s.name == name && s.workers == n {
			return s
		}
	}
	return nil
}

// serverWork adds to why what the server's own work allows the generated
// scenario against other (bare or hand-written): the statements part's
// backend CPU a message of both, at its highest concurrency, and what
// pgbench gets running the hand-written inbox's statements against the bare
// UPDATE (no Go client in either). When the cores are saturated the rate
// cannot beat the ratio of the work a message, however few the round trips.
// It returns the statements part's ratio, ok when that part ran.
func (r *report) serverWork(other string, why *facts) (ratio float64, ok bool) {
	if r.stmts != nil && len(r.stmts.workers) > 0 {
		n := slices.Max(r.stmts.workers)
		gen, o := r.stmts.scenario(scGenerated, n), r.stmts.scenario(other, n)
		if gen != nil && o != nil && gen.serverCPU > 0 && o.serverCPU > 0 {
			for _, s := range []*stmtScenario{gen, o} {
				tot := s.total()
				part := fmt.Sprintf(" (statements part, %d workers)", n)
				why.add(s.name+", backend CPU a message"+part, "%s", mdtable.Dur(s.cpuPerMsg()))
				why.add(s.name+", time in its statements a message"+part, "%s", mdtable.Dur(msDur(s.perMsg(tot.execMs+tot.planMs))))
				why.add(s.name+", WAL in its statements a message"+part, "%s B", mdtable.Thousands(s.perMsg(tot.walBytes)))
			}
			ratio, ok = float64(o.cpuPerMsg())/float64(gen.cpuPerMsg()), true
			why.add("what the server's work allows, "+other+" ÷ generated", "%s", mdtable.Ratio(ratio))
		}
	}
	if r.db != nil && other == scBare {
		n := r.maxWorkers()
		pi, pb := r.db.cell(scPgInbox, n), r.db.cell(scPgBare, n)
		if pi != nil && pb != nil {
			why.add(fmt.Sprintf("pgbench running the hand-written inbox ÷ pgbench bare, %d workers", n), "%s", cellRatio(pi, pb))
		}
	}
	return ratio, ok
}

// inboxWrites adds to why what the inbox's statements cost against the
// change they guard, where a set-based HandleBatch misses its target against
// bare batched, whose round trips are as few: every message the wrapper
// delivers looks its key up and inserts its inbox row, into a unique index,
// beside the handler's change, the only write of bare batched. The
// statements part, when it ran, prices them against the change, one message
// at a time on one connection.
func (r *report) inboxWrites(why *facts) {
	if r.stmts == nil || len(r.stmts.workers) == 0 {
		return
	}
	gen := r.stmts.scenario(scGenerated, slices.Min(r.stmts.workers))
	if gen == nil {
		return
	}
	byRole := map[string]*stmtCost{}
	for _, c := range gen.statements() {
		_, role := stmtRole(c.query)
		if byRole[role] == nil {
			byRole[role] = &stmtCost{}
		}
		byRole[role].add(c)
	}
	lookup, change, insert := byRole["mark, look the key up"], byRole["the handler's UPDATE"], byRole["insert the row with its result"]
	if lookup == nil || change == nil || insert == nil {
		return
	}
	ms := func(c *stmtCost) float64 { return c.execMs + c.planMs }
	part := fmt.Sprintf(" (statements part, %d %s)", gen.workers, plural(gen.workers, "worker"))
	for _, s := range []struct {
		name string
		c    *stmtCost
	}{{"the key's lookup", lookup}, {"the row's INSERT with its result", insert}, {"the change itself", change}} {
		why.add(s.name+", time a message"+part, "%s", mdtable.Dur(msDur(gen.perMsg(ms(s.c)))))
		why.add(s.name+", WAL a message"+part, "%s B", mdtable.Thousands(gen.perMsg(s.c.walBytes)))
	}
	why.add("the inbox's statements ÷ the change they guard, in time", "%s", mdtable.Ratio((ms(lookup)+ms(insert))/ms(change)))
}

func (r *report) statementsTargets(t *targetTable) {
	var cells []string
	l := target{doc: "server-time-in-statements", what: "server time in statements, first delivery / duplicate, reported", status: reported}
	lo, hi := slices.Min(r.stmts.workers), slices.Max(r.stmts.workers)
	for _, n := range r.stmts.workers {
		first, dup := r.stmts.scenario(scGenerated, n), r.stmts.scenario(scDuplicate, n)
		t1, td := first.total(), dup.total()
		if n == lo || n == hi {
			// The cell holds the lowest and the highest concurrency, the
			// facts every one.
			cells = append(cells, fmt.Sprintf("%s / %s at %d", mdtable.Dur(msDur(first.perMsg(t1.execMs+t1.planMs))), mdtable.Dur(msDur(dup.perMsg(td.execMs+td.planMs))), n))
		}
		for _, s := range []struct {
			name string
			s    *stmtScenario
			t    *stmtCost
		}{{"a first delivery", first, t1}, {"a duplicate", dup, td}} {
			at := fmt.Sprintf(" at %d %s", n, plural(n, "worker"))
			l.why.add(s.name+", time in its statements a message"+at, "%s", mdtable.Dur(msDur(s.s.perMsg(s.t.execMs+s.t.planMs))))
			l.why.add(s.name+", backend CPU a message"+at, "%s", cpuPer(s.s))
			l.why.add(s.name+", WAL in its statements a message"+at, "%s B", mdtable.Thousands(s.s.perMsg(s.t.walBytes)))
		}
	}
	l.measured = strings.Join(cells, ", ")
	t.add(l)
}

// cpuPerMsg is a scenario's backend CPU per message; negative when unknown.
func (s *stmtScenario) cpuPerMsg() time.Duration {
	if s.serverCPU < 0 {
		return -1
	}
	return s.serverCPU / time.Duration(max(s.msgs, 1))
}

// cpuPer is a scenario's backend CPU per message, when it is known.
func cpuPer(s *stmtScenario) string {
	if s.serverCPU < 0 {
		return "–"
	}
	return mdtable.Dur(s.cpuPerMsg())
}

func (r *report) writeStatements(w writer) {
	st := r.stmts
	w("## %s\n\n", secStatements)
	w("What each statement of a delivery costs the server, from `pg_stat_statements`, on %s; the server: `%s`. ", st.where, st.version)
	w("Each scenario ran %d time(s) at each concurrency (%s workers, on a pool of as many connections), in turn with the others (the order rotating), in a fresh schema: at least %d messages to warm up (every connection prepares its statements, the server caches their plans), then %s messages between two reads of `pg_stat_statements`, whose difference the tables give, pooled over the rounds, per message. ",
		st.rounds, joinInts(st.workers, " and "), stmtWarmup, mdtable.Thousands(float64(st.msgs)))
	w("At one worker no statement waits on another delivery: the times are the statements' own work; with more, a statement's time also holds its waits for locks (rows, buffers, the WAL) and for a core.\n\n")
	w("The scenarios:\n\n")
	for _, s := range st.scenarios {
		if s.workers == st.workers[0] {
			w("- **%s**: %s;\n", s.name, s.what)
		}
	}
	w("\n**time** is `total_exec_time` ÷ `calls`, the statement's execution on the server; **plan** is its planning, counted only when `pg_stat_statements.track_planning` is on (%s here): a statement pgx prepared once runs its cached plan and is not planned again. ", onOff(st.planning))
	w("**shared hit** and **dirtied** are buffers of `shared_buffers` read and first modified; **WAL** the bytes its execution wrote. ")
	w("A `COMMIT`'s own work (its WAL record, the wait for the flush) happens after the statement, when the transaction ends, and is in no statement's counters: it is in the backend CPU and the WAL of the second table. ")
	w("PostgreSQL 15's pg_stat_statements counts a utility statement sent as a prepared statement (pgx's `begin`, `commit` and `rollback` in a pipeline) only the first time, in the warm-up: where such a row is missing, the statement ran, at the cost of a `begin` or `commit` sent as a simple query (the hand-written rows), under a microsecond.\n\n")

	stmts := mdtable.New(mdtable.R("workers"), mdtable.L("scenario"), mdtable.L("statement"), mdtable.R("calls/msg"), mdtable.R("time"), mdtable.R("plans/msg"),
		mdtable.R("plan"), mdtable.R("rows/msg"), mdtable.R("shared hit/msg"), mdtable.R("dirtied/msg"), mdtable.R("WAL/msg"), mdtable.L("SQL"))
	for _, s := range st.scenarios {
		for _, c := range s.statements() {
			_, role := stmtRole(c.query)
			plan := "–"
			if c.plans > 0 {
				plan = mdtable.Dur(msDur(c.planMs / float64(c.plans)))
			}
			stmts.Row(mdtable.Int(s.workers), s.name, role, fmt.Sprintf("%.2f", s.perMsg(float64(c.calls))), mdtable.Dur(msDur(c.execMs/float64(max(c.calls, 1)))),
				fmt.Sprintf("%.2f", s.perMsg(float64(c.plans))), plan, fmt.Sprintf("%.2f", s.perMsg(float64(c.rows))), fmt.Sprintf("%.1f", s.perMsg(float64(c.hit))),
				fmt.Sprintf("%.2f", s.perMsg(float64(c.dirtied))), mdtable.Thousands(s.perMsg(c.walBytes))+" B", shortSQL(c.query, 90))
		}
	}
	w("%s", stmts)
	w("\nPer message, each scenario's statements together against what its backend spent (its CPU, from `/proc`) and what the server wrote to the WAL")
	if st.own {
		w(" (the insert position before and after: the cluster is the run's alone, autovacuum off)")
	} else {
		w(" (not known on a shared server: other sessions move the WAL position)")
	}
	w(". What the backend spent beyond its statements is the protocol (reading, parsing and answering each message, a wake-up per round trip) and the end of each transaction (the commit record, the flush).\n\n")
	totals := mdtable.New(mdtable.R("workers"), mdtable.L("scenario"), mdtable.R("round trips/msg"), mdtable.R("statements counted/msg"),
		mdtable.R("time + plan in statements/msg"), mdtable.R("backend CPU/msg"), mdtable.R("WAL in statements/msg"), mdtable.R("WAL, all/msg"))
	for _, s := range st.scenarios {
		t := s.total()
		wal := "–"
		if s.wal >= 0 {
			wal = mdtable.Thousands(s.perMsg(float64(s.wal))) + " B"
		}
		totals.Row(mdtable.Int(s.workers), s.name, fmt.Sprintf("%.2f", s.perMsg(float64(s.trips))), fmt.Sprintf("%.2f", s.perMsg(float64(t.calls))),
			mdtable.Dur(msDur(s.perMsg(t.execMs+t.planMs))), cpuPer(s), mdtable.Thousands(s.perMsg(t.walBytes))+" B", wal)
	}
	w("%s\n", totals)
	r.writeBehind(w, secStatements)
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}
