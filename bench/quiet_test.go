package main

import (
	"os"
	"testing"

	"github.com/idemgen/idemgen/idem/idemtest"
)

// TestMain keeps a passing run quiet: the records of the consumers the
// benchmark's parts build with slog.Default are shown only when a test
// failed or with go test -v.
func TestMain(m *testing.M) { os.Exit(idemtest.RunQuietly(m)) }
