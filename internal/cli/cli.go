// Package cli is idemgen's command line: subcommands, flags and exit codes.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/idemgen/idemgen/internal/diag"
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

Packages are go/packages patterns; the default is ".".

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

func run(dir string, args []string, stdout, stderr io.Writer) int {
	cmd := "generate"
	if len(args) > 0 && (args[0] == "generate" || args[0] == "check" || args[0] == "vet" || args[0] == "help") {
		cmd, args = args[0], args[1:]
	}
	fs := flag.NewFlagSet("idemgen "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	migrations := fs.String("migrations", "", "write inbox migrations to `DIR` (default: a migrations folder in each handler's package)")
	verbose := fs.Bool("v", false, "list the files written or deleted")
	postgres := fs.Int("postgres", 0, "the oldest PostgreSQL major `version` the migrations run on; from 15 on, nullable key parts get UNIQUE NULLS NOT DISTINCT instead of partial indexes")
	rehash := fs.Bool("rehash", false, "record the migrations folders in their "+model.SumFile+" as they are (after checking them yourself)")
	acceptResults := fs.String("accept-result-change", "", "comma-separated `consumers` whose result type may change in a way the results stored before cannot be decoded through (their duplicates will be dead-lettered); once, on purpose")
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
	set, genDiags := generate.Generate(prog, generate.Options{Rehash: *rehash, AcceptResultChange: splitList(*acceptResults)})
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

// splitList splits a comma-separated flag value; "" is none.
func splitList(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}
