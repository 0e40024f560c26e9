package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestFirstArgument: a first argument that is a path, an import path, a
// wildcard or the main module's path means generate; another word is a
// subcommand, so a misspelled one is a usage error.
func TestFirstArgument(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module app\n\ngo 1.26\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for arg, want := range map[string]bool{
		".": true, "./...": true, "../x": true, "/abs/dir": true, "example.com/x": true, "app/sub": true,
		"app": true, "all": true, "-v": true, "chek": false, "lint": false, "generat": false,
	} {
		if got := isPattern(dir, arg); got != want {
			t.Errorf("isPattern(%q) = %v, want %v", arg, got, want)
		}
	}
	var stdout, stderr bytes.Buffer
	if code := run(dir, []string{"vett", "."}, &stdout, &stderr); code != ExitUsage ||
		stderr.String() != "idemgen: unknown command \"vett\" (did you mean vet?)\nRun 'idemgen help' for usage.\n" {
		t.Errorf("exit %d, stderr:\n%s", code, stderr.String())
	}
}
