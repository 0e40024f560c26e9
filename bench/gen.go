package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/idemgen/idemgen/bench/internal/stats"
	"github.com/idemgen/idemgen/internal/testmodule"
)

// genResults time idemgen against go vet on the same packages. Both load and
// type-check the package from source, with its dependencies from the go
// build cache (warmed before timing), and both are timed from a built binary
// (idemgen) or the installed go command (go vet).
type genResults struct {
	reps     int
	packages []genPackage
}

type genPackage struct {
	name     string
	handlers int
	idemgen  []timing
	vet      []timing
	// golist is the time idemgen spent waiting for `go list` (go/packages'
	// debug log), per repetition.
	golist []time.Duration
}

// timing is one run: wall-clock time and CPU time (user + system, the
// process and the children it waited for).
type timing struct {
	wall, cpu time.Duration
}

func medianTiming(ts []timing, pick func(timing) time.Duration) time.Duration {
	ds := make([]time.Duration, len(ts))
	for i, t := range ts {
		ds[i] = pick(t)
	}
	return stats.Median(ds)
}

func wallOf(t timing) time.Duration { return t.wall }
func cpuOf(t timing) time.Duration  { return t.cpu }

func runGen(ctx context.Context, cfg *config) (*genResults, error) {
	tmp, err := os.MkdirTemp("", "idembench-gen-")
	if err != nil {
		return nil, err
	}
	if cfg.keep {
		logf("gen: keeping %s", tmp)
	} else {
		defer os.RemoveAll(tmp)
	}
	bin := filepath.Join(tmp, "idemgen")
	logf("gen: go build -o %s ./cmd/idemgen", bin)
	if _, err := goCmd(ctx, cfg.root, nil, "build", "-o", bin, "./cmd/idemgen"); err != nil {
		return nil, err
	}
	mod := filepath.Join(tmp, "mod")
	if err := testmodule.Write(mod, "example.com/idembench", cfg.root); err != nil {
		return nil, err
	}
	// The go command resolves modules from the cache only, and may record
	// what it resolves in the module's go.mod (as the golden tests do).
	env := append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")

	pkgs := []genPackage{{name: "billing", handlers: 3}}
	if err := copyExample(filepath.Join(cfg.root, "examples", "billing"), filepath.Join(mod, "billing")); err != nil {
		return nil, err
	}
	for _, n := range cfg.genSizes {
		name := fmt.Sprintf("syn%d", n)
		if err := writeSynthetic(filepath.Join(mod, name), name, n); err != nil {
			return nil, err
		}
		pkgs = append(pkgs, genPackage{name: name, handlers: n})
	}

	idemgenArgs := []string{"-migrations", "migrations", "."}
	for i := range pkgs {
		dir := filepath.Join(mod, pkgs[i].name)
		// Generate (the synthetic packages have no output yet) and warm
		// the build cache for both tools; then every timed run finds the
		// output current, as in a re-run of go generate.
		if _, _, err := timeCmd(ctx, dir, env, bin, idemgenArgs...); err != nil {
			return nil, err
		}
		if _, _, err := timeCmd(ctx, dir, env, "go", "vet", "."); err != nil {
			return nil, err
		}
	}

	run := 0
	for rep := range cfg.genReps {
		for i := range pkgs {
			p := &pkgs[i]
			dir := filepath.Join(mod, p.name)
			logf("gen %d/%d: %s (%d handlers)", rep+1, cfg.genReps, p.name, p.handlers)
			tools := []string{"idemgen", "vet"}
			if rep%2 == 1 {
				tools = []string{"vet", "idemgen"}
			}
			for _, tool := range tools {
				// A changed file before every run: neither go vet's
				// result cache nor the go command's build cache may
				// answer for the package itself.
				run++
				if err := perturb(dir, p.name, run); err != nil {
					return nil, err
				}
				if tool == "vet" {
					t, _, err := timeCmd(ctx, dir, env, "go", "vet", ".")
					if err != nil {
						return nil, err
					}
					p.vet = append(p.vet, t)
					continue
				}
				t, stderr, err := timeCmd(ctx, dir, append(env, "GOPACKAGESDEBUG=true"), bin, idemgenArgs...)
				if err != nil {
					return nil, err
				}
				p.idemgen = append(p.idemgen, t)
				p.golist = append(p.golist, goCommandTime(stderr))
			}
		}
	}
	return &genResults{reps: cfg.genReps, packages: pkgs}, nil
}

// timeCmd runs name in dir and measures it.
func timeCmd(ctx context.Context, dir string, env []string, name string, args ...string) (timing, []byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	t := timing{wall: time.Since(start)}
	if err != nil {
		return t, nil, fmt.Errorf("%s %s in %s: %v\n%s%s", name, strings.Join(args, " "), dir, err, stdout.Bytes(), stderr.Bytes())
	}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		t.cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	return t, stderr.Bytes(), nil
}

// goCommandRE matches go/packages' debug log of a go command it ran:
// "2006/01/02 15:04:05 1.234s for GOROOT=... go list ...".
var goCommandRE = regexp.MustCompile(`(?m)^\S+ \S+ (\S+) for .*\bgo (?:list|env)\b`)

func goCommandTime(stderr []byte) time.Duration {
	var total time.Duration
	for _, m := range goCommandRE.FindAllSubmatch(stderr, -1) {
		if d, err := time.ParseDuration(string(m[1])); err == nil {
			total += d
		}
	}
	return total
}

// perturb rewrites a file of the package with a new constant.
func perturb(dir, pkg string, run int) error {
	src := fmt.Sprintf("package %s\n\n// benchRun changes before every timed run, so that no cache answers for the package.\nconst benchRun = %d\n", pkg, run)
	return os.WriteFile(filepath.Join(dir, "zz_perturb.go"), []byte(src), 0o644)
}

// copyExample copies a package's Go files, with the test files of the
// package itself (its fixtures and generated tests; not those of package
// x_test). Not its migrations folder: its idemgen.sum records each consumer
// under the example's import path, which a copy under another module path
// may not take over, so the first (untimed) run writes the copy's own.
func copyExample(src, dst string) error {
	for _, pattern := range []string{"*.go"} {
		files, err := filepath.Glob(filepath.Join(src, pattern))
		if err != nil {
			return err
		}
		for _, f := range files {
			rel, _ := filepath.Rel(src, f)
			data, err := os.ReadFile(f)
			if err != nil {
				return err
			}
			if strings.HasSuffix(f, "_test.go") && externalTest(data) {
				continue
			}
			out := filepath.Join(dst, rel)
			if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(out, data, 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}

// externalTest reports whether a test file belongs to package x_test.
func externalTest(src []byte) bool {
	for _, line := range strings.Split(string(src), "\n") {
		if name, ok := strings.CutPrefix(line, "package "); ok {
			return strings.HasSuffix(strings.TrimSpace(name), "_test")
		}
	}
	return false
}

// handlersPerFile is how the synthetic packages spread their handlers.
const handlersPerFile = 50

// writeSynthetic writes a package of n annotated handlers in files of
// handlersPerFile: functions and methods, keyed by a string, by a string and
// an integer, and by an integer in turn, each with its message and result
// types and one UPDATE.
func writeSynthetic(dir, pkg string, n int) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for file := 0; file*handlersPerFile < n; file++ {
		var b strings.Builder
		if file == 0 {
			fmt.Fprintf(&b, "// Package %s has %d annotated handlers, for timing idemgen.\n", pkg, n)
		}
		fmt.Fprintf(&b, "package %s\n\n", pkg)
		b.WriteString("import (\n\t\"context\"\n\n\t\"github.com/jackc/pgx/v5\"\n)\n\n")
		if file == 0 {
			b.WriteString("// Service is the receiver of the method handlers.\ntype Service struct{ Factor int64 }\n\n")
		}
		for i := file * handlersPerFile; i < min(n, (file+1)*handlersPerFile); i++ {
			id := fmt.Sprintf("%04d", i)
			key := []string{"ID", "Tenant,ID", "Seq"}[i%3]
			fmt.Fprintf(&b, "// Msg%s is message %s.\ntype Msg%s struct {\n\tID      string `json:\"id\"`\n\tTenant  string `json:\"tenant\"`\n\tSeq     int64  `json:\"seq\"`\n\tAccount int64  `json:\"account\"`\n\tAmount  int64  `json:\"amount\"`\n}\n\n", id, id, id)
			fmt.Fprintf(&b, "// Res%s is the result of handler %s.\ntype Res%s struct {\n\tBalance int64 `json:\"balance\"`\n}\n\n", id, id, id)
			recv := ""
			if i%2 == 1 {
				recv = "(s *Service) "
			}
			fmt.Fprintf(&b, "// H%s applies message %s.\n//\n//idem:handler consumer=syn.h%s key=%s\nfunc %sH%s(ctx context.Context, tx pgx.Tx, msg Msg%s) (Res%s, error) {\n", id, id, id, key, recv, id, id, id)
			fmt.Fprintf(&b, "\tvar r Res%s\n\terr := tx.QueryRow(ctx, `UPDATE accounts SET balance = balance + $1 WHERE id = $2 RETURNING balance`, msg.Amount, msg.Account).Scan(&r.Balance)\n\treturn r, err\n}\n\n", id)
		}
		name := filepath.Join(dir, "handlers_"+strconv.Itoa(file)+".go")
		if err := os.WriteFile(name, []byte(b.String()), 0o644); err != nil {
			return err
		}
	}
	return nil
}
