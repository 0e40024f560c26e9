// Package demo holds what the example demos (examples/*/cmd/*-demo) share:
// their main (a -db flag, SIGINT and SIGTERM, the database found as the
// tests find it, a fresh schema name) and the schema they migrate, use and
// drop again.
package demo

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/idemgen/idemgen/internal/testdb"
)

// Main is a demo's main: it parses the -db flag, finds the database when -db
// is not given, and calls run with a fresh schema named prefix followed by 12
// hex digits, printing to stdout. The first SIGINT or SIGTERM cancels run's
// context (the demo stops and drops its schema); a second one kills the
// program. An error is printed after name and exits 1.
func Main(name, prefix string, run func(ctx context.Context, dbURL, schema string, w io.Writer) error) {
	dbURL := flag.String("db", "", "PostgreSQL `URL` (default: $IDEMGEN_TEST_DATABASE_URL, else database idemgen_test on the local socket, created if missing)")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "%s: unexpected arguments %q\n", name, flag.Args())
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		// After the first signal the demo stops and drops its schema; a
		// second one kills it.
		<-ctx.Done()
		stop()
	}()
	if err := start(ctx, name, prefix, *dbURL, run); err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(1)
	}
}

func start(ctx context.Context, name, prefix, dbURL string, run func(ctx context.Context, dbURL, schema string, w io.Writer) error) error {
	if dbURL == "" {
		var err error
		dbURL, err = testdb.Find(ctx, testdb.Options{Note: func(msg string) { fmt.Fprintln(os.Stderr, name+":", msg) }})
		if err != nil {
			return fmt.Errorf("find the database (or pass -db URL): %w", err)
		}
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return run(ctx, dbURL, prefix+hex.EncodeToString(b), os.Stdout)
}

// OpenSchema creates schema, calls migrate with a database whose connections
// use it and returns a pool whose connections use the schema, and the
// function that drops it. Once the schema exists, it is dropped on every way
// out, errors included.
func OpenSchema(ctx context.Context, dbURL, schema string, migrate func(ctx context.Context, db *sql.DB) error) (*pgxpool.Pool, func() error, error) {
	admin, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return nil, nil, err
	}
	defer admin.Close()
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		return nil, nil, fmt.Errorf("create schema %s: %w", schema, err)
	}
	drop := func() error { return DropSchema(dbURL, schema) }

	pool, err := OpenPool(ctx, dbURL, schema)
	if err != nil {
		return nil, nil, errors.Join(err, drop())
	}
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	if err := migrate(ctx, db); err != nil {
		pool.Close()
		return nil, nil, errors.Join(err, drop())
	}
	return pool, drop, nil
}

// DropSchema drops schema and all in it. It does not take a context: after an
// interrupt the run's is cancelled, and the schema must still go.
func DropSchema(dbURL, schema string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	if err == nil {
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	}
	if err != nil {
		return fmt.Errorf("drop schema %s (drop it yourself): %w", schema, err)
	}
	return nil
}

// Up applies the goose migrations in fsys to db, keeping their versions in
// table, and returns how many it applied.
func Up(ctx context.Context, db *sql.DB, fsys fs.FS, table string) (int, error) {
	provider, err := goose.NewProvider(goose.DialectPostgres, db, fsys,
		goose.WithDisableGlobalRegistry(true), goose.WithTableName(table))
	var results []*goose.MigrationResult
	if err == nil {
		results, err = provider.Up(ctx)
	}
	return len(results), err
}

// OpenPool opens a pool whose connections have schema as their search_path.
func OpenPool(ctx context.Context, dbURL, schema string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return nil, err
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	return pgxpool.NewWithConfig(ctx, cfg)
}
