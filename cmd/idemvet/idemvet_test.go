package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/internal/testmodule"
)

// finding matches a line of outside-tx, external-call or //idem:allow
// output, with its file and line.
var finding = regexp.MustCompile(`^(?:\./)?([\w/.-]+\.go):(\d+):\d+: ((?:outside-tx|external-call|//idem:allow).*)$`)

// expected matches a // want comment of the analyzer's test table that
// expects such a finding.
var expected = regexp.MustCompile("// want .*`\\^?(?:outside-tx|external-call|//idem:allow)")

// TestSameFindings builds idemvet and idemgen and runs go vet -vettool=idemvet
// and idemgen vet on the module of the analyzer's test table
// (analysis/idemcheck/testdata): both print the same outside-tx,
// external-call and //idem:allow findings, as file:line:col: message,
// on exactly the lines where the table expects one.
func TestSameFindings(t *testing.T) {
	if testing.Short() {
		t.Skip("builds two commands and vets a module")
	}
	dir := t.TempDir()
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	mod := filepath.Join(dir, "mod")
	if err := testmodule.Write(mod, "example.com/vet", repo); err != nil {
		t.Fatal(err)
	}
	table := filepath.Join(repo, "analysis", "idemcheck", "testdata")
	want := map[string]bool{}
	err = filepath.WalkDir(table, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(table, path)
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(data), "\n") {
			if expected.MatchString(line) {
				want[fmt.Sprintf("%s:%d", filepath.ToSlash(rel), i+1)] = true
			}
		}
		if err := os.MkdirAll(filepath.Join(mod, filepath.Dir(rel)), 0o755); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(mod, rel), data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(want) < 20 {
		t.Fatalf("the table expects %d findings; it has more", len(want))
	}

	idemvet, idemgen := filepath.Join(dir, "idemvet"), filepath.Join(dir, "idemgen")
	build := exec.Command("go", "build", "-o", idemvet, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build idemvet: %v\n%s", err, out)
	}
	build = exec.Command("go", "build", "-o", idemgen, "../idemgen")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build idemgen: %v\n%s", err, out)
	}
	// The test module resolves what it imports as the golden tests' modules
	// do (see testmodule.Write); the builds above run in this repository's
	// workspace, where -mod=mod is refused, so it is set only now.
	t.Setenv("GOFLAGS", "-mod=mod")

	vet := run(t, mod, "go", "vet", "-vettool="+idemvet, "./...")
	gen := run(t, mod, idemgen, "vet", "./...")
	for name, got := range map[string]map[string]string{"go vet -vettool=idemvet": vet, "idemgen vet": gen} {
		for at := range want {
			if _, ok := got[at]; !ok {
				t.Errorf("%s reports nothing at %s, where the table expects a finding", name, at)
			}
		}
		for at, line := range got {
			if !want[at] {
				t.Errorf("%s reports what the table does not expect: %s", name, line)
			}
		}
	}
	for at, line := range vet {
		if gen[at] != line {
			t.Errorf("at %s, go vet -vettool=idemvet and idemgen vet differ:\n%s\n%s", at, line, gen[at])
		}
	}
}

// run runs a command in dir, which exits 1 for its findings, and returns
// its outside-tx, external-call and //idem:allow findings by file:line,
// each as file:line:col: message.
func run(t *testing.T, dir string, name string, args ...string) map[string]string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); code != 1 {
		t.Fatalf("%s %s: exit %d (want 1, for the findings): %v\n%s", name, strings.Join(args, " "), code, err, out)
	}
	found := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	sc.Buffer(nil, 1<<20)
	var lines []string
	for sc.Scan() {
		m := finding.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		at := m[1] + ":" + m[2]
		line := strings.TrimPrefix(sc.Text(), "./")
		if _, dup := found[at]; dup {
			t.Errorf("%s: two findings at %s", name, at)
		}
		found[at] = line
		lines = append(lines, line)
	}
	slices.Sort(lines)
	t.Logf("%s %s:\n%s", filepath.Base(name), strings.Join(args, " "), strings.Join(lines, "\n"))
	return found
}
