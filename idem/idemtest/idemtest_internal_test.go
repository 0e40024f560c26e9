package idemtest

import (
	"fmt"
	"strings"
	"testing"
)

// recordingTB records Skip and Fatal instead of ending the test.
type recordingTB struct {
	testing.TB
	skipped, fatal string
}

func (r *recordingTB) Helper()              {}
func (r *recordingTB) Skip(args ...any)     { r.skipped = fmt.Sprint(args...) }
func (r *recordingTB) Fatal(args ...any)    { r.fatal = fmt.Sprint(args...) }
func (r *recordingTB) Skipf(string, ...any) { panic("unexpected Skipf") }

// TestDatabaseURLNeverUsesDATABASE_URL sets DATABASE_URL and no
// IDEMGEN_TEST_DATABASE_URL, on a machine where no server answers where
// libpq looks (PGHOST, an empty directory): DatabaseURL must skip (or, with
// IDEMGEN_REQUIRE_DB or CI, fail) with one line that says what to set, not
// hand the tests a developer's real database to create and drop schemas in.
func TestDatabaseURLNeverUsesDATABASE_URL(t *testing.T) {
	const real = "postgres://someone@/production?host=/var/run/postgresql"
	t.Setenv(EnvURL, "")
	t.Setenv("DATABASE_URL", real)
	t.Setenv("PGHOST", t.TempDir())
	for _, c := range []struct {
		require, ci string
		fails       bool
	}{
		{"", "", false}, {"0", "false", false}, {"1", "", true}, {"", "true", true},
	} {
		t.Setenv(EnvRequire, c.require)
		t.Setenv(EnvCI, c.ci)
		r := &recordingTB{TB: t}
		if got := DatabaseURL(r); got != "" {
			t.Fatalf("%+v: DatabaseURL = %q; want no URL (DATABASE_URL must not be used)", c, got)
		}
		msg := r.skipped
		if c.fails {
			msg = r.fatal
		}
		if !strings.Contains(msg, "set "+EnvURL) || strings.Contains(msg, "\n") || strings.Contains(msg, "production") {
			t.Errorf("%+v: skip %q, fatal %q; want the one line that says to set %s", c, r.skipped, r.fatal, EnvURL)
		}
	}
}
