package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/idem/idemtest"
	"github.com/idemgen/idemgen/internal/testdb"
)

// TestDatabaseURLCreatesAMissingDatabase runs the benchmark's choice of
// database on the shared server, as if its test database did not exist yet (a
// fresh name stands in for idemgen_test): the database must be created, as
// scripts/pgenv.sh creates it for the tests, not fail with `database "..."
// does not exist`.
func TestDatabaseURLCreatesAMissingDatabase(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	server, err := pgx.ParseConfig(idemtest.DatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(server.Host, "/") {
		t.Fatalf("%s connects over TCP (%s); the benchmark finds its server on a Unix socket, so this test needs one", idemtest.EnvURL, server.Host)
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	fresh := "idemgen_benchtest_" + hex.EncodeToString(b)
	t.Setenv(testdb.EnvURL, "")
	t.Setenv("PGUSER", server.User)
	t.Setenv("PGPORT", "")
	if server.Port != 5432 {
		t.Setenv("PGPORT", strconv.Itoa(int(server.Port)))
	}
	t.Cleanup(func() {
		admin := server.Copy()
		admin.Database = "postgres"
		conn, err := pgx.ConnectConfig(context.Background(), admin)
		if err != nil {
			t.Errorf("drop database %s: %v", fresh, err)
			return
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+fresh); err != nil {
			t.Errorf("drop database %s: %v", fresh, err)
		}
	})

	url, err := databaseURL(ctx, "", testdb.Options{SocketDirs: []string{server.Host}, Database: fresh})
	if err != nil {
		t.Fatalf("databaseURL: %v", err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect to the benchmark's database %s: %v", url, err)
	}
	defer conn.Close(ctx)
	var name string
	if err := conn.QueryRow(ctx, "SELECT current_database()").Scan(&name); err != nil {
		t.Fatal(err)
	}
	if name != fresh {
		t.Fatalf("the benchmark connected to database %q; want %q", name, fresh)
	}
}

// testDB returns a context that ends after timeout (or when the test ends)
// and the URL of the test database, or fails the test.
func testDB(t *testing.T, timeout time.Duration) (context.Context, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	url, err := testdb.Find(ctx, testdb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return ctx, url
}

// reportHas writes the report's sections and fails the test for each of
// want their text lacks; it returns the text.
func reportHas(t *testing.T, want []string, sections ...func(writer)) string {
	t.Helper()
	var b strings.Builder
	w := func(format string, args ...any) { b.WriteString(fmt.Sprintf(format, args...)) }
	for _, write := range sections {
		write(w)
	}
	for _, want := range want {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the report has no %q:\n%s", want, b.String())
		}
	}
	return b.String()
}
