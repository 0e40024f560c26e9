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
	// testdata holds the module's packages: app, with the handlers, and
	// the packages of the module it imports.
	err = filepath.WalkDir("testdata", func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel("testdata", path)
		if err != nil {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(rel)), 0o755); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, rel), data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
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
