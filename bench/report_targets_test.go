package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/idemgen/idemgen/bench/internal/mdtable"
)

// maxCellWords is the most words a cell of the Targets table may show: the
// numbers behind a line go to its part's section, the reasoning to
// docs/benchmarks.md.
const maxCellWords = 12

// docAnchors are the anchors of the headings of docs/benchmarks.md.
func docAnchors(t *testing.T) map[string]bool {
	t.Helper()
	return headingAnchors(t, readFile(t, filepath.Join("..", targetDocs)))
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

var headingRE = regexp.MustCompile(`(?m)^#{1,6} +(.*?) *$`)

// headingAnchors are the anchors of a Markdown text's headings.
func headingAnchors(t *testing.T, md string) map[string]bool {
	t.Helper()
	anchors := map[string]bool{}
	for _, m := range headingRE.FindAllStringSubmatch(md, -1) {
		anchors[mdtable.Anchor(m[1])] = true
	}
	return anchors
}

var (
	linkRE  = regexp.MustCompile(`^\[(.*)\]\(([^)]*)\)$`)
	boundRE = regexp.MustCompile(`^(\S+(?: \S+)?) \(([^()]+)\)$`)
)

// checkTargets checks the Targets table of md, a report written with its
// parts' sections: every cell shows at most maxCellWords words, a bound is
// a number with a label of two to four words, every target links to a
// section of docs/benchmarks.md, and every verdict but "not run" to a
// heading of md. It returns the table's rows, cell by cell.
func checkTargets(t *testing.T, md string) [][]string {
	t.Helper()
	_, table, ok := strings.Cut(md, "## Targets\n")
	if !ok {
		t.Fatalf("no Targets table in:\n%s", md)
	}
	docs, sections := docAnchors(t), headingAnchors(t, md)
	var rows [][]string
	for i, line := range strings.Split(table, "\n") {
		if !strings.HasPrefix(line, "|") {
			if len(rows) > 0 {
				break
			}
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if len(cells) != 5 {
			t.Errorf("Targets line %d: %d cells, want 5: %s", i, len(cells), line)
			continue
		}
		if cells[0] == "target" || strings.HasPrefix(cells[0], "---") {
			continue
		}
		rows = append(rows, cells)
		for _, c := range cells {
			if n := mdtable.Words(c); n > maxCellWords {
				t.Errorf("a cell of %d words, more than %d: %q", n, maxCellWords, c)
			}
		}
		if m := linkRE.FindStringSubmatch(cells[0]); m == nil || !strings.HasPrefix(m[2], targetDocs+"#") || !docs[strings.TrimPrefix(m[2], targetDocs+"#")] {
			t.Errorf("target %q links to no heading of %s", cells[0], targetDocs)
		}
		if b := cells[2]; b != "" {
			if m := boundRE.FindStringSubmatch(b); m == nil {
				t.Errorf("bound %q: want a number and a label, \"0.97× (server work)\"", b)
			} else if n := mdtable.Words(m[2]); n < 2 || n > 4 {
				t.Errorf("bound %q: a label of %d words, want 2 to 4", b, n)
			}
		}
		if cells[4] == "not run" {
			continue
		}
		if m := linkRE.FindStringSubmatch(cells[4]); m == nil || !strings.HasPrefix(m[2], "#") || !sections[m[2][1:]] {
			t.Errorf("verdict %q of %q links to no heading of the report", cells[4], cells[0])
		}
	}
	if len(rows) == 0 {
		t.Errorf("no line in the Targets table:\n%s", table)
	}
	return rows
}

// TestTargetDocsExist checks that every anchor a target line names (its
// doc) is a heading of docs/benchmarks.md, in the bench's own source, so
// that a line no test builds links somewhere too.
func TestTargetDocsExist(t *testing.T) {
	docs := docAnchors(t)
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	docRE := regexp.MustCompile(`\bdoc(?:: +| += +)"([^"]*)"|notRunTarget\("([^"]*)"`)
	seen := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		for _, m := range docRE.FindAllStringSubmatch(readFile(t, f), -1) {
			anchor := m[1] + m[2]
			seen++
			if !docs[anchor] {
				t.Errorf("%s: doc %q is no heading of %s", f, anchor, targetDocs)
			}
		}
	}
	if seen < 15 {
		t.Errorf("%d docs found in the bench's source; the pattern no longer finds them", seen)
	}
}

// madeUpReport is a report of every part that has no tiny run of its own
// in the tests (delivery, outbox, entity, generator, memory, allocations),
// beside the batch and brokers parts, from results made up in the test:
// every generated line misses its target, so that each writes its bound.
func madeUpReport() *report {
	cfg := &config{workers: []int{1, 16}, batchWorkers: []int{16}}
	at := func(msgs int64, busy float64) *cell { return cellAt(msgs, time.Millisecond, busy) }
	db := &dbResults{scenarios: []scenario{{name: scBare}, {name: scHand}, {name: scGenerated}, {name: scPessimistic}, {name: scDuplicate}}, pgbench: true,
		cells: map[cellKey]*cell{}, paired: map[string][]time.Duration{}}
	for _, n := range cfg.workers {
		for name, msgs := range map[string]int64{scBare: 3000, scHand: 1000, scGenerated: 1000, scPessimistic: 800, scDuplicate: 2000,
			scPgBare: 3000, scPgInbox: 1000, scPgClaimFirst: 900, scPgOptimistic: 1100, scPgNoRead: 1200} {
			db.cells[cellKey{name, n}] = at(msgs, 0.9)
		}
	}
	// cellAt's cells take 3 round trips a message; a duplicate takes 2.
	db.cells[cellKey{scDuplicate, 16}].samples[0].trips = 4000
	db.log = &logResults{runs: []logRun{{name: scGenerated, workers: 16, msgs: 1000, violations: 1, errors: 1}, {name: scDuplicate, workers: 1, msgs: 1000},
		{name: scCopies, workers: 16, msgs: 1000, violations: 40, errors: 40}}}
	for name, p50 := range map[string]time.Duration{scBare: 400, scHand: 900, scGenerated: 800, scPessimistic: 1000, scDuplicate: 300} {
		db.paired[name] = repeat(p50*time.Microsecond, 10)
	}
	o := outboxWith(1000, 1000, repeat(80*time.Millisecond, 100), 1000)
	for _, n := range o.workers {
		for _, v := range obxVariants {
			if o.cells[obxKey{v, n}] == nil {
				o.cells[obxKey{v, n}] = at(1000, 0.8)
			}
		}
	}
	o.cells[obxKey{obxVariant{1, true}, 16}] = cellAt(500, 20*time.Millisecond, 0.8)
	o.latency[latencyKey{200, true}] = o.latency[latencyKey{200, false}]
	entity := &entityResults{cells: map[cellKey]*cell{}, wal: map[cellKey][]float64{}}
	for name, msgs := range map[string]int64{scEntityBare: 3000, scEntity: 1000, scEntityTx: 900} {
		n := entityWorkers[len(entityWorkers)-1]
		entity.cells[cellKey{name, n}] = at(msgs, 0.9)
		entity.wal[cellKey{name, n}] = []float64{250}
	}
	gen := &genResults{reps: 1}
	for i, h := range []int{3, 50, 100, 250, 500} {
		name := "syn" + mdtable.Int(h)
		if i == 0 {
			name = "billing"
		}
		// Each handler costs more than the one before: a curve, not a line.
		d := time.Duration(h*h) * time.Millisecond
		gen.packages = append(gen.packages, genPackage{name: name, handlers: h, idemgen: []timing{{2 * d, 2 * d}}, vet: []timing{{d, d}}})
	}
	mem := &memResults{workers: 16, msgs: 1000, elapsed: time.Minute}
	for i := range 9 {
		mem.samples = append(mem.samples, memSample{at: time.Duration(i+1) * 6 * time.Second, live: uint64(1<<20 + i*(1<<18)), goroutines: uint64(30 + i)})
	}
	alloc := &allocResults{benches: []benchLine{{name: "Generated", aPO: 98, bPerOp: 3802}}}
	b := &brokersResults{brokers: []string{"rabbitmq", "kafka"}, workers: []int{1, 16}, relayRows: 10000, relay: map[brkKey]*cell{}, consume: map[brkKey]*cell{}}
	for _, name := range b.brokers {
		b.relay[brkKey{name, 0, false}] = at(5000, 0.6)
		b.relay[brkKey{name, 0, true}] = at(6000, 0.5)
		for _, n := range b.workers {
			b.consume[brkKey{name, n, false}] = at(100, 0.6)
			b.consume[brkKey{name, n, true}] = at(1000, 0.6)
		}
	}
	b.relay[brkKey{"kafka", 0, true}] = at(60000, 0.5)
	b.relay[brkKey{recordingName, 0, false}] = at(10000, 0.7)
	batch := &batchResults{size: 100, workers: []int{16}, cells: map[cellKey]*cell{}, cores: 2}
	for _, name := range []string{scBare, scGenerated, scBatch, scBatchSet, scDuplicate, scBatchDup} {
		batch.cells[cellKey{name, 16}] = at(1000, 0.5)
	}
	batch.cells[cellKey{scBareBatched, 16}] = at(10000, 0.5)
	return &report{cfg: cfg, db: db, outbox: o, entity: entity, gen: gen, mem: mem, alloc: alloc, brokers: b, batch: batch}
}

// TestTargetsOfMadeUpParts checks the Targets table of the parts no tiny
// run builds, every line missed: short cells, a bound with its label where
// the line computes one, the numbers behind each missed line in its part's
// section, and links that resolve.
func TestTargetsOfMadeUpParts(t *testing.T) {
	r := madeUpReport()
	sections := []func(writer){r.writeTargets}
	for _, sec := range []string{secDelivery, secBatches, secOutbox, secBrokers, secEntity, secGen, secAlloc, secMem} {
		sections = append(sections, func(w writer) { w("## %s\n\n", sec); r.writeBehind(w, sec) })
	}
	md := reportHas(t, []string{
		"### Behind the targets: Message delivery", "- generated, CPU a message: 300 µs (client 100 µs + server 200 µs)",
		"- pgbench running the hand-written inbox ÷ pgbench bare, 16 workers: 0.33×",
		"- the relay ÷ the raw publisher: 0.83×",
	}, sections...)
	rows := checkTargets(t, md)
	bounds := map[string]string{}
	for _, row := range rows {
		what := linkRE.ReplaceAllString(row[0], "$1")
		bounds[what] = row[2]
		t.Logf("%s | %s | %s | %s | %s", what, row[1], row[2], row[3], row[4])
	}
	for what, want := range map[string]string{
		"generated ≥ 1.3× hand-written at 16 workers":                             "1.00× (CPU a message)",
		"a duplicate costs 2 round trips":                                         "",
		"a first delivery costs 2 round trips":                                    "",
		"no unique-violation ERROR logged without concurrent copies":              "",
		"a duplicate ≥ 3× faster than a first delivery":                           "1.00× (CPU a message)",
		"HandleBatch of 100 ≥ 0.75× bare batched at 16 workers":                   "1.00× (CPU a message)",
		"committing with the default NOTIFY ≥ 0.9× WithoutNotify at 16 workers":   "1.00× (CPU a message)",
		"relay through RabbitMQ ≥ 0.8× the relay with a recording publisher":      "0.60× (raw publisher)",
		"relay through Kafka (kfake) ≥ 0.8× the relay with a recording publisher": "1.28× (shared cores)",
		"mode=entity ≥ 1.5× mode=tx at 16 workers":                                "1.00× (CPU a message)",
		"commit-to-publish at 200 msgs/s: p50 ≤ 5 ms, p99 ≤ 50 ms":                "",
	} {
		got, ok := bounds[what]
		if !ok {
			t.Errorf("no line %q", what)
		} else if got != want {
			t.Errorf("%q: bound %q, want %q", what, got, want)
		}
	}
}

// TestTargetsNotRun checks the table of a report whose parts did not run:
// a line not run for each target that says so, linked to its explanation.
func TestTargetsNotRun(t *testing.T) {
	md := reportHas(t, []string{
		"| [generated ≥ 1.3× hand-written and ≥ 0.45× bare at 16 workers](docs/benchmarks.md#generated-against-hand-written-and-bare) | the db part did not run (`-parts`) | | | not run |",
		"| [HandleBatch at 16 workers ≥ 0.75× bare batched](docs/benchmarks.md#batches) | the batch part did not run (`-parts`) | | | not run |",
	}, (&report{cfg: &config{workers: []int{1, 16}, batchWorkers: []int{16}}}).writeTargets)
	if rows := checkTargets(t, md); len(rows) != 5 {
		t.Errorf("%d lines, want 5 not run (the claim, the batch, NOTIFY, the latency, the relay through the brokers)", len(rows))
	}
}

// TestCommittedTargetsTable checks the Targets table of the committed
// BENCHMARKS.md as the tiny runs' tables are checked: short cells, bounds
// with their labels, links that resolve.
func TestCommittedTargetsTable(t *testing.T) {
	rows := checkTargets(t, readFile(t, filepath.Join("..", "BENCHMARKS.md")))
	if len(rows) < 30 {
		t.Errorf("%d lines in the committed Targets table, want a full run's", len(rows))
	}
}
