package idemtest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pressly/goose/v3"
)

// schemaMarker starts the line of an idemgen inbox migration that records
// the schema it leaves behind (internal/migrate.SchemaMarker, whose test keeps
// the two equal).
const schemaMarker = "-- idemgen:schema "

// lockWait bounds how long New waits for another test that uses the same
// named schema: one scenario, in practice a few seconds.
const lockWait = 5 * time.Minute

// NamedSchemas returns the schemas, other than the search path's, that the
// idemgen inbox migrations in migrations create their tables in: the schema
// parts of their table=schema.name, sorted. nil migrations have none.
func NamedSchemas(migrations fs.FS) ([]string, error) {
	if migrations == nil {
		return nil, nil
	}
	files, err := fs.Glob(migrations, "*.sql")
	if err != nil {
		return nil, err
	}
	var schemas []string
	for _, name := range files {
		data, err := fs.ReadFile(migrations, name)
		if err != nil {
			return nil, err
		}
		lines := bufio.NewScanner(bytes.NewReader(data))
		for lines.Scan() {
			rest, ok := strings.CutPrefix(lines.Text(), schemaMarker)
			if !ok {
				continue
			}
			for _, field := range strings.Fields(rest) {
				table, ok := strings.CutPrefix(field, "table=")
				if i := strings.LastIndexByte(table, '.'); ok && i > 0 {
					schemas = append(schemas, table[:i])
				}
			}
		}
		if err := lines.Err(); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	slices.Sort(schemas)
	return slices.Compact(schemas), nil
}

// lockSchemas takes a session advisory lock on each schema, in order, on a
// connection of its own that it closes, releasing them, when the test ends.
// It registers that first, so that it runs after every other cleanup of the
// test.
func lockSchemas(t testing.TB, base string, schemas []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), lockWait)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("idemtest: connect to the test database: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	for _, s := range schemas {
		if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock(hashtext('idemtest named schema'), hashtext($1))`, s); err != nil {
			t.Fatalf("idemtest: lock schema %s, which the migrations create tables in, against other tests (waited up to %v for one that uses it): %v",
				s, lockWait, err)
		}
	}
}

// downAtCleanup migrates down to 0 when the test ends, which drops what the
// migrations created in the named schemas.
func downAtCleanup(t testing.TB, provider *goose.Provider, schemas []string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := provider.DownTo(ctx, 0); err != nil {
			t.Errorf("idemtest: migrate down to 0, which removes what the migrations created in schema %s: %v",
				strings.Join(schemas, ", "), err)
		}
	})
}

// namedSchemaHint explains an error of the migrations that is likely to come
// from a named schema.
func namedSchemaHint(err error, schemas []string) string {
	var pgErr *pgconn.PgError
	if len(schemas) == 0 || !errors.As(err, &pgErr) {
		return ""
	}
	list := strings.Join(schemas, ", ")
	switch pgErr.Code {
	case pgerrcode.DuplicateTable:
		return fmt.Sprintf(" (the migrations create tables in schema %s, outside the test's own schema: every test migrates down to 0 when it ends, "+
			"so a table found there was left by a test run that was killed, or belongs to something else; drop it from the test database)", list)
	case pgerrcode.InvalidSchemaName:
		return fmt.Sprintf(" (the migrations create tables in schema %s: a migration must create the schema, "+
			"such as CREATE SCHEMA IF NOT EXISTS, as it must in production)", list)
	}
	return ""
}
