package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// allocResults are the go test -benchmem benchmarks of package bench/ledger
// (one delivery at a time against the database) and where the generated
// wrapper's allocations come from.
type allocResults struct {
	command string
	benches []benchLine
	// profiled is how many first deliveries the allocation profile holds;
	// bySource sums their allocations (outside the handler) by the package
	// of the nearest non-standard-library function that made them.
	profiled int
	bySource []sourceAllocs
	top      []sourceAllocs // the same, by function
}

type benchLine struct {
	name                 string
	nsPerOp, bPerOp, aPO float64
}

type sourceAllocs struct {
	name   string
	allocs float64 // per message
}

var benchRE = regexp.MustCompile(`^Benchmark(\S+?)(?:-\d+)?\s+\d+\s+([0-9.]+) ns/op\s+([0-9.]+) B/op\s+([0-9.]+) allocs/op`)

// deliveryHandleRE names, for pprof's -focus, the method every first
// delivery of the profiled benchmark goes through: the engine's Handle,
// which the generated wrapper's embedded idemimpl.Inbox promotes.
const deliveryHandleRE = `idem/idemimpl\.\(\*(Inbox|delivery)\[.*\]\)\.Handle$`

// profiledDeliveries is the -benchtime of the profiled run.
const profiledDeliveries = 2000

func runAlloc(ctx context.Context, cfg *config) (*allocResults, error) {
	res := &allocResults{}
	env := append(os.Environ(), "IDEMGEN_TEST_DATABASE_URL="+cfg.db)
	args := []string{"test", "-run", "^$", "-bench", ".", "-benchmem", "-benchtime", cfg.benchTime, "-count", "1", "./bench/ledger"}
	res.command = "go " + strings.Join(args, " ")
	logf("alloc: %s", res.command)
	out, err := goCmd(ctx, cfg.root, env, args...)
	if err != nil {
		return nil, err
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		m := benchRE.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		b := benchLine{name: m[1]}
		b.nsPerOp, _ = strconv.ParseFloat(m[2], 64)
		b.bPerOp, _ = strconv.ParseFloat(m[3], 64)
		b.aPO, _ = strconv.ParseFloat(m[4], 64)
		res.benches = append(res.benches, b)
	}
	if len(res.benches) == 0 {
		return nil, fmt.Errorf("no benchmark results in:\n%s", out)
	}

	// Every allocation of profiledDeliveries first deliveries, outside the
	// handler, attributed to the nearest function outside the standard
	// library: the runtime package idem (including the encoding/json and
	// crypto/sha256 work it asks for), the generated code, or pgx.
	dir, err := os.MkdirTemp("", "idembench-alloc-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	bin, prof := filepath.Join(dir, "ledger.test"), filepath.Join(dir, "mem.out")
	if _, err := goCmd(ctx, cfg.root, nil, "test", "-c", "-o", bin, "./bench/ledger"); err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, bin, "-test.run", "^$", "-test.bench", "^BenchmarkGenerated$",
		"-test.benchtime", strconv.Itoa(profiledDeliveries)+"x", "-test.memprofile", prof, "-test.memprofilerate", "1")
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("profile BenchmarkGenerated: %v\n%s", err, out)
	}
	out, err = goCmd(ctx, cfg.root, nil, "tool", "pprof", "-sample_index=alloc_objects", "-top",
		"-nodecount=0", "-nodefraction=0", "-edgefraction=0",
		"-focus="+deliveryHandleRE, `-ignore=ledger\.Post$`,
		`-hide=^(runtime|container|encoding|crypto|errors|fmt|sync|strconv|bytes|strings|context|time|math|reflect|internal|unicode|slices|io|net|os|sort|hash)[./]`,
		bin, prof)
	if err != nil {
		return nil, err
	}
	// The benchmark runs once with b.N = 1 before the profiled run.
	res.profiled = profiledDeliveries + 1
	groups := map[string]float64{}
	funcs := map[string]float64{}
	sc = bufio.NewScanner(bytes.NewReader(out))
	header := false
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if !header {
			header = len(fields) == 5 && fields[0] == "flat"
			continue
		}
		if len(fields) < 6 {
			continue
		}
		flat, err := strconv.ParseFloat(fields[0], 64)
		if err != nil || flat == 0 {
			continue
		}
		fn := strings.Join(fields[5:], " ")
		per := flat / float64(res.profiled)
		groups[allocSource(fn)] += per
		funcs[shortFunc(fn)] += per
	}
	if len(groups) == 0 {
		return nil, fmt.Errorf("no allocations in the profile:\n%s", out)
	}
	res.bySource = sortedAllocs(groups)
	res.top = sortedAllocs(funcs)
	return res, nil
}

// allocSource names the part of the code a function belongs to.
func allocSource(fn string) string {
	switch {
	case strings.HasPrefix(fn, "github.com/idemgen/idemgen/idem.") || strings.HasPrefix(fn, "github.com/idemgen/idemgen/idem/idemimpl."):
		return "packages idem and idem/idemimpl (the runtime), with the encoding/json and sha256 work they call"
	case strings.HasPrefix(fn, "github.com/idemgen/idemgen/bench/ledger."):
		return "the generated code (idem_gen.go: key extraction)"
	case strings.HasPrefix(fn, "github.com/jackc/"):
		return "pgx, sending the wrapper's statements and reading their results"
	default:
		return "other: " + fn
	}
}

// shortFunc drops the module path and the generic shape of a function name.
func shortFunc(fn string) string {
	fn = strings.TrimPrefix(fn, "github.com/idemgen/idemgen/")
	fn = strings.TrimPrefix(fn, "github.com/jackc/pgx/v5/")
	if i := strings.Index(fn, "[go.shape"); i >= 0 {
		if j := strings.LastIndex(fn, "]"); j > i {
			fn = fn[:i] + "[…]" + fn[j+1:]
		}
	}
	return strings.TrimSuffix(fn, " (inline)")
}

func sortedAllocs(m map[string]float64) []sourceAllocs {
	var out []sourceAllocs
	for name, v := range m {
		out = append(out, sourceAllocs{name, v})
	}
	slices.SortFunc(out, func(a, b sourceAllocs) int {
		if a.allocs != b.allocs {
			if a.allocs > b.allocs {
				return -1
			}
			return 1
		}
		return strings.Compare(a.name, b.name)
	})
	return out
}

// goCmd runs the go command in dir and returns its standard output.
func goCmd(ctx context.Context, dir string, env []string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("go %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.Bytes())
	}
	return out, nil
}
