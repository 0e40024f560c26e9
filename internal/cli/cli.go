// Package cli is idemgen's command line: subcommands, flags and exit codes.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/mod/modfile"

	"github.com/idemgen/idemgen/internal/diag"
	"github.com/idemgen/idemgen/internal/directive"
	"github.com/idemgen/idemgen/internal/generate"
	"github.com/idemgen/idemgen/internal/load"
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

Packages are go/packages patterns: directories (., ./..., ./billing) or import
paths; the default is ".". A pattern that matches no package is an error.

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
var commands = []string{"generate", "check", "vet", "help"}

func run(dir string, args []string, stdout, stderr io.Writer) int {
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
	fs := flag.NewFlagSet("idemgen "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	migrations := fs.String("migrations", "", "write inbox migrations to `DIR` (default: a migrations folder in each handler's package)")
	verbose := fs.Bool("v", false, "list the files written or deleted")
	postgres := fs.Int("postgres", 0, "the oldest PostgreSQL major `version` the migrations run on; from 15 on, nullable key parts get UNIQUE NULLS NOT DISTINCT instead of partial indexes")
	rehash := fs.Bool("rehash", false, "record the migrations folders in their "+model.SumFile+" as they are (after checking them yourself)")
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	if cmd == "help" {
		fs.SetOutput(stdout)
		fmt.Fprint(stdout, usage)
		fs.PrintDefaults()
		return ExitOK
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return ExitOK
		}
		return ExitUsage
	}

	prog, diags, err := load.Load(load.Config{Dir: dir, Patterns: fs.Args(), MigrationsDir: *migrations, Postgres: *postgres})
	if err != nil {
		fmt.Fprintln(stderr, "idemgen:", err)
		return ExitFail
	}
	set, genDiags := generate.Generate(prog, generate.Options{Rehash: *rehash})
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
		msg += "; the commands are generate (the default), check, vet and help"
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

func check(dir string, set *output.Set, diags *diag.List, stdout, stderr io.Writer) int {
	diags.Print(stderr, dir)
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
	if diags.HasErrors() {
		return ExitFail
	}
	return ExitOK
}
