// Package testmodule writes a throwaway Go module that uses this repository:
// the golden tests run idemgen in one, and the generator benchmark times
// idemgen and go vet in one.
package testmodule

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Write creates go.mod and go.sum of a module named path in dir. The module
// requires this repository, replaced by the working tree at repo, and the
// same dependency versions as repo's go.mod. Run the go command in it with
// GOFLAGS=-mod=mod and the configured module proxy: on a fresh machine it
// still fetches the go.mod files of indirect requirements.
func Write(dir, path, repo string) error {
	gomod, err := os.ReadFile(filepath.Join(repo, "go.mod"))
	if err != nil {
		return err
	}
	gosum, err := os.ReadFile(filepath.Join(repo, "go.sum"))
	if err != nil {
		return err
	}
	// Keep the requirement blocks of the repository's go.mod.
	var reqs []string
	for _, block := range strings.Split(string(gomod), "require (")[1:] {
		reqs = append(reqs, "require ("+strings.SplitAfter(block, ")")[0])
	}
	mod := fmt.Sprintf("module %s\n\ngo 1.26\n\nrequire github.com/idemgen/idemgen v0.0.0\n\nreplace github.com/idemgen/idemgen => %s\n\n%s\n",
		path, repo, strings.Join(reqs, "\n\n"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(mod), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "go.sum"), gosum, 0o644)
}
