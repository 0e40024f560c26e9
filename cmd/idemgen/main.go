// Command idemgen generates idempotent message consumers for PostgreSQL from
// //idem:handler directives: a transactional wrapper per handler, and an
// inbox migration per consumer for goose. Run it with go generate; see the
// repository's docs/directive.md for the directive reference and docs/cli.md
// for the commands and flags.
package main

import (
	"os"

	"github.com/idemgen/idemgen/internal/cli"
)

func main() { os.Exit(cli.Run(os.Args[1:], os.Stdout, os.Stderr)) }
