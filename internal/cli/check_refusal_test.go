package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/fstest"

	"golang.org/x/tools/txtar"
)

// refusalKinds are golden cases in which generate refuses, one per kind of
// refusal. TestCheckPrintsTheRefusal fails when one of them stops refusing,
// so that it keeps covering every kind.
var refusalKinds = map[string]string{
	"evolve_refused":           "a key part changed type, removed, added as required; the table renamed; the guard removed",
	"evolve_result_refused":    "a result type changed without -accept-result-change",
	"external_evolve_refused":  "a claims table's key changed",
	"external_switch_mode":     "a consumer switched between mode=tx and mode=external",
	"errors_migration_changed": "a migration idemgen wrote was edited",
	"sum_edited_migration":     "a recorded migration was edited",
	"sum_two_branches":         "two branches took one version",
	"outbox_edited_copy":       "the folder's copy of an outbox migration was edited",
	"removed_consumer":         "a consumer lost its handler without being retired",
	"shared_folder_clash":      "a consumer of another package's folder",
	"errors_compile":           "a package that does not compile",
	"errors_signature":         "a handler's signature is wrong",
	"errors_key":               "a key names no field, or one of a type that cannot be a key",
	"errors_entity":            "a mode=entity handler's table is wrong",
}

// TestCheckPrintsTheRefusal runs check after every refused generate run of
// the golden cases, with the same arguments. check must print the same
// diagnostics and exit 1. It must print no diff and no advice to run go
// generate, which would refuse. Its last line says that generate refuses,
// where generate's says that nothing was written.
func TestCheckPrintsTheRefusal(t *testing.T) {
	cases, err := filepath.Glob("testdata/*.txtar")
	if err != nil || len(cases) == 0 {
		t.Fatalf("no golden cases: %v", err)
	}
	root := goldenModule(t)
	t.Setenv("GOFLAGS", "-mod=mod")
	var mu sync.Mutex
	var refused []string
	t.Run("cases", func(t *testing.T) {
		for _, file := range cases {
			name := strings.TrimSuffix(filepath.Base(file), ".txtar")
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				if checkRefusals(t, file, filepath.Join(root, name)) {
					mu.Lock()
					refused = append(refused, name)
					mu.Unlock()
				}
			})
		}
	})
	slices.Sort(refused)
	t.Logf("check printed generate's refusal in %d cases: %s", len(refused), strings.Join(refused, ", "))
	for name, kind := range refusalKinds {
		if !slices.Contains(refused, name) {
			t.Errorf("case %s (%s): generate did not refuse, so check's refusal went untested", name, kind)
		}
	}
}

// checkRefusals replays the runs of the case in file in dir and, after each
// generate run that refuses, runs check with the same arguments and compares
// their outputs. It reports whether a generate run refused.
func checkRefusals(t *testing.T, file, dir string) bool {
	archive, err := txtar.ParseFile(file)
	if err != nil {
		t.Fatal(err)
	}
	runs := [][]string{{"-migrations", "migrations", "."}}
	var r runner
	for _, f := range archive.Files {
		switch {
		case f.Name == "args":
			runs = nil
			for _, line := range strings.Split(string(f.Data), "\n") {
				if args := strings.Fields(line); len(args) > 0 {
					runs = append(runs, args)
				}
			}
		case strings.HasPrefix(f.Name, runtimeMigrations):
			if r.outbox == nil {
				r.outbox = runtimeFS(t)
			}
			r.outbox.(fstest.MapFS)[strings.TrimPrefix(f.Name, runtimeMigrations)] = &fstest.MapFile{Data: f.Data}
		case f.Name == "go-test" || f.Name == "deleted" || strings.HasPrefix(f.Name, "want:"):
		default:
			path := filepath.Join(dir, f.Name)
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, f.Data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}

	refused := false
	for _, args := range runs {
		var stdout, stderr bytes.Buffer
		code := r.run(dir, args, &stdout, &stderr)
		if isSubcommand(args[0]) || code != ExitFail || !strings.HasSuffix(stderr.String(), "idemgen: nothing was written\n") {
			continue
		}
		refused = true
		var checkOut, checkErr bytes.Buffer
		code = r.run(dir, append([]string{"check"}, args...), &checkOut, &checkErr)
		wantCheckRefusal(t, code, checkOut.String(), checkErr.String(), stderr.String())
	}
	return refused
}

// wantCheckRefusal fails unless check printed the refusal generate printed
// (genStderr) and exited 1. code, stdout and stderr are check's. Its
// diagnostics must be generate's, then a line saying that generate refuses.
// It must print no diff and no advice to run go generate.
func wantCheckRefusal(t *testing.T, code int, stdout, stderr, genStderr string) {
	t.Helper()
	want := strings.TrimSuffix(genStderr, "idemgen: nothing was written\n") + refusal + "\n"
	if code != ExitFail || stdout != "" || stderr != want {
		t.Errorf("idemgen check: exit %d, want %d\n--- stdout (want none) ---\n%s--- stderr ---\n%s--- want stderr (generate's refusal) ---\n%s",
			code, ExitFail, stdout, stderr, want)
	}
	if strings.Contains(stderr, "run go generate") {
		t.Errorf("idemgen check advises go generate, which refuses:\n%s", stderr)
	}
}

// isSubcommand reports whether arg names a subcommand other than generate.
func isSubcommand(arg string) bool {
	return arg != "generate" && slices.Contains(commands, arg)
}
