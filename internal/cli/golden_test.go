package cli

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"unicode/utf8"

	"golang.org/x/tools/txtar"

	"github.com/idemgen/idemgen/idem/idemtest"
	"github.com/idemgen/idemgen/internal/emit/gocode"
	"github.com/idemgen/idemgen/internal/testmodule"
	"github.com/idemgen/idemgen/migrations"
)

var update = flag.Bool("update", false, "rewrite the want sections of testdata/*.txtar from what idemgen does now")

// TestGolden runs idemgen on each testdata/*.txtar case. A case holds input
// files, optionally the command line (-- args --; default "-migrations
// migrations ."; one run per line, in order, for a case of several runs, such
// as packages generated one after the other), -- runtime-migrations/NAME --
// sections for migrations the runtime's outbox chain gains in this case (added
// to migrations.FS, to play a newer runtime), and what must come out (of
// the runs together, with one exit code per run): -- want:PATH -- for every file
// written, -- deleted -- listing files removed, -- want:stdout --,
// -- want:stderr -- and -- want:exit --. Each case is a package directory in
// one temporary module that requires this repository, and every case that
// exits 0 is compiled (go vet, which compiles the generated tests too)
// afterwards. The generated tests of a case with a -- go-test -- section are
// also run against the test database.
func TestGolden(t *testing.T) {
	cases, err := filepath.Glob("testdata/*.txtar")
	if err != nil || len(cases) == 0 {
		t.Fatalf("no golden cases: %v", err)
	}
	root := goldenModule(t)
	// The go command run by go/packages may record what it resolves in the
	// case module's go.mod. It resolves modules through the configured
	// proxy: on a fresh machine the module cache lacks the go.mod files of
	// the dependencies' own requirements, which only the full module graph
	// of a -mod=mod build asks for.
	t.Setenv("GOFLAGS", "-mod=mod")

	var mu sync.Mutex
	var passing, goTest []string
	t.Run("cases", func(t *testing.T) {
		for _, file := range cases {
			name := strings.TrimSuffix(filepath.Base(file), ".txtar")
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				ok, runTests := runCase(t, file, filepath.Join(root, name))
				mu.Lock()
				defer mu.Unlock()
				if ok {
					passing = append(passing, "./"+name+"/...")
				}
				if ok && runTests {
					goTest = append(goTest, "./"+name+"/...")
				}
			})
		}
	})
	if t.Failed() || len(passing) == 0 {
		return
	}
	slices.Sort(passing)
	cmd := exec.Command("go", append([]string{"vet"}, passing...)...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the generated code of the passing cases does not compile:\n%s", out)
	}
	t.Run("migrations", func(t *testing.T) {
		for _, dir := range migrationDirs(t, root, passing) {
			t.Run(dir, func(t *testing.T) { applyMigrations(t, filepath.Join(root, dir)) })
		}
	})
	if len(goTest) == 0 {
		return
	}
	t.Run("generated_tests", func(t *testing.T) {
		idemtest.DatabaseURL(t)
		slices.Sort(goTest)
		cmd := exec.Command("go", append([]string{"test", "-count=1", "-v"}, goTest...)...)
		cmd.Dir = root
		// Fewer concurrent deliveries than the default: other packages'
		// tests share the server's connections.
		cmd.Env = append(os.Environ(), idemtest.EnvDeliveries+"=4")
		out, err := cmd.CombinedOutput()
		switch {
		case err != nil:
			t.Fatalf("the generated tests fail:\n%s", out)
		case bytes.Contains(out, []byte("--- SKIP")) || !bytes.Contains(out, []byte("--- PASS: Test")):
			t.Fatalf("the generated tests did not all run:\n%s", out)
		}
	})
}

// migrationDirs returns the folders of the passing cases (./name/...
// patterns below root) that hold .sql files, relative to root.
func migrationDirs(t *testing.T, root string, passing []string) []string {
	t.Helper()
	var dirs []string
	for _, pattern := range passing {
		caseDir := filepath.Join(root, strings.TrimSuffix(pattern, "/..."))
		err := filepath.WalkDir(caseDir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || filepath.Ext(path) != ".sql" {
				return err
			}
			rel, err := filepath.Rel(root, filepath.Dir(path))
			if err == nil && !slices.Contains(dirs, filepath.ToSlash(rel)) {
				dirs = append(dirs, filepath.ToSlash(rel))
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(dirs)
	return dirs
}

// applyMigrations applies the goose migrations in dir to a fresh schema of
// the test database, then migrates down to 0 and up again, as the generated
// tests' migrations are applied: a migration that goose or PostgreSQL
// refuses fails here even in a case whose tests are not run.
func applyMigrations(t *testing.T, dir string) {
	fsys := os.DirFS(dir)
	db := idemtest.New(t, fsys) // up
	provider := db.Migrations(t, fsys)
	ctx := context.Background()
	if _, err := provider.DownTo(ctx, 0); err != nil {
		t.Fatalf("migrate down to 0: %v", err)
	}
	if _, err := provider.Up(ctx); err != nil {
		t.Fatalf("migrate up after down to 0: %v", err)
	}
}

// runCase runs one case in dir and reports whether it exited 0, and whether
// its generated tests are to be run.
func runCase(t *testing.T, file, dir string) (ok, goTest bool) {
	archive, err := txtar.ParseFile(file)
	if err != nil {
		t.Fatal(err)
	}
	runs := [][]string{{"-migrations", "migrations", "."}}
	inputs := map[string][]byte{}
	var r runner
	var wantDeleted []string
	for _, f := range archive.Files {
		switch {
		case f.Name == "args":
			runs = nil
			for _, line := range strings.Split(string(f.Data), "\n") {
				if args := strings.Fields(line); len(args) > 0 {
					runs = append(runs, args)
				}
			}
		case f.Name == "go-test":
			goTest = true
		case f.Name == "deleted":
			wantDeleted = strings.Fields(string(f.Data))
		case strings.HasPrefix(f.Name, runtimeMigrations):
			if r.outbox == nil {
				r.outbox = runtimeFS(t)
			}
			r.outbox.(fstest.MapFS)[strings.TrimPrefix(f.Name, runtimeMigrations)] = &fstest.MapFile{Data: f.Data}
		case strings.HasPrefix(f.Name, "want:"):
		default:
			inputs[f.Name] = f.Data
			path := filepath.Join(dir, f.Name)
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, f.Data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}

	var stdout, stderr, exits bytes.Buffer
	code := 0
	for _, args := range runs {
		c := r.run(dir, args, &stdout, &stderr)
		exits.WriteString(strconv.Itoa(c) + "\n")
		code = max(code, c)
	}

	got := map[string][]byte{
		"want:stdout": stdout.Bytes(),
		"want:stderr": stderr.Bytes(),
		"want:exit":   exits.Bytes(),
	}
	var deleted []string
	for name := range inputs {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			deleted = append(deleted, name)
		}
	}
	slices.Sort(deleted)
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		rel = filepath.ToSlash(rel)
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if in, ok := inputs[rel]; !ok || !bytes.Equal(in, data) {
			got["want:"+rel] = data
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	for _, args := range runs {
		if code == 0 && args[0] != "check" {
			rerun(t, r, dir, args)
		}
	}
	checkWidth(t, got)
	checkTestDocs(t, got)
	if *update {
		rewrite(t, file, archive, got, deleted)
		return code == 0, goTest
	}
	want := map[string][]byte{}
	for _, f := range archive.Files {
		if strings.HasPrefix(f.Name, "want:") {
			want[f.Name] = f.Data
		}
	}
	for _, name := range []string{"want:stdout", "want:stderr"} {
		if _, ok := want[name]; !ok {
			want[name] = nil
		}
	}
	for name := range union(want, got) {
		if !bytes.Equal(normalize(want[name]), normalize(got[name])) {
			t.Errorf("%s differs:\n--- got ---\n%s\n--- want ---\n%s", name, got[name], want[name])
		}
	}
	if !slices.Equal(deleted, wantDeleted) {
		t.Errorf("deleted %v, want %v", deleted, wantDeleted)
	}
	return code == 0, goTest
}

// rerun checks that a second run changes nothing on disk, not even a
// modification time, and that check then finds everything current.
func rerun(t *testing.T, r runner, dir string, args []string) {
	t.Helper()
	before := snapshot(t, dir)
	var stdout, stderr bytes.Buffer
	if code := r.run(dir, args, &stdout, &stderr); code != 0 {
		t.Fatalf("second run: exit %d\n%s", code, stderr.String())
	}
	if after := snapshot(t, dir); !maps.Equal(before, after) {
		t.Errorf("a second run with the same input touched files:\nbefore %v\nafter  %v", before, after)
	}
	stdout.Reset()
	stderr.Reset()
	if code := r.run(dir, append([]string{"check"}, args...), &stdout, &stderr); code != 0 || stdout.Len() > 0 {
		t.Errorf("check after generate: exit %d\n%s%s", code, stdout.String(), stderr.String())
	}
}

// runtimeMigrations starts the names of a case's sections that add a
// migration to the runtime's outbox chain.
const runtimeMigrations = "runtime-migrations/"

// runtimeFS returns a copy of the runtime's outbox migrations (migrations.FS)
// that a case can add to.
func runtimeFS(t *testing.T) fstest.MapFS {
	t.Helper()
	m := fstest.MapFS{}
	names, err := fs.Glob(migrations.FS, "*.sql")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		data, err := fs.ReadFile(migrations.FS, name)
		if err != nil {
			t.Fatal(err)
		}
		m[name] = &fstest.MapFile{Data: data}
	}
	return m
}

// snapshot maps every file below dir to its size and modification time.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		m[path] = fmt.Sprint(info.Size(), info.ModTime().UnixNano())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func normalize(b []byte) []byte {
	return bytes.TrimRight(b, "\n")
}

func union(a, b map[string][]byte) map[string]bool {
	m := map[string]bool{}
	for k := range a {
		m[k] = true
	}
	for k := range b {
		m[k] = true
	}
	return m
}

// rewrite replaces the case's want sections with got.
func rewrite(t *testing.T, file string, archive *txtar.Archive, got map[string][]byte, deleted []string) {
	var files []txtar.File
	for _, f := range archive.Files {
		if !strings.HasPrefix(f.Name, "want:") && f.Name != "deleted" {
			files = append(files, f)
		}
	}
	if len(deleted) > 0 {
		files = append(files, txtar.File{Name: "deleted", Data: []byte(strings.Join(deleted, "\n") + "\n")})
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for k := range got {
			if !yield(k) {
				return
			}
		}
	})
	for _, name := range names {
		data := got[name]
		if (name == "want:stdout" || name == "want:stderr") && len(data) == 0 {
			continue
		}
		if len(data) > 0 && data[len(data)-1] != '\n' {
			data = append(data, '\n')
		}
		files = append(files, txtar.File{Name: name, Data: data})
	}
	archive.Files = files
	if err := os.WriteFile(file, txtar.Format(archive), 0o644); err != nil {
		t.Fatal(err)
	}
}

// goldenModule creates the module the cases live in: it requires this
// repository (replaced by the working tree) and the same dependency versions,
// so that loading and vetting need nothing beyond the module cache.
func goldenModule(t *testing.T) string {
	root := t.TempDir()
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if err := testmodule.Write(root, "example.com/golden", repo); err != nil {
		t.Fatal(err)
	}
	return root
}

// checkWidth fails for a generated Go file (idem_gen.go, idem_gen_test.go)
// with a line longer than gocode.Width columns (a tab counted as one, as
// awk's length counts it): generated code is read in review.
func checkWidth(t *testing.T, got map[string][]byte) {
	t.Helper()
	for name, data := range got {
		if !strings.Contains(name, "idem_gen") || !strings.HasSuffix(name, ".go") {
			continue
		}
		for i, line := range strings.Split(string(data), "\n") {
			if n := utf8.RuneCountInString(line); n > gocode.Width {
				t.Errorf("%s:%d is %d columns, more than %d: %s", strings.TrimPrefix(name, "want:"), i+1, n, gocode.Width, line)
			}
		}
	}
}

// checkTestDocs fails for a generated test file (idem_gen_test.go) with a
// doc comment of more than two lines: generated files are read in review,
// and what the scenarios prove is told once, in package idemtest's docs.
func checkTestDocs(t *testing.T, got map[string][]byte) {
	t.Helper()
	for name, data := range got {
		if !strings.HasSuffix(name, "idem_gen_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, data, parser.ParseComments)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Doc == nil {
				continue
			}
			if n := strings.Count(strings.TrimRight(fn.Doc.Text(), "\n"), "\n") + 1; n > 2 {
				t.Errorf("%s: the doc comment of %s has %d lines; a generated test's doc has at most 2", strings.TrimPrefix(name, "want:"), fn.Name.Name, n)
			}
		}
	}
}
