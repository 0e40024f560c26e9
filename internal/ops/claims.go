package ops

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrAmbiguous is wrapped by Release's error when the consumer has a
// claims table in more than one schema and none was named.
var ErrAmbiguous = errors.New("more than one table")

// ClaimsTable is a mode=external consumer's claims table, found by the
// comment idemgen's migration gives it.
type ClaimsTable struct {
	Consumer string
	Schema   string
	Name     string
	// KeyColumns are the key's columns (key_...), in the table's order:
	// the key order.
	KeyColumns []string
}

// Table is the table's name as SQL writes it, schema-qualified.
func (t ClaimsTable) Table() string {
	return pgx.Identifier{t.Schema, t.Name}.Sanitize()
}

// String is schema.name, as people read it.
func (t ClaimsTable) String() string { return t.Schema + "." + t.Name }

// Claim is a running claim of a mode=external consumer: a worker called, or
// is about to call, the provider for the key.
type Claim struct {
	Table ClaimsTable
	// Key is the key as the commands print and take it: the value of a
	// one-column key, name=value pairs (NULL for a NULL part) of a key of
	// several columns.
	Key string
	// IdemKey is the idempotency key sent to the provider.
	IdemKey  string
	Attempts int
	Fence    int64
	// LeaseUntil is when the claim lapses without a heartbeat; the zero
	// time when the row has none.
	LeaseUntil time.Time
	// CreatedAt is the key's first claim; UpdatedAt its last change.
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Claims is what Running found.
type Claims struct {
	// Now is the server's time when the command ran.
	Now time.Time
	// Tables are the claims tables looked in, by consumer and schema.
	Tables []ClaimsTable
	// Running are the running claims, by consumer, schema, first claim and
	// key.
	Running []Claim
}

// Filter selects the claims tables: Schema and Consumer, when not "",
// restrict them to that schema and that consumer.
type Filter struct {
	Schema   string
	Consumer string
}

// claimsTablesSQL finds the claims tables by the comment idemgen's
// migration of a mode=external consumer puts on its table, and their key
// columns by the key_ prefix idemgen gives them.
const claimsTablesSQL = `SELECT t.consumer, n.nspname::text, c.relname::text,
       coalesce(array_agg(a.attname::text ORDER BY a.attnum) FILTER (WHERE a.attname IS NOT NULL), '{}')
FROM pg_catalog.pg_class AS c
JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
JOIN pg_catalog.pg_description AS d
  ON d.objoid = c.oid AND d.classoid = 'pg_catalog.pg_class'::regclass AND d.objsubid = 0
CROSS JOIN LATERAL (
    SELECT substring(d.description FROM '^idemgen claims of consumer (.+) \(mode=external\)$') AS consumer
) AS t
LEFT JOIN pg_catalog.pg_attribute AS a
  ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped AND a.attname LIKE 'key\_%'
WHERE c.relkind IN ('r', 'p')
  AND t.consumer IS NOT NULL
  AND ($1::text = '' OR n.nspname = $1::text)
  AND ($2::text = '' OR t.consumer = $2::text)
GROUP BY t.consumer, n.nspname, c.relname
ORDER BY t.consumer, n.nspname, c.relname`

// claimsTables finds the claims tables f selects.
func claimsTables(ctx context.Context, q pgx.Tx, f Filter) ([]ClaimsTable, error) {
	if f.Schema != "" {
		var ok bool
		if err := q.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1)", f.Schema).Scan(&ok); err != nil {
			return nil, fmt.Errorf("look up schema %q: %w", f.Schema, err)
		}
		if !ok {
			return nil, errorf(ErrNotFound, "schema %q not found", f.Schema)
		}
	}
	rows, err := q.Query(ctx, claimsTablesSQL, f.Schema, f.Consumer)
	if err != nil {
		return nil, fmt.Errorf("find the claims tables: %w", err)
	}
	tables, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ClaimsTable, error) {
		var t ClaimsTable
		err := row.Scan(&t.Consumer, &t.Schema, &t.Name, &t.KeyColumns)
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("find the claims tables: %w", err)
	}
	for _, t := range tables {
		if len(t.KeyColumns) == 0 {
			return nil, fmt.Errorf("claims table %s of consumer %s has no key column (key_...): is it idemgen's?", t, t.Consumer)
		}
	}
	if f.Consumer != "" && len(tables) == 0 {
		where := "in any schema"
		if f.Schema != "" {
			where = "in schema " + f.Schema
		}
		return nil, errorf(ErrNotFound, "no claims table of consumer %s (mode=external) %s; idemgen claims lists the consumers found", f.Consumer, where)
	}
	return tables, nil
}

// keyExpr is the SQL expression of the key as Claim.Key writes it.
func (t ClaimsTable) keyExpr() string {
	part := func(col string) string {
		return "coalesce(" + pgx.Identifier{col}.Sanitize() + "::text, 'NULL')"
	}
	if len(t.KeyColumns) == 1 {
		return part(t.KeyColumns[0])
	}
	parts := make([]string, len(t.KeyColumns))
	for i, col := range t.KeyColumns {
		parts[i] = "'" + strings.TrimPrefix(col, "key_") + "=' || " + part(col)
	}
	return "concat_ws(',', " + strings.Join(parts, ", ") + ")"
}

// The statements over one claims table; {key} is its keyExpr, {table} its
// name.
const (
	// runningClaimsSQL lists the running claims, the oldest first.
	runningClaimsSQL = `SELECT {key}, idem_key, attempts, fence, lease_until, created_at, updated_at
FROM {table}
WHERE status = 'running'
ORDER BY created_at, idem_key`

	// findClaimSQL finds the key's running claim by the key as Claim.Key
	// writes it or by its idempotency key. The condition on status lets
	// the partial index on the running rows' lease_until bound the scan.
	findClaimSQL = `SELECT idem_key
FROM {table}
WHERE status = 'running' AND (idem_key = $1 OR {key} = $1)
ORDER BY idem_key`

	// claimStatusSQL reads the status of the row of an idempotency key.
	claimStatusSQL = `SELECT status FROM {table} WHERE idem_key = $1`

	// lockClaimSQL locks the key's running claim and returns it, for the
	// release in the same transaction.
	lockClaimSQL = `SELECT {key}, idem_key, attempts, fence, lease_until, created_at, updated_at
FROM {table}
WHERE idem_key = $1 AND status = 'running'
FOR UPDATE`

	// releaseClaimSQL is what the sweeper does to a claim whose lease ran
	// out, done now: released, so that the next delivery claims the key at
	// once; attempts + 1, so that a job that keeps dying shows its attempts
	// climbing; a new fence, so that a worker still running it can no
	// longer record it done.
	releaseClaimSQL = `UPDATE {table}
SET status = 'released', fence = fence + 1, attempts = attempts + 1, lease_until = NULL,
    updated_at = now()
WHERE idem_key = $1 AND status = 'running'`
)

func (t ClaimsTable) sql(stmt string) string {
	return strings.NewReplacer("{table}", t.Table(), "{key}", t.keyExpr()).Replace(stmt)
}

func scanClaim(t ClaimsTable, row pgx.Row) (Claim, error) {
	c := Claim{Table: t}
	var lease *time.Time
	if err := row.Scan(&c.Key, &c.IdemKey, &c.Attempts, &c.Fence, &lease, &c.CreatedAt, &c.UpdatedAt); err != nil {
		return c, err
	}
	if lease != nil {
		c.LeaseUntil = *lease
	}
	return c, nil
}

// Running lists the running claims of the claims tables f selects (every
// schema's, every consumer's by default).
func Running(ctx context.Context, conn *pgx.Conn, f Filter) (Claims, error) {
	var out Claims
	err := pgx.BeginTxFunc(ctx, conn, pgx.TxOptions{AccessMode: pgx.ReadOnly, IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
		var err error
		if out.Now, err = RequirePrimary(ctx, tx); err != nil {
			return err
		}
		if out.Tables, err = claimsTables(ctx, tx, f); err != nil {
			return err
		}
		for _, t := range out.Tables {
			rows, err := tx.Query(ctx, t.sql(runningClaimsSQL))
			if err != nil {
				return fmt.Errorf("list the running claims of consumer %s in %s: %w", t.Consumer, t, err)
			}
			claims, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Claim, error) { return scanClaim(t, row) })
			if err != nil {
				return fmt.Errorf("list the running claims of consumer %s in %s: %w", t.Consumer, t, err)
			}
			out.Running = append(out.Running, claims...)
		}
		return nil
	})
	return out, err
}

// Released is what Release did.
type Released struct {
	// Now is the server's time when the claim was released.
	Now time.Time
	// Claim is the claim as it was; it is now released, with one more
	// attempt, the next fence and no lease.
	Claim Claim
}

// Release releases the running claim of consumer on key, the key as Claim
// writes it or its idempotency key, as the sweeper does after the lease but
// at once: the next delivery of the key claims it without waiting, and a
// worker still running it can no longer record it done (its result is
// discarded; the provider, given the same idempotency key again, answers
// the retry with what it did). f.Consumer is required; f.Schema is needed
// only when the consumer has tables in several schemas. A key with no row,
// or whose row is not running, fails it, wrapping ErrNotFound.
func Release(ctx context.Context, conn *pgx.Conn, f Filter, key string) (Released, error) {
	var out Released
	if f.Consumer == "" || key == "" {
		return out, errors.New("release: the consumer and the key are required")
	}
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		var err error
		if out.Now, err = RequirePrimary(ctx, tx); err != nil {
			return err
		}
		tables, err := claimsTables(ctx, tx, f)
		if err != nil {
			return err
		}
		if len(tables) > 1 {
			var names []string
			for _, t := range tables {
				names = append(names, t.String())
			}
			return errorf(ErrAmbiguous, "consumer %s has claims tables %s; name the schema with -schema", f.Consumer, strings.Join(names, ", "))
		}
		t := tables[0]
		rows, err := tx.Query(ctx, t.sql(findClaimSQL), key)
		if err != nil {
			return fmt.Errorf("find the claim of consumer %s on key %s in %s: %w", t.Consumer, key, t, err)
		}
		matches, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return fmt.Errorf("find the claim of consumer %s on key %s in %s: %w", t.Consumer, key, t, err)
		}
		switch {
		case len(matches) == 0:
			var status string
			if err := tx.QueryRow(ctx, t.sql(claimStatusSQL), key).Scan(&status); err == nil {
				return errorf(ErrNotFound, "the claim of consumer %s on idempotency key %s in %s is %s, not running: nothing to release", t.Consumer, key, t, status)
			}
			return errorf(ErrNotFound, "consumer %s has no running claim on key %s in %s (idemgen claims lists them)", t.Consumer, key, t)
		case len(matches) > 1:
			return fmt.Errorf("key %s names %d running claims of consumer %s in %s: give the idempotency key (idemgen claims lists it)", key, len(matches), t.Consumer, t)
		}
		out.Claim, err = scanClaim(t, tx.QueryRow(ctx, t.sql(lockClaimSQL), matches[0]))
		if errors.Is(err, pgx.ErrNoRows) {
			return errorf(ErrNotFound, "the claim of consumer %s on key %s in %s was no longer running: its worker finished or released it meanwhile", t.Consumer, key, t)
		}
		if err != nil {
			return fmt.Errorf("lock the claim of consumer %s on key %s in %s: %w", t.Consumer, key, t, err)
		}
		if _, err := tx.Exec(ctx, t.sql(releaseClaimSQL), out.Claim.IdemKey); err != nil {
			return fmt.Errorf("release the claim of consumer %s on key %s in %s: %w", t.Consumer, key, t, err)
		}
		return nil
	})
	return out, err
}

// Consumers returns the consumers of tables, once each, sorted.
func Consumers(tables []ClaimsTable) []string {
	var names []string
	for _, t := range tables {
		names = append(names, t.Consumer)
	}
	slices.Sort(names)
	return slices.Compact(names)
}
