// Package testdb finds the PostgreSQL database that the repository's tests,
// its benchmark and its demo use, the same way for all of them:
//
//  1. IDEMGEN_TEST_DATABASE_URL, used as given. If that server does not
//     answer, Find fails: a configured database that is down is a
//     misconfiguration, not a reason to look elsewhere.
//  2. The local server's Unix socket (/var/run/postgresql, then /tmp; or the
//     directories in IDEMGEN_PGENV_SOCKET_DIRS), as PGUSER or the OS user
//     (the user libpq would pick), database idemgen_test, created if missing
//     so that the tests get a database of their own.
//
// DATABASE_URL is never read: a developer's shell often points it at a real
// database, and the tests create and drop schemas.
//
// When neither answers, Find returns an error wrapping ErrNoServer;
// scripts/pgenv.sh (through internal/pgping -find) then starts a throwaway
// server.
package testdb

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/user"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

const (
	// EnvURL names the variable that configures the test database.
	EnvURL = "IDEMGEN_TEST_DATABASE_URL"
	// EnvSocketDirs names the variable that replaces the socket directories
	// searched (colon-separated; empty: none).
	EnvSocketDirs = "IDEMGEN_PGENV_SOCKET_DIRS"
	// Name is the database created on the local server.
	Name = "idemgen_test"
)

// DefaultSocketDirs are the directories searched for a local server's socket,
// in order.
var DefaultSocketDirs = []string{"/var/run/postgresql", "/tmp"}

// ConnectTimeout bounds each connection attempt.
const ConnectTimeout = 3 * time.Second

// ErrNoServer is wrapped by Find's error when no database is configured and no
// local server is usable.
var ErrNoServer = errors.New("no PostgreSQL server found")

// Options changes where Find looks; the zero value looks where the tests do.
type Options struct {
	// SocketDirs replaces the socket directories when not nil (then
	// IDEMGEN_PGENV_SOCKET_DIRS is not read).
	SocketDirs []string
	// Database replaces Name.
	Database string
	// Note, if set, is told why a local server was passed by.
	Note func(msg string)
}

// Find returns the URL of the test database (see the package comment).
func Find(ctx context.Context, opts Options) (string, error) {
	if u := os.Getenv(EnvURL); u != "" {
		if err := Ping(ctx, u); err != nil {
			return "", fmt.Errorf("%s is set, but that database does not answer: %w\n"+
				"Start that server, fix %s, or unset it to use the local server (or a throwaway one)", EnvURL, err, EnvURL)
		}
		return u, nil
	}

	dirs := opts.SocketDirs
	if dirs == nil {
		dirs = DefaultSocketDirs
		if v, ok := os.LookupEnv(EnvSocketDirs); ok {
			dirs = nil
			for _, d := range strings.Split(v, ":") {
				if d != "" {
					dirs = append(dirs, d)
				}
			}
		}
	}
	db := opts.Database
	if db == "" {
		db = Name
	}
	port := os.Getenv("PGPORT") // pgx reads it the same way
	if port == "" {
		port = "5432"
	}
	for _, dir := range dirs {
		if fi, err := os.Stat(filepath.Join(dir, ".s.PGSQL."+port)); err != nil || fi.Mode()&os.ModeSocket == 0 {
			continue
		}
		u := SocketURL(dir, db)
		err := CreateDatabase(ctx, u, db)
		if err == nil {
			err = Ping(ctx, u)
		}
		if err == nil {
			return u, nil
		}
		// A server is there but unusable (role missing, no CREATEDB...): say why.
		if opts.Note != nil {
			opts.Note(fmt.Sprintf("not using the server at %s: %v", dir, err))
		}
	}
	where := "(none)"
	if len(dirs) > 0 {
		where = strings.Join(dirs, " ")
	}
	return "", fmt.Errorf("%w: %s is not set and no usable server answers on a Unix socket in: %s", ErrNoServer, EnvURL, where)
}

// plainPath matches socket directories that need no escaping in a URL query.
var plainPath = regexp.MustCompile(`^[A-Za-z0-9/._-]+$`)

// SocketURL returns the URL of database db on the server whose socket is in
// dir, as PGUSER or the OS user (left out when neither is known: pgx then
// falls back the same way).
func SocketURL(dir, db string) string {
	u := url.URL{Scheme: "postgres", Host: "", Path: "/" + db}
	name := os.Getenv("PGUSER")
	if name == "" {
		if cur, err := user.Current(); err == nil {
			name = cur.Username
		}
	}
	if name != "" {
		u.User = url.User(name)
	}
	if plainPath.MatchString(dir) {
		u.RawQuery = "host=" + dir // readable in logs: host=/var/run/postgresql
	} else {
		u.RawQuery = url.Values{"host": {dir}}.Encode()
	}
	return u.String()
}

// Connect connects to url within ConnectTimeout.
func Connect(ctx context.Context, url string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	return connect(ctx, cfg)
}

func connect(ctx context.Context, cfg *pgx.ConnConfig) (*pgx.Conn, error) {
	cfg.ConnectTimeout = ConnectTimeout
	ctx, cancel := context.WithTimeout(ctx, ConnectTimeout)
	defer cancel()
	return pgx.ConnectConfig(ctx, cfg)
}

// Ping connects to url and pings the server.
func Ping(ctx context.Context, url string) error {
	conn, err := Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	ctx, cancel := context.WithTimeout(ctx, ConnectTimeout)
	defer cancel()
	return conn.Ping(ctx)
}

// CreateDatabase creates database db on the server url points at unless it
// exists, connecting to the server's "postgres" maintenance database (the
// target may not exist yet).
func CreateDatabase(ctx context.Context, url, db string) error {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return err
	}
	cfg.Database = "postgres"
	conn, err := connect(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
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
