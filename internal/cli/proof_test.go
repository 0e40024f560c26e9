package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"golang.org/x/tools/txtar"

	"github.com/idemgen/idemgen/idem/idemtest"
	"github.com/idemgen/idemgen/internal/testmodule"
)

// proofPackages are the packages of testdata/proof/module.txtar, one a
// mode.
var proofPackages = []string{"txmode", "entitymode", "naturalmode", "externalmode", "setmode"}

// proofWant is what the generated test of one handler of the proof module
// does: pass, or fail printing each of lines.
type proofWant struct {
	pkg, test string
	pass      bool
	lines     []string
}

// proofOutsideTx is the cause a failure names for a write outside the
// handler's transaction.
const proofOutsideTx = ": the handler writes outside its transaction (through a pool?)"

var proofWants = []proofWant{
	{pkg: "txmode", test: "TestCorrectIdem", pass: true},
	{pkg: "txmode", test: "TestThroughPoolIdem", lines: []string{
		"the delivery abandoned before its commit left 1 row in orders where the state before it had none" + proofOutsideTx,
		"the batch killed before its commit left 1 row in orders where the state before it had none" + proofOutsideTx,
	}},
	// The inbox's claim lets one copy run at a time, so concurrent copies
	// cannot double the count; every rerun after a failure does.
	{pkg: "txmode", test: "TestDoubleIdem", lines: []string{
		"the abandoned delivery and its redelivery left balance = 200 in accounts where one delivery leaves 100" + proofOutsideTx,
		"the killed batch and its redelivery left balance = 200 in accounts where one delivery leaves 100" + proofOutsideTx,
	}},
	{pkg: "txmode", test: "TestNothingIdem", lines: []string{
		"the first delivery of the sample message changed no table of the test schema (accounts, orders): nothing shows what the handler did. " +
			`The sample message was {"ID":"sample-id","Account":"sample-account","Amount":100,"Note":"sample-note"}.`,
		"func nothingFixture(t testing.TB, db *idemtest.DB) idemtest.Fixture[*Service, Credit]",
		"in a _test.go file of package txmode, and add fixture=nothingFixture to the //idem:handler directive of Nothing",
	}},

	{pkg: "entitymode", test: "TestCorrectIdem", pass: true},
	{pkg: "entitymode", test: "TestThroughPoolIdem", lines: []string{
		"the delivery killed before its commit left 1 row in audit where the state before it had none" + proofOutsideTx,
		"8 concurrent copies left 8 rows in audit where one delivery leaves 1",
	}},
	{pkg: "entitymode", test: "TestDoubleIdem", lines: []string{
		"8 concurrent copies left balance = 800 in accounts where one delivery leaves 100",
	}},
	// The marker row is the effect of mode=entity: a handler that inserts
	// nothing fails, and the failure says which fixture to write.
	{pkg: "entitymode", test: "TestNothingIdem", lines: []string{
		`want Processed. The sample message was {"OrderID":"sample-order-id","Customer":"sample-customer","Amount":100}.`,
		"func nothingFixture(t testing.TB, db *idemtest.DB) idemtest.Fixture[*Service, Order]",
		"not run: the first delivery of the sample message failed (see effect)",
	}},

	{pkg: "naturalmode", test: "TestCorrectIdem", pass: true},
	{pkg: "naturalmode", test: "TestThroughPoolIdem", lines: []string{
		"the delivery abandoned before its commit left 1 row in prices where the state before it had none" + proofOutsideTx,
	}},
	{pkg: "naturalmode", test: "TestDoubleIdem", lines: []string{
		"8 concurrent redeliveries left balance = 900 in accounts where one delivery leaves 100: a mode=natural handler must set absolute values",
		"the second delivery left balance = 200 in accounts where one delivery leaves 100",
	}},
	{pkg: "naturalmode", test: "TestNothingIdem", lines: []string{
		"the first delivery of the sample message changed no table of the test schema (accounts, prices)",
		"func nothingFixture(t testing.TB, db *idemtest.DB) idemtest.NaturalFixture[*Service, PriceSet]",
	}},

	{pkg: "externalmode", test: "TestCorrectIdem", pass: true},
	{pkg: "externalmode", test: "TestChargeIdem", pass: true},
	// Without a transaction, a write through the pool is the handler's
	// effect; it must survive a rerun as a provider's does, keyed by
	// idem.KeyFrom(ctx).
	{pkg: "externalmode", test: "TestThroughPoolIdem", lines: []string{
		"the run of the worker that died and the takeover's rerun left 2 rows in outgoing where one delivery leaves 1: " +
			"a mode=external handler runs again after a takeover or a failed run, so its effect must be keyed by idem.KeyFrom(ctx)",
	}},
	{pkg: "externalmode", test: "TestDoubleIdem", lines: []string{
		"the failed run and its retry left balance = 200 in accounts where one delivery leaves 100",
	}},
	{pkg: "externalmode", test: "TestNothingIdem", lines: []string{
		"the first delivery of the sample message changed no table of the test schema (accounts, outgoing, sent)",
		"func nothingFixture(t testing.TB, p *idemtest.Provider) idemtest.ExternalFixture[*Service, Send]",
	}},

	{pkg: "setmode", test: "TestCorrectIdem", pass: true},
	{pkg: "setmode", test: "TestThroughPoolIdem", lines: []string{
		"the delivery abandoned before its commit left 1 row in credits where the state before it had none" + proofOutsideTx,
		"the batch killed before its commit left 1 row in credits where the state before it had none" + proofOutsideTx,
	}},
	{pkg: "setmode", test: "TestDoubleIdem", lines: []string{
		"the failed batch and its redelivery left balance = 300 in accounts where one delivery leaves 100" + proofOutsideTx,
	}},
	{pkg: "setmode", test: "TestNothingIdem", lines: []string{
		"the first delivery of the sample message changed no table of the test schema (accounts, credits)",
		"func nothingFixture(t testing.TB, db *idemtest.DB) idemtest.Fixture[*Service, Credit]",
	}},
}

// TestProofWithoutFixture generates the tests of handlers without fixture=
// in every mode (testdata/proof/module.txtar) and runs them against the test
// database: the correct handlers pass; a handler that writes through its
// service's pool, one that double-counts, and one whose sample message
// changes nothing each fail, and the failure names the cause. Then it runs
// one generated test without IDEMGEN_TEST_DATABASE_URL, which finds the
// server where libpq looks, and without any server, which fails in CI with
// one line saying what to set.
func TestProofWithoutFixture(t *testing.T) {
	idemtest.DatabaseURL(t)
	if testing.Short() {
		t.Skip("builds and tests a module of 20 generated tests")
	}
	t.Setenv("GOFLAGS", "-mod=mod") // as the golden tests: see testmodule.Write
	root := proofModule(t)

	cmd := exec.Command("go", "test", "-count=1", "-json", "./...")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), idemtest.EnvDeliveries+"=8")
	out, _ := cmd.CombinedOutput()
	results := testResults(t, out)
	for _, w := range proofWants {
		r, ok := results["example.com/proof/"+w.pkg+" "+w.test]
		switch {
		case !ok:
			t.Errorf("%s %s did not run:\n%s", w.pkg, w.test, out)
		case w.pass && r.action != "pass":
			t.Errorf("%s %s: %s; want pass:\n%s", w.pkg, w.test, r.action, r.output)
		case !w.pass && r.action != "fail":
			t.Errorf("%s %s: %s; want fail:\n%s", w.pkg, w.test, r.action, r.output)
		}
		for _, line := range w.lines {
			if !strings.Contains(r.output, line) {
				t.Errorf("%s %s: the output lacks %q:\n%s", w.pkg, w.test, line, r.output)
			}
		}
	}
	if t.Failed() {
		return
	}
	for _, w := range proofWants {
		if !w.pass {
			r := results["example.com/proof/"+w.pkg+" "+w.test]
			t.Logf("%s %s fails as it should:\n%s", w.pkg, w.test, failureLines(r.output))
		}
	}

	t.Run("database_found", func(t *testing.T) { proofDatabaseFound(t, root) })
	t.Run("no_server_in_ci", func(t *testing.T) { proofNoServer(t, root) })
}

// proofModule writes the proof module below a temporary directory and runs
// idemgen in each of its packages.
func proofModule(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	if err := testmodule.Write(root, "example.com/proof", repoRoot(t)); err != nil {
		t.Fatal(err)
	}
	archive, err := txtar.ParseFile(filepath.Join("testdata", "proof", "module.txtar"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range archive.Files {
		path := filepath.Join(root, f.Name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, f.Data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, pkg := range proofPackages {
		var stdout, stderr bytes.Buffer
		if code := run(filepath.Join(root, pkg), []string{"-migrations", "migrations", "."}, &stdout, &stderr); code != ExitOK {
			t.Fatalf("idemgen in %s: exit %d\n%s%s", pkg, code, stdout.String(), stderr.String())
		}
	}
	return root
}

// testResult is what go test -json said of one top-level test: its last
// action and its output, subtests included.
type testResult struct {
	action string
	output string
}

// testResults reads go test -json output into results by "package test".
func testResults(t *testing.T, out []byte) map[string]*testResult {
	t.Helper()
	results := map[string]*testResult{}
	lines := bufio.NewScanner(bytes.NewReader(out))
	lines.Buffer(nil, 1<<20)
	for lines.Scan() {
		var ev struct{ Action, Package, Test, Output string }
		if json.Unmarshal(lines.Bytes(), &ev) != nil || ev.Test == "" {
			continue
		}
		top, _, sub := strings.Cut(ev.Test, "/")
		key := ev.Package + " " + top
		r := results[key]
		if r == nil {
			r = &testResult{}
			results[key] = r
		}
		switch {
		case ev.Action == "output":
			r.output += ev.Output
		case !sub && slices.Contains([]string{"pass", "fail", "skip"}, ev.Action):
			r.action = ev.Action
		}
	}
	return results
}

// failureLines keeps the lines of a test's output that report, not the
// runtime's log lines.
func failureLines(output string) string {
	var keep []string
	for _, l := range strings.Split(output, "\n") {
		if l != "" && !strings.Contains(l, "logger.go") && !strings.Contains(l, "=== ") && !strings.Contains(l, "--- PASS") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

// proofEnv is the environment without anything that names a database: no
// IDEMGEN_TEST_DATABASE_URL, no PG* variable, and nothing that makes a
// missing database a failure.
func proofEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if name == idemtest.EnvURL || name == idemtest.EnvRequire || name == idemtest.EnvCI || strings.HasPrefix(name, "PG") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

// proofDatabaseFound runs a generated test with no database variable: it
// runs against the server libpq's defaults find. On a machine whose test
// server is not where libpq looks by default (a throwaway one in a temporary
// directory, or a local one without this OS user's role), the test skips or
// fails saying so, and then runs with the PG* variables naming the test
// database, as they would for psql.
func proofDatabaseFound(t *testing.T, root string) {
	run := func(extra ...string) ([]byte, error) {
		cmd := exec.Command("go", "test", "-count=1", "-v", "-run", "^TestCorrectIdem$", "./txmode")
		cmd.Dir = root
		cmd.Env = proofEnv(extra...)
		return cmd.CombinedOutput()
	}
	passed := func(out []byte, err error) bool {
		return err == nil && bytes.Contains(out, []byte("--- PASS: TestCorrectIdem")) && !bytes.Contains(out, []byte("--- SKIP"))
	}
	out, err := run()
	if passed(out, err) {
		t.Logf("without %s or any PG* variable, the generated test found the server where libpq looks, and passed", idemtest.EnvURL)
		return
	}
	// A machine whose server is elsewhere skips; one whose local server has
	// no role for this OS user fails, saying so.
	skipped := bytes.Contains(out, []byte("--- SKIP: TestCorrectIdem")) && bytes.Contains(out, []byte("no PostgreSQL server answers"))
	refused := bytes.Contains(out, []byte("--- FAIL: TestCorrectIdem")) && bytes.Contains(out, []byte("refuses the connection"))
	if !skipped && !refused {
		t.Fatalf("without %s: %v; want a pass, a skip because no server answers where libpq looks, or a failure because it refuses:\n%s", idemtest.EnvURL, err, out)
	}
	cfg, err := pgx.ParseConfig(idemtest.DatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	env := []string{"PGHOST=" + cfg.Host, fmt.Sprintf("PGPORT=%d", cfg.Port), "PGUSER=" + cfg.User, "PGDATABASE=" + cfg.Database}
	if cfg.Password != "" {
		env = append(env, "PGPASSWORD="+cfg.Password)
	}
	if cfg.TLSConfig == nil {
		env = append(env, "PGSSLMODE=disable")
	}
	if out, err := run(env...); !passed(out, err) {
		t.Fatalf("with the PG* variables of the test database and no %s: %v; want a pass:\n%s", idemtest.EnvURL, err, out)
	}
	t.Logf("the server where libpq looks by default is not the test database (skipped: %v); with the PG* variables naming it (host %s), the generated test passed", skipped, cfg.Host)
}

// proofNoServer runs a generated test where no server answers (PGHOST, an
// empty directory): with CI set it fails with one line that says what to
// set; without, it is skipped with that line.
func proofNoServer(t *testing.T, root string) {
	empty := t.TempDir()
	for _, ci := range []bool{true, false} {
		extra := []string{"PGHOST=" + empty}
		if ci {
			extra = append(extra, idemtest.EnvCI+"=true")
		}
		cmd := exec.Command("go", "test", "-count=1", "-v", "-run", "^TestCorrectIdem$", "./txmode")
		cmd.Dir = root
		cmd.Env = proofEnv(extra...)
		out, err := cmd.CombinedOutput()
		var said []string
		for _, l := range strings.Split(string(out), "\n") {
			if strings.Contains(l, "idemtest: no test database") {
				said = append(said, strings.TrimSpace(l))
			}
		}
		want := "set " + idemtest.EnvURL + " to a database where the tests may create and drop schemas"
		switch {
		case len(said) != 1 || !strings.Contains(said[0], want) || !strings.Contains(said[0], "no PostgreSQL server answers at "+empty):
			t.Errorf("CI=%v: want one line saying that no server answers at %s and to %s:\n%s", ci, empty, want, out)
		case ci && (err == nil || !bytes.Contains(out, []byte("--- FAIL: TestCorrectIdem")) || !strings.Contains(said[0], "CI is set, so a missing database fails the test")):
			t.Errorf("CI=true: %v; want the test to fail, saying CI made it fail:\n%s", err, out)
		case !ci && (err != nil || !bytes.Contains(out, []byte("--- SKIP: TestCorrectIdem"))):
			t.Errorf("without CI: %v; want the test skipped:\n%s", err, out)
		default:
			t.Logf("CI=%v, no server: %s", ci, said[0])
		}
	}
}
