package cli

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/internal/emit/gocode"
	"github.com/idemgen/idemgen/internal/testmodule"
)

// TestContractMismatchFailsToCompile builds the code idemgen generates
// against a copy of the runtime whose contract constant was bumped, as a
// release of idem that generated code must not silently compile against
// would bump it: the build fails on the contract line of idem_gen.go, and the
// comment above that line, where the compiler's error points, says to
// regenerate with the matching idemgen. Against the same copy without the
// bump the code builds, so the bump alone is what fails.
func TestContractMismatchFailsToCompile(t *testing.T) {
	runtime := runtimeCopy(t)
	contract := filepath.Join(runtime, "idem", "idemimpl", "contract.go")
	original, err := os.ReadFile(contract)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(original, []byte("const "+gocode.RuntimeContract+" = true")) {
		t.Fatalf("idem/idemimpl/contract.go does not declare %s, the contract idemgen emits", gocode.RuntimeContract)
	}
	bumped := bumpContract(t, gocode.RuntimeContract)
	if err := os.WriteFile(contract, bytes.ReplaceAll(original, []byte(gocode.RuntimeContract), []byte(bumped)), 0o644); err != nil {
		t.Fatal(err)
	}

	module := t.TempDir()
	if err := testmodule.Write(module, "example.com/contract", runtime); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GOFLAGS", "-mod=mod")
	if err := os.WriteFile(filepath.Join(module, "app.go"), []byte(handlerSource), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := run(module, []string{"-migrations", "migrations", "."}, &stdout, &stderr); code != ExitOK {
		t.Fatalf("idemgen exit %d:\n%s%s", code, stdout.String(), stderr.String())
	}

	out, err := goBuild(module)
	if err == nil {
		t.Fatalf("the generated code compiles against a runtime whose contract is %s:\n%s", bumped, out)
	}
	t.Logf("go build against the bumped runtime:\n%s", out)
	m := regexp.MustCompile(`(?m)^\S*idem_gen\.go:(\d+):\d+: undefined: idemimpl\.` + gocode.RuntimeContract + `$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("the build does not fail on the contract line of idem_gen.go (want undefined: idemimpl.%s):\n%s", gocode.RuntimeContract, out)
	}
	line, _ := strconv.Atoi(m[1])
	above := commentAbove(t, filepath.Join(module, "idem_gen.go"), line)
	for _, want := range []string{"compile-time assertion", "regenerate", "idemgen", "go.mod"} {
		if !strings.Contains(above, want) {
			t.Errorf("the comment above idem_gen.go:%d does not say %q:\n%s", line, want, above)
		}
	}

	if err := os.WriteFile(contract, original, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := goBuild(module); err != nil {
		t.Fatalf("the generated code does not compile against the unchanged runtime copy either, so the test shows nothing:\n%s", out)
	}
}

// runtimeCopy copies what building generated code needs of this repository,
// its go.mod and go.sum and the packages of this module that idem is built
// from (idem and the sqlc output it uses) without their tests, into a
// directory that a test module can replace the repository with.
func runtimeCopy(t *testing.T) string {
	t.Helper()
	repo, dir := repoRoot(t), t.TempDir()
	// Every package of this module that idem/idemimpl builds from (idemimpl,
	// idem and, for instance, the sqlc output it queries the outbox with),
	// without tests.
	cmd := exec.Command("go", "list", "-deps", "-f",
		`{{if and (not .Standard) .Module}}{{if .Module.Main}}{{.Dir}}{{range .GoFiles}} {{.}}{{end}}{{range .EmbedFiles}} {{.}}{{end}}{{"\n"}}{{end}}{{end}}`, "./idem/idemimpl")
	cmd.Dir = repo
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps ./idem/idemimpl: %v", err)
	}
	files := []string{"go.mod", "go.sum"}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		rel, err := filepath.Rel(repo, fields[0])
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range fields[1:] {
			files = append(files, filepath.Join(rel, name))
		}
	}
	for _, name := range files {
		data, err := os.ReadFile(filepath.Join(repo, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// bumpContract returns the next contract's name: SupportPackageIsVersion1 →
// SupportPackageIsVersion2.
func bumpContract(t *testing.T, name string) string {
	t.Helper()
	m := regexp.MustCompile(`^(SupportPackageIsVersion)(\d+)$`).FindStringSubmatch(name)
	if m == nil {
		t.Fatalf("contract name %q is not SupportPackageIsVersionN", name)
	}
	n, _ := strconv.Atoi(m[2])
	return m[1] + strconv.Itoa(n+1)
}

func goBuild(dir string) (string, error) {
	cmd := exec.Command("go", "build", "./...")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// commentAbove returns the comment lines right above line (1-based) of file.
func commentAbove(t *testing.T, file string, line int) string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	if line < 1 || line > len(lines) {
		t.Fatalf("%s has no line %d", file, line)
	}
	var comment []string
	for i := line - 2; i >= 0 && strings.HasPrefix(lines[i], "//"); i-- {
		comment = append([]string{lines[i]}, comment...)
	}
	return strings.Join(comment, "\n")
}
