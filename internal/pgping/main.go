// Command pgping reports whether a PostgreSQL server answers at a URL, and
// finds the test database. scripts/pgenv.sh and .ci/run use it so that they
// need no PostgreSQL client tools (psql, pg_isready) on the machine.
//
// Usage:
//
//	pgping [-create DBNAME] [-exec SQL] URL
//	pgping -find
//
// It connects (3 s timeout) and pings; exit status 0 means the server
// answers, otherwise the error is printed to stderr and the status is 1.
//
//	-create DBNAME  first connect to the server's "postgres" database and
//	                CREATE DATABASE DBNAME unless it exists
//	-exec SQL       after the ping, run SQL (no result is printed)
//	-find           print the URL of the test database, found as internal/testdb
//	                finds it (IDEMGEN_TEST_DATABASE_URL, else the local
//	                server's socket, database idemgen_test created if
//	                missing); exit status 3 when no server is configured or
//	                answers locally
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/idemgen/idemgen/internal/testdb"
)

// exitNoServer is -find's status when there is no server to use.
const exitNoServer = 3

func main() {
	create := flag.String("create", "", "create database `DBNAME` (via the server's postgres database) if missing")
	exec := flag.String("exec", "", "run `SQL` after a successful ping")
	find := flag.Bool("find", false, "print the URL of the test database (status 3: no server)")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: pgping [-create DBNAME] [-exec SQL] URL\n       pgping -find")
		flag.PrintDefaults()
	}
	flag.Parse()
	if *find {
		if flag.NArg() != 0 || *create != "" || *exec != "" {
			flag.Usage()
			os.Exit(2)
		}
		url, err := testdb.Find(context.Background(), testdb.Options{
			Note: func(msg string) { fmt.Fprintln(os.Stderr, "pgenv:", msg) },
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, "pgenv:", err)
			if errors.Is(err, testdb.ErrNoServer) {
				os.Exit(exitNoServer)
			}
			os.Exit(1)
		}
		fmt.Println(url)
		return
	}
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
	ctx := context.Background()
	if create != "" {
		if err := testdb.CreateDatabase(ctx, url, create); err != nil {
			return err
		}
	}
	conn, err := testdb.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	pingCtx, cancel := context.WithTimeout(ctx, testdb.ConnectTimeout)
	defer cancel()
	if err := conn.Ping(pingCtx); err != nil {
		return err
	}
	if sql != "" {
		// Statements such as DROP SCHEMA ... CASCADE may take a while.
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if _, err := conn.Exec(ctx, sql); err != nil {
			return err
		}
	}
	return nil
}
