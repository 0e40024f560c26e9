package idem_test

import (
	"os"
	"testing"

	"github.com/idemgen/idemgen/idem/idemtest"
)

// TestMain keeps a passing run quiet: the records of inboxes built without
// WithLogger (slog.Default, as in production) are printed only when a test
// failed or with go test -v. Tests that check records use WithLogger with a
// handler of their own.
func TestMain(m *testing.M) { os.Exit(idemtest.RunQuietly(m)) }
