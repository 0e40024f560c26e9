// Command idemvet runs the idemcheck analyzer (idemgen's directive
// diagnostics and key hygiene) as a standalone checker, or as go vet's tool:
//
//	go vet -vettool=$(which idemvet) ./...
package main

import (
	"golang.org/x/tools/go/analysis/singlechecker"

	"github.com/idemgen/idemgen/analysis/idemcheck"
)

func main() { singlechecker.Main(idemcheck.Analyzer) }
