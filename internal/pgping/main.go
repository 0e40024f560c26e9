// Command pgping reports whether a PostgreSQL server answers at a URL.
// scripts/pgenv.sh and .ci/run use it so that they need no PostgreSQL
// client tools (psql, pg_isready) on the machine.
//
// Usage:
//
//	pgping [-create DBNAME] [-exec SQL] URL
//
// It connects (3 s timeout) and pings; exit status 0 means the server
// answers, otherwise the error is printed to stderr and the status is 1.
//
//	-create DBNAME  first connect to the server's "postgres" database and
//	                CREATE DATABASE DBNAME unless it exists
//	-exec SQL       after the ping, run SQL (no result is printed)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

const connectTimeout = 3 * time.Second

func main() {
	create := flag.String("create", "", "create database `DBNAME` (via the server's postgres database) if missing")
	exec := flag.String("exec", "", "run `SQL` after a successful ping")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: pgping [-create DBNAME] [-exec SQL] URL")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(flag.Arg(0), *create, *exec); err != nil {
		fmt.Fprintln(os.Stderr, "pgping:", err)
		os.Exit(1)
	}
}

func run(url, create, sql string) error {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return err
	}
	if create != "" {
		if err := createDatabase(cfg.Copy(), create); err != nil {
			return err
		}
	}
	conn, err := connect(cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	defer cancel()
	if err := conn.Ping(ctx); err != nil {
		return err
	}
	if sql != "" {
		// Statements such as DROP SCHEMA ... CASCADE may take a while.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := conn.Exec(ctx, sql); err != nil {
			return err
		}
	}
	return nil
}

func connect(cfg *pgx.ConnConfig) (*pgx.Conn, error) {
	cfg.ConnectTimeout = connectTimeout
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	defer cancel()
	return pgx.ConnectConfig(ctx, cfg)
}

// createDatabase creates db on the server cfg points at, connecting to its
// "postgres" maintenance database (the target may not exist yet).
func createDatabase(cfg *pgx.ConnConfig, db string) error {
	cfg.Database = "postgres"
	conn, err := connect(cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", db).Scan(&exists); err != nil {
		return err
	}
	if exists {
		return nil
	}
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{db}.Sanitize())
	// Another run may have created it since the check; that is fine.
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P04" /* duplicate_database */ {
		return nil
	}
	if err != nil {
		return fmt.Errorf("create database %s: %w", db, err)
	}
	return nil
}
