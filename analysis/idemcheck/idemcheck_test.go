package idemcheck_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"golang.org/x/tools/go/analysis/analysistest"

	"github.com/idemgen/idemgen/analysis/idemcheck"
	"github.com/idemgen/idemgen/internal/testmodule"
)

// TestAnalyzer runs the analyzer with analysistest on testdata/app, in a
// module that requires this repository (replaced by the working tree): each
// finding is a // want comment on its line (on a directive line, the
// directive's trailing comment), and there are no others.
func TestAnalyzer(t *testing.T) {
	dir := t.TempDir()
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if err := testmodule.Write(dir, "example.com/vet", repo); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir("testdata/app")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "app"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join("testdata/app", e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "app", e.Name()), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// analysistest loads with GOPROXY=off, from the module cache: fetch
	// what the package and its tests import first (this package's own build
	// fetched none of it), through the configured proxy.
	t.Setenv("GOFLAGS", "-mod=mod")
	list := exec.Command("go", "list", "-deps", "-test", "./app")
	list.Dir = dir
	if out, err := list.CombinedOutput(); err != nil {
		t.Fatalf("go list -deps -test ./app: %v\n%s", err, out)
	}

	results := analysistest.Run(t, dir, idemcheck.Analyzer, "./app")
	if len(results) == 0 {
		t.Fatal("no package analysed")
	}
}
