// Package cli is idemgen's command line: subcommands, flags and exit codes.
package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/mod/modfile"

	"github.com/idemgen/idemgen/internal/diag"
	"github.com/idemgen/idemgen/internal/directive"
	"github.com/idemgen/idemgen/internal/generate"
	"github.com/idemgen/idemgen/internal/load"
	"github.com/idemgen/idemgen/internal/migrate"
	"github.com/idemgen/idemgen/internal/model"
	"github.com/idemgen/idemgen/internal/output"
)

// Exit codes.
const (
	ExitOK    = 0 // done; for check: everything is current
	ExitFail  = 1 // diagnostics, or stale output for check
	ExitUsage = 2 // bad command line
)

const usage = `idemgen generates idempotent consumers from //idem:handler directives.

Usage:
  idemgen [generate] [flags] [packages]   write idem_gen.go and inbox migrations
  idemgen check [flags] [packages]        fail with a diff if any output is stale,
                                          missing or orphaned; write nothing
  idemgen vet [flags] [packages]          report every problem and doubt about the
                                          handlers and their keys; write nothing
  idemgen audit -db URL [flags] [packages]
                                          report each consumer's inbox, claims and
                                          outbox in a database, and find doubled work
                                          in a business table (idemgen audit -h)
  idemgen outbox dead|revive -db URL [flags]
                                          list the dead outbox rows, make them due
                                          again (idemgen outbox -h)
  idemgen claims [release] -db URL [flags]
                                          list the running mode=external claims,
                                          release one (idemgen claims -h)
  idemgen version                         print idemgen's version and runtime contract

Packages are go/packages patterns: directories (., ./..., ./billing) or import
paths; the default is ".". A pattern that matches no package is an error.
Each package gets the flags its own //go:generate idemgen line gives it
(-migrations, -postgres) unless the command line gives them, so that
idemgen check ./... from the module root checks every package as go generate
writes it.

Flags:
`

// Run runs idemgen with args (without the program name) in the current
// directory and returns the exit code.
func Run(args []string, stdout, stderr io.Writer) int {
	dir, err := os.Getwd()
	if err != nil {
		fmt.Fprintln(stderr, "idemgen:", err)
		return ExitFail
	}
	return run(dir, args, stdout, stderr)
}

// commands are idemgen's subcommands.
var commands = []string{"generate", "check", "vet", "audit", "outbox", "claims", "version", "help"}

func run(dir string, args []string, stdout, stderr io.Writer) int {
	return runner{}.run(dir, args, stdout, stderr)
}

// runner is what a run takes from its surroundings besides the command line.
type runner struct {
	// outbox holds the runtime's outbox migrations; nil is migrations.FS.
	// Tests give another, to play a runtime that gained a migration.
	outbox fs.FS
	// now is the time audit measures ages against; zero is the database
	// server's now(). Tests fix it for stable output.
	now time.Time
}

func (r runner) run(dir string, args []string, stdout, stderr io.Writer) int {
	cmd := "generate"
	if len(args) > 0 {
		switch {
		case slices.Contains(commands, args[0]):
			cmd, args = args[0], args[1:]
		case !isPattern(dir, args[0]):
			fmt.Fprintln(stderr, unknownCommand(dir, args[0]))
			fmt.Fprintln(stderr, "Run 'idemgen help' for usage.")
			return ExitUsage
		}
	}
	switch cmd {
	case "audit":
		return r.audit(dir, args, stdout, stderr)
	case "outbox":
		return r.outboxCmd(args, stdout, stderr)
	case "claims":
		return r.claimsCmd(args, stdout, stderr)
	case "version":
		if len(args) > 0 {
			fmt.Fprintln(stderr, "idemgen version takes no arguments")
			return ExitUsage
		}
		info, _ := debug.ReadBuildInfo()
		return version(info, stdout)
	}
	flags := flag.NewFlagSet("idemgen "+cmd, flag.ContinueOnError)
	flags.SetOutput(stderr)
	migrations := flags.String("migrations", "", "write inbox (and outbox) migrations to `DIR`, for every package (default: each package's own layout: the -migrations of its //go:generate idemgen line, else a migrations folder in the package)")
	verbose := flags.Bool("v", false, "list the files written or deleted")
	postgres := flags.Int("postgres", 0, "the oldest PostgreSQL major `version` the migrations run on; from 15 on, nullable key parts get UNIQUE NULLS NOT DISTINCT instead of partial indexes")
	rehash := flags.Bool("rehash", false, "record the migrations folders in their "+migrate.SumFile+" as they are (after checking them yourself)")
	acceptResults := flags.String("accept-result-change", "", "comma-separated `consumers` whose result type may change in a way the results stored before cannot be decoded through (their duplicates will be dead-lettered); once, on purpose")
	flags.Usage = func() {
		fmt.Fprint(stderr, usage)
		flags.PrintDefaults()
	}
	if cmd == "help" {
		flags.SetOutput(stdout)
		fmt.Fprint(stdout, usage)
		flags.PrintDefaults()
		return ExitOK
	}
	if err := flags.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return ExitOK
		}
		return ExitUsage
	}

	prog, diags, err := load.Load(load.Config{Dir: dir, Patterns: flags.Args(), MigrationsDir: *migrations, Postgres: *postgres})
	if err != nil {
		fmt.Fprintln(stderr, "idemgen:", err)
		return ExitFail
	}
	prog = checkSecondFolder(dir, prog, *migrations != "", diags)
	var dirs []migrate.Dir
	for _, path := range prog.MigrationsDirs() {
		d, err := migrate.ReadDir(path)
		if err != nil {
			diags.Errorf(diag.Pos{}, "read migrations folder: %v", err)
			continue
		}
		dirs = append(dirs, d)
	}
	set, genDiags := generate.Generate(prog, dirs, generate.Options{Rehash: *rehash, AcceptResultChange: splitList(*acceptResults), Outbox: r.outbox})
	for _, d := range genDiags.Sorted() {
		diags.Add(d)
	}

	switch cmd {
	case "vet":
		diags.Print(stderr, dir)
		if diags.Len() > 0 {
			return ExitFail
		}
		return ExitOK
	case "check":
		return check(dir, set, diags, stdout, stderr)
	default:
		return write(dir, set, diags, *verbose, stderr)
	}
}

// checkSecondFolder refuses to give a consumer a second migrations folder:
// a handler whose consumer (of the same package) is recorded in the
// idemgen.sum of another folder of the module than the one its package's
// layout gives it would get a second inbox there. The refused packages are
// marked Unread.
func checkSecondFolder(dir string, prog model.Program, flagGiven bool, diags *diag.List) model.Program {
	gomod := findUp(dir, "go.mod")
	if gomod == "" {
		return prog
	}
	recorded, err := migrate.FindRecorded(filepath.Dir(gomod))
	if err != nil {
		diags.Errorf(diag.Pos{}, "find the module's %s files: %v", migrate.SumFile, err)
		return prog
	}
	for i, pkg := range prog.Packages {
		for _, h := range pkg.Handlers {
			for _, r := range recorded {
				if r.Consumer != h.Consumer || r.Package != h.Package || r.Retired || r.Dir == h.MigrationsDir || h.Natural() {
					continue
				}
				from := "the -migrations flag"
				switch {
				case pkg.LayoutSource != "":
					from = "the //go:generate line at " + diag.Rel(dir, filepath.Join(pkg.Dir, pkg.LayoutSource))
				case !flagGiven:
					from = "the default: no -migrations flag, and no //go:generate idemgen line of the package gives one"
				}
				diags.Errorf(h.Pos, "consumer %s is recorded in %s, but its migrations would go to %s (from %s): a second folder would give it a second inbox; "+
					"run idemgen with the layout it was generated with (the package's //go:generate idemgen line gives it), or retire the consumer there first",
					h.Consumer, diag.Rel(dir, filepath.Join(r.Dir, migrate.SumFile)), diag.Rel(dir, h.MigrationsDir), from)
				prog.Packages[i].Unread = true
			}
		}
	}
	return prog
}

// isPattern reports whether arg, the first argument, is a flag or a package
// pattern rather than a subcommand: a flag, a path (., .., ./x, /x), a
// pattern with a wildcard, an import path (with a dot or a slash), one of the
// go command's reserved patterns, or the path of the main module when it is
// a single word. Any other word is a misspelled or unknown subcommand.
func isPattern(dir, arg string) bool {
	switch {
	case arg == "" || strings.HasPrefix(arg, "-"):
		return true
	case strings.ContainsAny(arg, `./\`) || filepath.IsAbs(arg):
		return true
	case arg == "all" || arg == "std" || arg == "cmd" || arg == "tool":
		return true
	}
	return arg == mainModulePath(dir)
}

// unknownCommand says that word is not a subcommand, and what was probably
// meant.
func unknownCommand(dir, word string) string {
	msg := fmt.Sprintf("idemgen: unknown command %q", word)
	if s := directive.Suggest(word, commands); s != "" {
		msg += fmt.Sprintf(" (did you mean %s?)", s)
	} else {
		msg += "; the commands are generate (the default), check, vet, audit, outbox, claims and help"
	}
	if info, err := os.Stat(filepath.Join(dir, word)); err == nil && info.IsDir() {
		msg += fmt.Sprintf("; for the package in directory %s, write ./%s", word, word)
	}
	return msg
}

// mainModulePath returns the module path in the go.mod that governs dir, or
// "" when there is none.
func mainModulePath(dir string) string {
	gomod, data := findGoMod(dir)
	if gomod == "" {
		return ""
	}
	return modfile.ModulePath(data)
}

// findGoMod returns the path and contents of the go.mod of the module dir
// belongs to, or "" when there is none.
func findGoMod(dir string) (string, []byte) {
	path := findUp(dir, "go.mod")
	if path == "" {
		return "", nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return "", nil
	}
	return path, data
}

// findUp returns the path of the file called name in dir or the nearest of
// its parents, or "".
func findUp(dir, name string) string {
	for d := dir; ; {
		path := filepath.Join(d, name)
		if info, err := os.Stat(path); err == nil && !info.IsDir() {
			return path
		}
		parent := filepath.Dir(d)
		if parent == d {
			return ""
		}
		d = parent
	}
}

func write(dir string, set *output.Set, diags *diag.List, verbose bool, stderr io.Writer) int {
	diags.Print(stderr, dir)
	if diags.HasErrors() {
		fmt.Fprintln(stderr, "idemgen: nothing was written")
		return ExitFail
	}
	changes, err := set.Write()
	if err != nil {
		fmt.Fprintln(stderr, "idemgen:", err)
		return ExitFail
	}
	written := map[string][]byte{}
	for _, c := range changes {
		if c.Kind != output.Orphan && filepath.Ext(c.Path) == ".go" {
			written[c.Path] = c.New
		}
	}
	if len(written) > 0 {
		if note := moduleNote(dir, written); note != "" {
			fmt.Fprintln(stderr, note)
		}
	}
	if verbose {
		for _, c := range changes {
			verb := "wrote"
			if c.Kind == output.Orphan {
				verb = "deleted"
			}
			fmt.Fprintf(stderr, "idemgen: %s %s\n", verb, diag.Rel(dir, c.Path))
		}
	}
	return ExitOK
}

// moduleNote checks that the go command can build the packages of the Go
// files just written, and their tests: the generated code imports the
// runtime and its test suite, which may need modules the go.mod does not
// require yet, or checksums go.sum lacks. go vet and go test fail until then,
// so the note names the missing modules and what to run; "" when nothing is
// missing. written maps the paths of the Go files written to their content.
func moduleNote(dir string, written map[string][]byte) string {
	var pkgDirs []string
	for _, path := range slices.Sorted(maps.Keys(written)) {
		if d := filepath.Dir(path); !slices.Contains(pkgDirs, d) {
			pkgDirs = append(pkgDirs, d)
		}
	}
	gomod, data := findGoMod(pkgDirs[0])
	if gomod == "" {
		return ""
	}
	mf, err := modfile.ParseLax(gomod, data, nil)
	if err != nil || mf.Module == nil {
		return ""
	}
	required := func(mod string) bool {
		return mod == mf.Module.Mod.Path || slices.ContainsFunc(mf.Require, func(r *modfile.Require) bool { return r.Mod.Path == mod })
	}
	var missing []string
	addMissing := func(importPath string) {
		mod := importPath
		if i := slices.IndexFunc(generatedModules, within(importPath)); i >= 0 {
			mod = generatedModules[i]
		}
		missing = append(missing, mod)
	}

	// Imports of modules go.mod does not mention at all.
	for path, src := range written {
		file, err := parser.ParseFile(token.NewFileSet(), path, src, parser.ImportsOnly)
		if err != nil {
			continue
		}
		for _, imp := range file.Imports {
			ip, err := strconv.Unquote(imp.Path.Value)
			if err != nil || !strings.Contains(strings.Split(ip, "/")[0], ".") {
				continue // the standard library
			}
			if !required(ip) && !slices.ContainsFunc(mf.Require, func(r *modfile.Require) bool { return within(ip)(r.Mod.Path) }) &&
				!within(ip)(mf.Module.Mod.Path) {
				addMissing(ip)
			}
		}
	}
	getIdem := slices.Contains(missing, idemgenModule)

	// What the go command finds missing, down the imports: modules known
	// to go.mod only through other modules' requirements, checksums.
	args := []string{"list", "-e", "-test", "-json=ImportPath,Error,DepsErrors"}
	// Report what is missing instead of recording it (GOFLAGS may say
	// -mod=mod); a vendored module keeps its vendor mode.
	if _, err := os.Stat(filepath.Join(filepath.Dir(gomod), "vendor", "modules.txt")); err != nil {
		args = append(args, "-mod=readonly")
	}
	cmd := exec.Command("go", append(args, pkgDirs...)...)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	for dec := json.NewDecoder(&stdout); ; {
		var pkg struct {
			Error      *struct{ Err string }
			DepsErrors []struct{ Err string }
		}
		if dec.Decode(&pkg) != nil {
			break
		}
		errs := pkg.DepsErrors
		if pkg.Error != nil {
			errs = append(errs, *pkg.Error)
		}
		for _, e := range errs {
			if m := missingPackage.FindStringSubmatch(e.Err); m != nil {
				addMissing(m[2])
			}
		}
	}
	needTidy := err != nil && strings.Contains(stderr.String(), "updates to go.mod needed")
	if len(missing) == 0 && !needTidy {
		return ""
	}
	if len(missing) == 0 {
		missing = tidyAdds(gomod, mf)
	}
	slices.Sort(missing)
	missing = slices.Compact(missing)
	what := "all the modules the generated code needs"
	if len(missing) > 0 {
		what = "modules the generated code needs (" + strings.Join(missing, ", ") + ")"
	}
	run := "go mod tidy"
	if getIdem {
		run = "go get " + idemPackage() + ", then go mod tidy"
	}
	return fmt.Sprintf("idemgen: note: %s does not yet require %s; go vet and go test fail until you run %s",
		diag.Rel(dir, gomod), what, run)
}

// missingPackage matches the go command's report of an import that no
// module in go.mod provides, or whose module's checksum go.sum lacks.
var missingPackage = regexp.MustCompile(`^(no required module provides package|cannot find module providing package|missing go.sum entry for module providing package) ([^\s;:]+)`)

const idemgenModule = "github.com/idemgen/idemgen"

// generatedModules are the modules whose packages generated code imports,
// by module path, to name the module of a missing package.
var generatedModules = []string{idemgenModule, "github.com/jackc/pgx/v5", "github.com/pressly/goose/v3", "github.com/google/uuid"}

// within returns a test of whether module path mod provides importPath.
func within(importPath string) func(mod string) bool {
	return func(mod string) bool { return importPath == mod || strings.HasPrefix(importPath, mod+"/") }
}

// tidyAdds returns the modules go mod tidy would add to gomod, whose parsed
// content is current (go mod tidy -diff changes nothing), or nil when it
// cannot tell.
func tidyAdds(gomod string, current *modfile.File) []string {
	cmd := exec.Command("go", "mod", "tidy", "-diff")
	cmd.Dir = filepath.Dir(gomod)
	out, _ := cmd.Output() // exit status 1 when there is a diff
	diff, _, _ := strings.Cut(string(out), "diff current/go.sum")
	var mods []string
	for _, line := range strings.Split(diff, "\n") {
		if !strings.HasPrefix(line, "+") || strings.HasPrefix(line, "+++") {
			continue
		}
		f := strings.Fields(strings.TrimPrefix(strings.TrimPrefix(line, "+"), "require "))
		if len(f) < 2 || !strings.Contains(f[0], ".") || slices.ContainsFunc(current.Require, func(r *modfile.Require) bool { return r.Mod.Path == f[0] }) {
			continue
		}
		mods = append(mods, f[0])
	}
	return mods
}

// idemPackage is the runtime's package to go get: at the version of this
// idemgen when it was built from a module version.
func idemPackage() string {
	const idem = idemgenModule + "/idem"
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Path == idemgenModule &&
		info.Main.Version != "" && info.Main.Version != "(devel)" {
		return idem + "@" + info.Main.Version
	}
	return idem
}

// check compares what generate would write with the disk. Generate refuses
// to write anything when diags hold an error. Such errors are refused key or
// mode changes, edited migrations, consumers moved or removed, packages that
// do not compile. Then check prints the refusal as generate does and exits
// 1. It prints no diff and no advice to run go generate, which would refuse.
func check(dir string, set *output.Set, diags *diag.List, stdout, stderr io.Writer) int {
	diags.Print(stderr, dir)
	if diags.HasErrors() {
		fmt.Fprintln(stderr, refusal)
		return ExitFail
	}
	changes, err := set.Changes()
	if err != nil {
		fmt.Fprintln(stderr, "idemgen:", err)
		return ExitFail
	}
	fmt.Fprint(stdout, output.Diff(changes, dir))
	if len(changes) > 0 {
		fmt.Fprintf(stderr, "idemgen: %d generated file(s) out of date; run go generate (or idemgen) and commit the result\n", len(changes))
		return ExitFail
	}
	return ExitOK
}

// refusal ends check's output when generate would refuse.
const refusal = "idemgen: go generate refuses to write anything until the errors above are fixed; nothing was compared"

// splitList splits a comma-separated flag value; "" is none.
func splitList(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}
