package idemtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The environment variables idemtest reads.
const (
	// EnvURL names the variable that holds the test database's connection
	// string. Without it, the tests use the server libpq's defaults find.
	EnvURL = "IDEMGEN_TEST_DATABASE_URL"
	// EnvRequire names a variable that, set to anything but "", "0" or
	// "false", turns a missing test database into a failure instead of a
	// skip. EnvCI does the same.
	EnvRequire = "IDEMGEN_REQUIRE_DB"
	// EnvCI is set by CI services (GitHub Actions, GitLab CI and others).
	EnvCI = "CI"
)

// probeTimeout bounds each attempt to reach a server libpq's defaults name:
// a local server answers in milliseconds.
const probeTimeout = 3 * time.Second

// socketDirs are the directories libpq builds look for a local server's
// socket in (Debian's, then Homebrew's, then PostgreSQL's own default).
var socketDirs = []string{"/var/run/postgresql", "/private/tmp", "/tmp"}

// DatabaseURL returns the connection string of the test database:
// IDEMGEN_TEST_DATABASE_URL when it is set, else the first server that
// answers where libpq looks by default (the PG* variables, else the local
// socket, then localhost:5432). DATABASE_URL is never read: a developer's
// shell often points it at a real database, and the tests create and drop
// schemas.
//
// When no server answers, the test is skipped with one line that says what
// to set, or fails with it when CI or IDEMGEN_REQUIRE_DB is set. A server
// that answers but refuses the connection (no such role or database) fails
// the test: the tests are meant to run there.
func DatabaseURL(t testing.TB) string {
	t.Helper()
	if u := os.Getenv(EnvURL); u != "" {
		return u
	}
	found := discover()
	switch {
	case found.url != "":
		return found.url
	case found.refused != "":
		t.Fatal(found.refused)
	case required():
		t.Fatal(found.missing + " (" + requiredBy() + " is set, so a missing database fails the test)")
	default:
		t.Skip(found.missing)
	}
	return ""
}

// required reports whether a missing database fails the tests.
func required() bool { return requiredBy() != "" }

// requiredBy names the variable that makes a missing database a failure, or
// returns "" when none does.
func requiredBy() string {
	for _, name := range []string{EnvRequire, EnvCI} {
		switch strings.ToLower(os.Getenv(name)) {
		case "", "0", "false":
		default:
			return name
		}
	}
	return ""
}

// discovery is what a search for the test database found: a connection
// string, or why there is none.
type discovery struct {
	url string
	// refused says which server answered and how it refused.
	refused string
	// missing says that no server answered, where it looked, and what to
	// set.
	missing string
}

// discoveries caches a search per set of PG* variables: every scenario asks,
// and a test may change the variables.
var discoveries sync.Map

// discover finds the server libpq's defaults name, once per environment.
func discover() discovery {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "PG") {
			env = append(env, kv)
		}
	}
	slices.Sort(env)
	key := strings.Join(env, "\x00")
	if d, ok := discoveries.Load(key); ok {
		return d.(discovery)
	}
	d := search()
	discoveries.Store(key, d)
	return d
}

// search tries the servers libpq's defaults name, in libpq's order: PGHOST
// when it is set (with the other PG* variables), else each local socket
// that exists, then localhost.
func search() discovery {
	var candidates []string // connection strings; the PG* variables fill in the rest
	if os.Getenv("PGHOST") != "" {
		candidates = []string{"postgres:///"}
	} else {
		port := os.Getenv("PGPORT")
		if port == "" {
			port = "5432"
		}
		for _, dir := range socketDirs {
			if fi, err := os.Stat(filepath.Join(dir, ".s.PGSQL."+port)); err == nil && fi.Mode()&os.ModeSocket != 0 {
				candidates = append(candidates, "postgres:///?host="+dir)
			}
		}
		candidates = append(candidates, "postgres://localhost/")
	}
	var tried []string
	for _, c := range candidates {
		cfg, err := pgx.ParseConfig(c)
		if err != nil {
			return discovery{refused: fmt.Sprintf("idemtest: the PG* variables do not make a connection string: %v; fix them, or set %s", err, EnvURL)}
		}
		where := serverName(cfg)
		tried = append(tried, where)
		err = probe(cfg)
		var pgErr *pgconn.PgError
		switch {
		case err == nil:
			return discovery{url: c}
		case errors.As(err, &pgErr):
			return discovery{refused: fmt.Sprintf("idemtest: %s is not set, and the PostgreSQL server at %s (libpq's defaults, user %q) refuses the connection: %v; "+
				"set %s to a database where the tests may create and drop schemas, or set PGUSER and PGDATABASE", EnvURL, where, cfg.User, pgErr, EnvURL)}
		}
	}
	return discovery{missing: fmt.Sprintf("idemtest: no test database: %s is not set and no PostgreSQL server answers at %s (the PG* variables, else libpq's defaults); "+
		"set %s to a database where the tests may create and drop schemas, such as %s='postgres://postgres@localhost:5432/postgres?sslmode=disable'",
		EnvURL, strings.Join(tried, ", "), EnvURL, EnvURL)}
}

// probe connects to cfg's server and closes the connection.
func probe(cfg *pgx.ConnConfig) error {
	cfg.ConnectTimeout = probeTimeout
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	return conn.Close(ctx)
}

// serverName is where cfg connects, as a message shows it: a socket
// directory, or host:port.
func serverName(cfg *pgx.ConnConfig) string {
	if strings.HasPrefix(cfg.Host, "/") {
		return cfg.Host
	}
	return fmt.Sprintf("%s:%d", cfg.Host, cfg.Port)
}
