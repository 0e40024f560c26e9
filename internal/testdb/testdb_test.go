package testdb_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/internal/testdb"
)

// TestFindNeverReadsDATABASE_URL sets only DATABASE_URL, with no socket
// directory to search: Find must report that there is no server, not use
// DATABASE_URL (often a developer's real database; the tests drop schemas).
func TestFindNeverReadsDATABASE_URL(t *testing.T) {
	t.Setenv(testdb.EnvURL, "")
	t.Setenv("DATABASE_URL", "postgres://someone@/production?host=/var/run/postgresql")
	url, err := testdb.Find(context.Background(), testdb.Options{SocketDirs: []string{}})
	if !errors.Is(err, testdb.ErrNoServer) {
		t.Fatalf("Find = %q, %v; want an error wrapping ErrNoServer", url, err)
	}
	if strings.Contains(err.Error(), "production") || url != "" {
		t.Fatalf("Find = %q, %v; it must not consider DATABASE_URL", url, err)
	}
}

// TestFindUsesIDEMGEN_TEST_DATABASE_URLAsGiven checks that a configured URL
// that does not answer is an error naming the variable, not a reason to look
// elsewhere.
func TestFindUsesIDEMGEN_TEST_DATABASE_URLAsGiven(t *testing.T) {
	t.Setenv(testdb.EnvURL, "postgres://someone@/x?host=/nonexistent-socket-dir")
	_, err := testdb.Find(context.Background(), testdb.Options{})
	if err == nil || errors.Is(err, testdb.ErrNoServer) || !strings.Contains(err.Error(), testdb.EnvURL+" is set, but that database does not answer") {
		t.Fatalf("Find: %v; want the error that %s does not answer", err, testdb.EnvURL)
	}
}
