package cli

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/mod/modfile"

	"github.com/idemgen/idemgen/internal/testmodule"
)

// handlerSource is a package with one handler, for a module of its own.
const handlerSource = `package app

import (
	"context"

	"github.com/jackc/pgx/v5"
)

type Msg struct{ ID string }

//idem:handler consumer=app.a key=ID
func A(ctx context.Context, tx pgx.Tx, msg Msg) error { return nil }
`

// newModule writes a module named example.com/fresh with the handler
// package and gomod as its go.mod. With tidy, go.mod also requires pgx at
// this repository's version, and go mod tidy runs, as after go get
// github.com/jackc/pgx/v5. The go command resolves modules through the
// configured proxy and never records anything on its own (-mod=readonly,
// the default for users).
func newModule(t *testing.T, gomod string, tidy bool) string {
	t.Helper()
	t.Setenv("GOFLAGS", "-mod=readonly")
	dir := t.TempDir()
	files := map[string]string{"go.mod": gomod, "app.go": handlerSource}
	if tidy {
		repo := repoRoot(t)
		data, err := os.ReadFile(filepath.Join(repo, "go.mod"))
		if err != nil {
			t.Fatal(err)
		}
		mf, err := modfile.ParseLax("go.mod", data, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range mf.Require {
			if r.Mod.Path == "github.com/jackc/pgx/v5" {
				files["go.mod"] += "\nrequire " + r.Mod.Path + " " + r.Mod.Version + "\n"
			}
		}
		sum, err := os.ReadFile(filepath.Join(repo, "go.sum"))
		if err != nil {
			t.Fatal(err)
		}
		files["go.sum"] = string(sum)
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if tidy {
		goCommand(t, dir, "mod", "tidy")
	}
	return dir
}

func goCommand(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func repoRoot(t *testing.T) string {
	t.Helper()
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return repo
}

// TestModuleWithoutPgx: in a module whose go.mod lacks pgx, idemgen says
// what to run, not the type checker's `could not import
// github.com/jackc/pgx/v5 (invalid package name: "")`.
func TestModuleWithoutPgx(t *testing.T) {
	dir := newModule(t, "module example.com/fresh\n\ngo 1.26\n", false)
	var stdout, stderr bytes.Buffer
	code := run(dir, []string{"-migrations", "migrations", "."}, &stdout, &stderr)
	got := stderr.String()
	if code != ExitFail || !strings.Contains(got, "app.go:6:2: could not import github.com/jackc/pgx/v5 (no module in go.mod provides it; run go get github.com/jackc/pgx/v5)") ||
		strings.Contains(got, "invalid package name") {
		t.Errorf("exit %d, stderr:\n%s", code, got)
	}
}

// TestNoteModulesMissing: when generate wrote files that import modules the
// go.mod does not require yet, it says which and what to run; go vet fails
// until then. Once go.mod requires them, it says nothing.
func TestNoteModulesMissing(t *testing.T) {
	repo := repoRoot(t)
	args := []string{"-migrations", "migrations", "."}

	t.Run("no_idemgen", func(t *testing.T) {
		// go get github.com/jackc/pgx/v5 and go mod tidy, nothing else: the
		// tool run as an installed binary.
		dir := newModule(t, "module example.com/fresh\n\ngo 1.26\n", true)
		var stdout, stderr bytes.Buffer
		if code := run(dir, args, &stdout, &stderr); code != ExitOK {
			t.Fatalf("exit %d\n%s", code, stderr.String())
		}
		want := "idemgen: note: go.mod does not yet require modules the generated code needs (github.com/idemgen/idemgen); go vet and go test fail until you run go get github.com/idemgen/idemgen/idem, then go mod tidy\n"
		if got := stderr.String(); got != want {
			t.Errorf("stderr:\n%s\nwant:\n%s", got, want)
		}
	})

	t.Run("tool", func(t *testing.T) {
		// go get -tool github.com/idemgen/idemgen/cmd/idemgen: go.mod requires
		// what the generator needs, not what the generated tests need
		// (idemtest imports goose).
		dir := newModule(t, "module example.com/fresh\n\ngo 1.26\n\nrequire github.com/idemgen/idemgen v0.0.0\n\nreplace github.com/idemgen/idemgen => "+repo+
			"\n\ntool github.com/idemgen/idemgen/cmd/idemgen\n", true)
		var stdout, stderr bytes.Buffer
		if code := run(dir, args, &stdout, &stderr); code != ExitOK {
			t.Fatalf("exit %d\n%s", code, stderr.String())
		}
		got := stderr.String()
		if !strings.HasPrefix(got, "idemgen: note: go.mod does not yet require modules the generated code needs (") ||
			!strings.Contains(got, "github.com/pressly/goose/v3") ||
			!strings.HasSuffix(got, "); go vet and go test fail until you run go mod tidy\n") {
			t.Errorf("stderr:\n%s", got)
		}
		cmd := exec.Command("go", "vet", ".")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err == nil {
			t.Errorf("go vet passes before go mod tidy, so the note is wrong:\n%s", out)
		}
		goCommand(t, dir, "mod", "tidy")
		goCommand(t, dir, "vet", ".")
	})

	t.Run("complete", func(t *testing.T) {
		dir := t.TempDir()
		t.Setenv("GOFLAGS", "-mod=mod") // as the golden tests: see testmodule.Write
		if err := testmodule.Write(dir, "example.com/fresh", repo); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "app.go"), []byte(handlerSource), 0o644); err != nil {
			t.Fatal(err)
		}
		var stdout, stderr bytes.Buffer
		if code := run(dir, args, &stdout, &stderr); code != ExitOK || stderr.Len() > 0 {
			t.Errorf("exit %d, stderr:\n%s", code, stderr.String())
		}
	})
}

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
