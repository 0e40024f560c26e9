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

// TestDatabaseURLNeverUsesDATABASE_URL sets only DATABASE_URL: DatabaseURL
// must skip (or, with IDEMGEN_REQUIRE_DB, fail), not hand the tests a
// developer's real database to create and drop schemas in.
func TestDatabaseURLNeverUsesDATABASE_URL(t *testing.T) {
	const real = "postgres://someone@/production?host=/var/run/postgresql"
	t.Setenv(EnvURL, "")
	t.Setenv("DATABASE_URL", real)
	for _, require := range []string{"", "1"} {
		t.Setenv(EnvRequire, require)
		r := &recordingTB{TB: t}
		if got := DatabaseURL(r); got != "" {
			t.Fatalf("%s=%q: DatabaseURL = %q; want no URL (DATABASE_URL must not be used)", EnvRequire, require, got)
		}
		msg := r.skipped
		if require != "" {
			msg = r.fatal
		}
		if !strings.Contains(msg, "set "+EnvURL) {
			t.Errorf("%s=%q: skip %q, fatal %q; want the one that says to set %s", EnvRequire, require, r.skipped, r.fatal, EnvURL)
		}
	}
}
