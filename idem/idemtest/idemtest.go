package idemtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io/fs"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
)

// DB is a fresh schema of the test database and a pool whose connections use
// it.
type DB struct {
	// Pool's connections have the schema as their search_path.
	Pool *pgxpool.Pool
	// Schema is the name of the schema, unique to the test.
	Schema string
	// URL connects to the same schema; hand it to a subprocess.
	URL string
}

// MaxConns is the size of the pools New opens: enough for every delivery of a
// concurrency test to hold its own connection at once.
const MaxConns = 32

// New creates a fresh schema for the test, applies the goose migrations in
// migrations (a directory of NNNNN_name.sql files; nil for none) and returns
// the schema with a pool. The schema and the pool go away when the test ends.
//
// Migrations of schema-qualified inboxes (table=app.inbox) create tables
// outside the fresh schema, which its DROP does not remove and which every
// test would create anew. For those (see NamedSchemas), New first takes a
// lock on each named schema that every idemtest test of the database waits
// for, also in other test processes, and migrates down to 0 when the test
// ends, before it releases the lock: one test at a time uses a named schema,
// and each leaves it as it found it.
func New(t testing.TB, migrations fs.FS) *DB {
	t.Helper()
	return NewAt(t, DatabaseURL(t), migrations)
}

// NewAt is New on the database of base instead of the test database. Its
// use is a throwaway server of the test's own: a primary and its standby
// that the test fails over (internal/pgcluster), through their multi-host
// URL.
func NewAt(t testing.TB, base string, migrations fs.FS) *DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	named, err := NamedSchemas(migrations)
	if err != nil {
		t.Fatalf("idemtest: read migrations: %v", err)
	}
	if len(named) > 0 {
		lockSchemas(t, base, named)
	}

	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("idemtest: connect to the test database: %v", err)
	}
	defer admin.Close(ctx)
	schema := "idemtest_" + randomHex(6)
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("idemtest: create schema: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Errorf("idemtest: drop schema %s: %v", schema, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("idemtest: drop schema %s: %v", schema, err)
		}
	})

	db := &DB{Schema: schema, URL: withSearchPath(base, schema)}
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		t.Fatalf("idemtest: the test database's connection string: %v", err)
	}
	cfg.MaxConns = MaxConns
	if db.Pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		t.Fatalf("idemtest: open pool: %v", err)
	}
	t.Cleanup(db.Pool.Close)

	if migrations != nil {
		provider := db.Migrations(t, migrations)
		if len(named) > 0 {
			downAtCleanup(t, provider, named)
		}
		if _, err := provider.Up(ctx); err != nil {
			t.Fatalf("idemtest: apply migrations: %v%s", err, namedSchemaHint(err, named))
		}
	}
	return db
}

// Migrations returns a goose provider for migrations on the test's schema, for
// tests that move the schema down and up themselves.
func (db *DB) Migrations(t testing.TB, migrations fs.FS) *goose.Provider {
	t.Helper()
	sqlDB := stdlib.OpenDBFromPool(db.Pool)
	t.Cleanup(func() { _ = sqlDB.Close() })
	provider, err := goose.NewProvider(goose.DialectPostgres, sqlDB, migrations, goose.WithDisableGlobalRegistry(true))
	if err != nil {
		t.Fatalf("idemtest: read migrations: %v", err)
	}
	return provider
}

// withSearchPath returns base with the schema as the connections' search_path;
// pgx sends unknown URL parameters to the server as run-time settings.
func withSearchPath(base, schema string) string {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		// A keyword/value connection string.
		return base + " search_path=" + schema
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
