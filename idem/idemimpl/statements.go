package idemimpl

import (
	"cmp"
	"fmt"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/internal/sqlhook"
)

// Column is one key part of a consumer: the Go field it is read from and
// the column that holds it. A table declaration ([Table], [ExternalTable],
// [EntityTable]) lists its key's columns in key order, and the runtime
// builds every statement it runs against the table from them, once, when
// the inbox is constructed.
type Column struct {
	// Field is the Go field path of the key part (OrderID, Order.ID), as
	// errors and logs name it.
	Field string
	// Name is the column, as SQL writes it: double-quoted where
	// PostgreSQL needs it to be.
	Name string
	// Type is the column's SQL type, as the migration creates it: text,
	// uuid, smallint, integer, bigint or numeric(20). Each key part is
	// sent cast to it.
	Type string
	// Nullable says that the part may be NULL (a nil in Key's result).
	Nullable bool
}

// query is a statement and the arguments it is sent with: every statement
// the runtime runs against a consumer's table is built, with its
// arguments, by one of the methods below.
type query struct {
	sql  string
	args []any
}

// fieldsOf returns the Go field paths of cols, in key order.
func fieldsOf(cols []Column) []string {
	fields := make([]string, len(cols))
	for i, c := range cols {
		fields[i] = c.Field
	}
	return fields
}

// checkColumns panics, naming the constructor and the consumer, on a table
// declaration whose key the statements cannot be built from.
func checkColumns(constructor, consumer string, cols []Column) {
	if len(cols) == 0 {
		panic(fmt.Sprintf("%s (consumer %s): the table declares no key columns", constructor, consumer))
	}
	for i, c := range cols {
		if c.Field == "" || c.Name == "" || c.Type == "" {
			panic(fmt.Sprintf("%s (consumer %s): key column %d (%+v) needs Field, Name and Type", constructor, consumer, i+1, c))
		}
	}
}

// fill replaces each {name} in sql with its value: the statements below are
// written as the SQL they are, with their varying parts named.
func fill(sql string, pairs ...string) string {
	named := make([]string, len(pairs))
	for i := 0; i < len(pairs); i += 2 {
		named[i], named[i+1] = "{"+pairs[i]+"}", pairs[i+1]
	}
	return strings.NewReplacer(named...).Replace(sql)
}

// ph is placeholder n.
func ph(n int) string { return "$" + strconv.Itoa(n) }

// list joins the items that f makes of cols, by sep.
func list(cols []Column, sep string, f func(i int, c Column) string) string {
	items := make([]string, len(cols))
	for i, c := range cols {
		items[i] = f(i, c)
	}
	return strings.Join(items, sep)
}

// The statements of an inbox (Table).
//
// For a handler with a result, the claim inserts the key's row running, and
// the commit's round trip stores the result and marks the row done right
// before the COMMIT, only inside the claim's transaction: so a committed row
// is done unless the transaction was committed by something else than the
// inbox (a COMMIT sent around the handler's Tx, through tx.Conn()), and then
// it is running, and the next delivery takes it over (takeOver) and runs the
// handler in full rather than answering a Duplicate for work that never
// finished. The result's UPDATE is needed anyway, so the running state costs
// nothing there. For a handler without a result the row is born done: an
// UPDATE only to mark it would be one more tuple written a message, and the
// commit round trip checks the claim's transaction instead (claimCheck).
// The handler's Tx refuses a transaction-control statement before sending
// it, in every mode (see handlerTx.before), so only a COMMIT sent around the
// Tx commits such a row early (docs/errors.md says what that loses).
//
// The claim bounds its own wait for a concurrent claim of the key: the wait
// saves the session's lock_timeout and sets the bound before the INSERT
// reads its row from it, and the RETURNING of the last write restores the
// saved value, so the handler's statements never see the bound. (When
// nothing is returned, the transaction is rolled back, setting and all.) The
// saved value, idem.lock_timeout, is set only in the claim's transaction:
// what marks the row done checks it.
//
// A single key's claim (claimSQL, takeOverSQL) reads the wait as a subquery
// in its FROM (claimBound): the statement is then the INSERT (or UPDATE) of
// one row computed by two nested Result nodes, with nothing materialized,
// which is less to plan and to run than a CTE. OFFSET 0 keeps each subquery
// from being pulled up into its parent, so that the inner one, which saves
// the session's value, runs before the outer one sets the bound, and both
// before the write. The statements that need the wait in several of their
// parts (the guarded claim, the batch claim) name it as a CTE (claimWait).
const (
	claimWait = `WITH wait AS MATERIALIZED (
  SELECT set_config('lock_timeout', {wait}::text, true)
  FROM (SELECT set_config('idem.lock_timeout', current_setting('lock_timeout'), true) OFFSET 0)
    AS saved
)`

	claimBound = `(SELECT set_config('lock_timeout', {wait}::text, true)
  FROM (SELECT set_config('idem.lock_timeout', current_setting('lock_timeout'), true) OFFSET 0)
    AS saved
  OFFSET 0) AS wait`

	claimSQL = `INSERT INTO {table} ({columns}, fingerprint, status)
SELECT {values}, {fingerprint}::bytea, {status} FROM ` + claimBound + `
ON CONFLICT DO NOTHING
RETURNING set_config('lock_timeout', current_setting('idem.lock_timeout'), true) IS NOT NULL`

	// With a stale-message guard, the claim also records the message's
	// version as the entity's last applied one when it is newer, and
	// returns whether it was (false: the message is stale).
	guardedClaimSQL = claimWait + `,
claim AS (
  INSERT INTO {table} ({columns}, fingerprint, status)
  SELECT {values}, {fingerprint}::bytea, {status} FROM wait
  ON CONFLICT DO NOTHING
  RETURNING 1
),
fresh AS (
  INSERT INTO {versions} (entity, version)
  SELECT {entity}::{entity_type}, {version}::bigint FROM claim
  ON CONFLICT (entity) DO UPDATE SET version = EXCLUDED.version, updated_at = now()
  WHERE {versions}.version < EXCLUDED.version
  RETURNING set_config('lock_timeout', current_setting('idem.lock_timeout'), true)
)
SELECT EXISTS (SELECT FROM fresh) FROM claim`

	// takeOverSQL claims a key whose committed row is running (a handler
	// ended its transaction through SQL): the row is locked as the claim's
	// INSERT would lock a new one, bounded by the claim wait, and it counts
	// one more attempt.
	takeOverSQL = `UPDATE {table} AS t SET attempts = t.attempts + 1
FROM ` + claimBound + `
WHERE {match} AND t.status = 'running' AND t.fingerprint = {fingerprint}::bytea
RETURNING set_config('lock_timeout', current_setting('idem.lock_timeout'), true) IS NOT NULL`

	// markDoneSQL marks the claimed row of a handler with a result done,
	// with its result, right before the COMMIT. It fails, raising an
	// invalid-boolean error whose text is claimLostMessage, so that the
	// COMMIT after it rolls back, unless the connection is still in the
	// claim's transaction (the only one where idem.lock_timeout is set) and
	// the row is there: that catches a handler that sent "ROLLBACK; BEGIN"
	// or "COMMIT; BEGIN" around its Tx (through tx.Conn()), or deleted the
	// row. The ELSE branch reads the setting so that the planner cannot
	// fold it into a constant error.
	markDoneSQL = `WITH done AS (
  UPDATE {table} SET status = 'done', result = {result}
  WHERE {match} AND current_setting('idem.lock_timeout', true) <> ''
  RETURNING 1
)
SELECT CASE WHEN EXISTS (SELECT FROM done) THEN true
  ELSE ('` + claimLostMessage + `' || coalesce(current_setting('idem.lock_timeout', true), ''))::boolean
END`

	// The statements of the optimistic delivery (see Inbox.handle). The
	// first goes in front of the handler's first statement, right after
	// BEGIN: it marks the delivery's transaction (idem.delivery, set in it
	// only) and reads the key's committed row, one row either way (NULLs
	// when there is none). The LEFT JOIN's outer side, the marker, is
	// always evaluated; OFFSET 0 keeps it a subquery of its own.
	markLookupSQL = `SELECT fingerprint, status, result
FROM (SELECT set_config('idem.delivery', 'on', true) OFFSET 0) AS marker
LEFT JOIN {table} ON {match}`

	// markSQL marks a batch's transaction, whose lookups run per null
	// pattern of its keys.
	markSQL = "SELECT set_config('idem.delivery', 'on', true)"

	// deliveryCheck fails, with an invalid-boolean error whose text is
	// claimLostMessage, outside the transaction that markLookupSQL or
	// markSQL marked: a handler that sent "ROLLBACK; BEGIN" around its Tx
	// (through tx.Conn()) left the connection in another transaction. The
	// ELSE branch reads the setting so that the planner cannot fold it
	// into a constant error. The statements that use it read its column:
	// the planner drops a subquery's unread columns unless they are
	// volatile, and current_setting is only stable.
	deliveryCheck = `(SELECT CASE WHEN coalesce(current_setting('idem.delivery', true), '') = 'on' THEN true
  ELSE ('` + claimLostMessage + `' || coalesce(current_setting('idem.delivery', true), ''))::boolean END AS ok
  OFFSET 0) AS delivery`

	// insertSQL writes the key's row once, done, with its result, in the
	// commit's round trip. It is a plain INSERT: a concurrent delivery's
	// row makes it fail with a unique violation, and the COMMIT queued
	// behind it roll back. Its wait for a concurrent delivery's
	// uncommitted row is bounded as the claim's is (claimBound).
	insertSQL = `INSERT INTO {table} ({columns}, fingerprint, status, result)
SELECT {values}, {fingerprint}::bytea, 'done', {result}::text::json
FROM ` + deliveryCheck + `, ` + claimBound + `
WHERE delivery.ok
RETURNING set_config('lock_timeout', current_setting('idem.lock_timeout'), true) IS NOT NULL`

	// batchInsertSQL is insertSQL for the keys of a batch, in key order
	// (as the batch claim), restoring lock_timeout once every row is in.
	batchInsertSQL = claimWait + `,
m AS MATERIALIZED (
  SELECT * FROM unnest({arrays}, {fingerprint}::bytea[], {results}::text[]) AS m ({aliases}, fp, r)
),
inserted AS (
  INSERT INTO {table} ({columns}, fingerprint, status, result)
  SELECT {alias_values}, m.fp, 'done', m.r::json FROM ` + deliveryCheck + `, wait, m
  WHERE delivery.ok ORDER BY {alias_values}
  RETURNING 1
)
SELECT set_config('lock_timeout', current_setting('idem.lock_timeout'), true) IS NOT NULL
FROM (SELECT count(*) FROM inserted) AS everything`

	lookupSQL = `SELECT fingerprint, status, result FROM {table}
WHERE {match}`

	// Deletes one batch of the oldest expired rows: the B-tree on
	// created_at gives them oldest first and the scan stops after the
	// batch; rows another purge is deleting are skipped, so that purges
	// running at once delete disjoint batches and no purge waits on
	// another.
	purgeSQL = `DELETE FROM {table} WHERE ctid = ANY (ARRAY(
  SELECT ctid FROM {table}
  WHERE created_at < now() - make_interval(secs => $1)
  ORDER BY created_at LIMIT $2
  FOR UPDATE SKIP LOCKED
))`

	// The statements of HandleBatch: the key parts come as one text[] per
	// part, cast to the column's type (NULL for a NULL part). The claim
	// inserts the keys in key order, so that batches with overlapping keys
	// lock them in one order (no deadlock between them), bounds its wait as
	// the claim above does, and returns the position of each key it
	// inserted, and whether the message is fresh (always true without a
	// stale-message guard). lock_timeout is restored once every key is
	// inserted, not in the INSERT's RETURNING: that runs as each row is
	// inserted, and would lift the bound from the keys after the first. The
	// restore's scalar subquery counts the whole claim first, and it runs
	// once, before the first row is returned.
	batchClaimSQL = claimWait + `,
m AS MATERIALIZED (
  SELECT * FROM unnest({arrays}, {fingerprint}::bytea[]) WITH ORDINALITY AS m ({aliases}, fp, n)
),
claim AS (
  INSERT INTO {table} ({columns}, fingerprint, status)
  SELECT {alias_values}, m.fp, {status} FROM wait, m ORDER BY {alias_values}
  ON CONFLICT DO NOTHING
  RETURNING {columns}
),
restored AS (
  SELECT set_config('lock_timeout', current_setting('idem.lock_timeout'), true) AS r
  FROM (SELECT count(*) FROM claim) AS everything
)
SELECT m.n, true FROM m JOIN claim ON {join_claim}
WHERE (SELECT r FROM restored) IS NOT NULL`

	// With a stale-message guard, the batch's claim also records, for each
	// claimed message, its version as its entity's last applied one when it
	// is newer (in entity order, bounded by the same wait), and returns
	// whether it was. A batch holds at most one message of an entity (the
	// later ones are delivered after it, one by one), so that no entity's
	// row is written twice by one statement.
	guardedBatchClaimSQL = claimWait + `,
m AS MATERIALIZED (
  SELECT * FROM unnest({arrays}, {fingerprint}::bytea[], {entities}::text[]::{entity_type}[], {versions_arg}::bigint[])
    WITH ORDINALITY AS m ({aliases}, fp, e, v, n)
),
claim AS (
  INSERT INTO {table} ({columns}, fingerprint, status)
  SELECT {alias_values}, m.fp, {status} FROM wait, m ORDER BY {alias_values}
  ON CONFLICT DO NOTHING
  RETURNING {columns}
),
claimed AS MATERIALIZED (
  SELECT m.n, m.e, m.v FROM m JOIN claim ON {join_claim}
),
fresh AS (
  INSERT INTO {versions} (entity, version)
  SELECT claimed.e, claimed.v FROM claimed ORDER BY claimed.e
  ON CONFLICT (entity) DO UPDATE SET version = EXCLUDED.version, updated_at = now()
  WHERE {versions}.version < EXCLUDED.version
  RETURNING entity
),
restored AS (
  SELECT set_config('lock_timeout', current_setting('idem.lock_timeout'), true) AS r
  FROM (SELECT count(*) FROM fresh) AS everything
)
SELECT claimed.n, EXISTS (SELECT FROM fresh WHERE fresh.entity = claimed.e) FROM claimed
WHERE (SELECT r FROM restored) IS NOT NULL`

	// The lookup, completion and removal of a batch's keys run once per
	// null pattern of the keys (one statement each, in one round trip),
	// with the parts that are not NULL as arrays and the NULL ones matched
	// with IS NULL: each is then a plain join on the key's unique index (the
	// partial index of that null pattern), which = on a nullable column or
	// IS NOT DISTINCT FROM would not be.
	// {keys} is the unnest of the key arrays (see batchStatements).
	batchLookupSQL = `SELECT m.n, t.fingerprint, t.status, t.result
FROM {keys}
JOIN {table} AS t ON {join_table}`

	// The batch's rows of a handler with a result are marked done with
	// their results in the commit's round trip, whose claim check fails the
	// COMMIT outside the claim's transaction. (Without a result they are
	// born done.)
	batchCompleteSQL = `UPDATE {table} AS t SET status = 'done', result = m.r::json
FROM {keys}
WHERE {join_table}`

	// The rows of the batch's stale messages (claimed, then found stale by
	// the guard) are deleted in the commit's round trip, so that a stale
	// message leaves no row, as Handle's rollback leaves none.
	batchForgetSQL = `DELETE FROM {table} AS t
USING {keys}
WHERE {join_table}`
)

// inboxSQL are the statements of one inbox table, built from its Table.
type inboxSQL struct {
	parts    int
	guarded  bool
	claimSQL string
	// markDone (only with a result), takeOver and lookup hold the variants
	// by null pattern of the key (bit i set when part i is NULL), 0 for a
	// key without NULL parts: a NULL part cannot be matched with =, so each
	// variant matches it with IS NULL and numbers only the parts that are
	// not NULL.
	markDone, takeOver, lookup map[uint64]string
	// markLookup is the optimistic delivery's first statement, by null
	// pattern as lookup; insert and batchInsert write its rows.
	markLookup          map[uint64]string
	insert, batchInsert string
	// result: the rows store the handler's result (markDone sets it).
	result bool
	purge  string
	// batchClaim is the claim of HandleBatch, and batch the lookup,
	// completion and removal of its keys, by null pattern as markDone.
	batchClaim string
	batch      map[uint64]batchSQL
	// nullable are the key parts that may be NULL.
	nullable []bool
}

// batchSQL are the statements of HandleBatch for the keys of one null
// pattern: their parts that are not NULL come as arrays (keyArrays).
type batchSQL struct {
	lookup, complete, forget string
}

// newInboxSQL builds the statements of t, for a handler with a result or
// without one (result); it panics, naming constructor, on a declaration
// they cannot be built from.
func newInboxSQL[M any](constructor string, t Table[M], result bool) *inboxSQL {
	checkColumns(constructor, t.Consumer, t.Columns)
	if (t.Order != nil) != (t.Versions != "") || (t.Versions != "") != (t.EntityType != "") {
		panic(fmt.Sprintf("%s (consumer %s): a stale-message guard needs Order, Versions and EntityType, all three", constructor, t.Consumer))
	}
	cols, n := t.Columns, len(t.Columns)
	s := &inboxSQL{parts: n, guarded: t.Order != nil, result: result,
		markDone: map[uint64]string{}, takeOver: map[uint64]string{}, lookup: map[uint64]string{},
		markLookup: map[uint64]string{}}
	edit := func(name, sql string) string { return sqlhook.Apply(t.Consumer, name, sql) }
	columns := list(cols, ", ", func(_ int, c Column) string { return c.Name })
	values := list(cols, ", ", func(i int, c Column) string { return ph(i+1) + "::" + c.Type })
	status := "'done'" // born done: see the statements' doc above
	if result {
		status = "'running'"
	}
	claim := fill(claimSQL, "wait", ph(n+2), "table", t.Name, "columns", columns,
		"values", values, "fingerprint", ph(n+1), "status", status)
	if s.guarded {
		claim = fill(guardedClaimSQL, "wait", ph(n+2), "table", t.Name, "columns", columns,
			"values", values, "fingerprint", ph(n+1), "status", status, "versions", t.Versions,
			"entity", ph(n+3), "entity_type", t.EntityType, "version", ph(n+4))
	}
	s.claimSQL = edit("claim", claim)
	s.insert = edit("insert", fill(insertSQL, "wait", ph(n+3), "table", t.Name, "columns", columns,
		"values", values, "fingerprint", ph(n+1), "result", ph(n+2)))
	s.purge = edit("purge", fill(purgeSQL, "table", t.Name))

	var nullable []int
	s.nullable = make([]bool, n)
	for i, c := range cols {
		if c.Nullable {
			nullable = append(nullable, i)
			s.nullable[i] = true
		}
	}
	s.batch = map[uint64]batchSQL{}
	for pattern := range 1 << len(nullable) {
		var nulls uint64
		for j, i := range nullable {
			if pattern&(1<<j) != 0 {
				nulls |= 1 << i
			}
		}
		match, next := matchKey(cols, nulls)
		if result {
			s.markDone[nulls] = edit("mark_done", fill(markDoneSQL, "table", t.Name, "result", next, "match", match))
		}
		s.takeOver[nulls] = edit("take_over", fill(takeOverSQL, "wait", "$"+strconv.Itoa(nextN(next)+1),
			"table", t.Name, "match", match, "fingerprint", next))
		s.lookup[nulls] = edit("lookup", fill(lookupSQL, "table", t.Name, "match", match))
		s.markLookup[nulls] = edit("mark_lookup", fill(markLookupSQL, "table", t.Name, "match", match))
		s.batch[nulls] = batchStatements(t.Name, cols, nulls, result, edit)
	}

	all := batchArrays(cols, 0)
	claimJoin := list(cols, " AND ", func(i int, c Column) string {
		if c.Nullable {
			return "claim." + c.Name + " IS NOT DISTINCT FROM m.k" + strconv.Itoa(i+1)
		}
		return "claim." + c.Name + " = m.k" + strconv.Itoa(i+1)
	})
	claimPairs := []string{"wait", ph(n + 2), "arrays", all.arrays, "fingerprint", ph(n + 1),
		"aliases", all.aliases, "table", t.Name, "columns", columns, "status", status,
		"alias_values", all.values, "join_claim", claimJoin}
	s.batchInsert = edit("batch_insert", fill(batchInsertSQL, "wait", ph(n+3), "arrays", all.arrays,
		"fingerprint", ph(n+1), "results", ph(n+2), "aliases", all.aliases, "table", t.Name,
		"columns", columns, "alias_values", all.values))
	if s.guarded {
		s.batchClaim = edit("batch_claim", fill(guardedBatchClaimSQL, append(claimPairs,
			"entities", ph(n+3), "entity_type", t.EntityType, "versions_arg", ph(n+4), "versions", t.Versions)...))
	} else {
		s.batchClaim = edit("batch_claim", fill(batchClaimSQL, claimPairs...))
	}
	return s
}

// keyColumns are the parts of a batch statement's key arrays: the
// placeholders cast to arrays of the columns' types, their aliases in
// unnest, and the aliases as values.
type keyColumns struct{ arrays, aliases, values string }

// batchArrays returns the key arrays of cols but the NULL parts of nulls,
// numbered from $1.
func batchArrays(cols []Column, nulls uint64) keyColumns {
	var arrays, aliases, values []string
	for i, c := range cols {
		if nulls&(1<<i) != 0 {
			continue
		}
		p := ph(len(arrays) + 1)
		if c.Type == "text" {
			arrays = append(arrays, p+"::text[]")
		} else {
			arrays = append(arrays, p+"::text[]::"+c.Type+"[]")
		}
		alias := "k" + strconv.Itoa(i+1)
		aliases, values = append(aliases, alias), append(values, "m."+alias)
	}
	return keyColumns{strings.Join(arrays, ", "), strings.Join(aliases, ", "), strings.Join(values, ", ")}
}

// batchStatements builds the lookup, completion and removal of the keys of
// one null pattern: the parts that are not NULL joined with =, the others
// matched with IS NULL. Keys whose every part is NULL are one key: a batch
// holds it once, so its statements read one row, without arrays.
func batchStatements(table string, cols []Column, nulls uint64, result bool, edit func(name, sql string) string) batchSQL {
	k := batchArrays(cols, nulls)
	join := list(cols, " AND ", func(i int, c Column) string {
		if nulls&(1<<i) != 0 {
			return "t." + c.Name + " IS NULL"
		}
		return "t." + c.Name + " = m.k" + strconv.Itoa(i+1)
	})
	parts := len(cols) - bits.OnesCount64(nulls)
	numbered, withResults, plain := "unnest("+k.arrays+") WITH ORDINALITY AS m ("+k.aliases+", n)",
		"unnest("+k.arrays+", "+ph(parts+1)+"::text[]) AS m ("+k.aliases+", r)",
		"unnest("+k.arrays+") AS m ("+k.aliases+")"
	if parts == 0 {
		numbered, withResults, plain = "(SELECT 1::bigint AS n) AS m", "unnest($1::text[]) AS m (r)", "(SELECT) AS m"
	}
	stmt := func(name, sql, keys string) string {
		return edit(name, fill(sql, "table", table, "keys", keys, "join_table", join))
	}
	b := batchSQL{
		lookup: stmt("batch_lookup", batchLookupSQL, numbered),
		forget: stmt("batch_forget", batchForgetSQL, plain),
	}
	if result {
		b.complete = stmt("batch_complete", batchCompleteSQL, withResults)
	}
	return b
}

// nextN is the number of placeholder p ("$3": 3).
func nextN(p string) int {
	n, _ := strconv.Atoi(strings.TrimPrefix(p, "$"))
	return n
}

// matchKey returns the condition that finds a key with the given NULL
// parts, numbering the others, and the placeholder after them.
func matchKey(cols []Column, nulls uint64) (where, next string) {
	conds := make([]string, len(cols))
	n := 0
	for i, c := range cols {
		if nulls&(1<<i) != 0 {
			conds[i] = c.Name + " IS NULL"
			continue
		}
		n++
		conds[i] = c.Name + " = " + ph(n)
	}
	return strings.Join(conds, " AND "), ph(n + 1)
}

// claim is the claim of key: its parts, the fingerprint, the claim's
// lock_timeout and, for a table with a stale-message guard, the entity and
// the version (order). It returns one boolean row when it inserted the key:
// true unless the guard found the version stale. The row it inserts is
// running for a handler with a result (the commit's round trip marks it
// done), done for one without (it becomes visible only with the commit).
func (s *inboxSQL) claim(key []any, fp []byte, lockWait any, order []any) query {
	args := make([]any, 0, len(key)+2+len(order))
	for _, part := range key {
		args = append(args, param(part))
	}
	args = append(args, fp, lockWait)
	for _, v := range order {
		args = append(args, param(v))
	}
	return query{s.claimSQL, args}
}

// markKeyDone marks key's row done with result, for a handler that has one,
// and fails unless the connection is in the claim's transaction (see
// markDoneSQL): the parts of the key that are not NULL, then the result.
// (A handler without a result has no such statement: its row is born
// done.)
// The result goes as text, never as []byte: pgx sends a []byte of unknown
// parameter type as bytea ('\x7b...'), which json refuses, whenever it does
// not describe the statement first (QueryExecModeExec and
// QueryExecModeSimpleProtocol, what poolers such as PgBouncer and RDS Proxy
// need). As text, the server reads it as the column's type in every mode.
func (s *inboxSQL) markKeyDone(key []any, result []byte) query {
	sql, args := byNulls(s.markDone, key)
	return query{sql, append(args, string(result))}
}

// takeOverKey claims key's committed running row (takeOverSQL): the parts of
// the key that are not NULL, the fingerprint and the claim's lock_timeout.
// It returns one row when it took the key over.
func (s *inboxSQL) takeOverKey(key []any, fp []byte, lockWait any) query {
	sql, args := byNulls(s.takeOver, key)
	return query{sql, append(args, fp, lockWait)}
}

// lookupKey reads fingerprint, status and result of key's row.
func (s *inboxSQL) lookupKey(key []any) query {
	sql, args := byNulls(s.lookup, key)
	return query{sql, args}
}

// markLookupKey is the optimistic delivery's first statement for key
// (markLookupSQL): the parts of the key that are not NULL.
func (s *inboxSQL) markLookupKey(key []any) query {
	sql, args := byNulls(s.markLookup, key)
	return query{sql, args}
}

// insertKey writes key's row done with result (nil for a handler without
// one), bounded by the claim's lock_timeout (insertSQL): every part of the
// key, the fingerprint, the result and the wait. The result goes as text
// (see markKeyDone).
func (s *inboxSQL) insertKey(key []any, fp, result []byte, lockWait any) query {
	args := make([]any, 0, len(key)+3)
	for _, part := range key {
		args = append(args, param(part))
	}
	var r any
	if result != nil {
		r = string(result)
	}
	return query{s.insert, append(args, fp, r, lockWait)}
}

// batchInsertKeys writes the rows of keys, done, with their results
// (batchInsertSQL): one text[] per key part, the fingerprints, the results
// (NULL for a handler without one) and the wait.
func (s *inboxSQL) batchInsertKeys(keys [][]any, fps [][]byte, results []*string, lockWait any) query {
	args := s.claimArrays(keys, 3)
	return query{s.batchInsert, append(args, fps, results, lockWait)}
}

// byNulls picks the variant of a statement for key's null pattern and the
// arguments it takes: the parts that are not NULL.
func byNulls(variants map[uint64]string, key []any) (string, []any) {
	var nulls uint64
	args := make([]any, 0, len(key)+1)
	for i, part := range key {
		if part == nil {
			nulls |= 1 << i
			continue
		}
		args = append(args, param(part))
	}
	return variants[nulls], args
}

// nullsOf is the null pattern of key: bit i set when part i is NULL.
func nullsOf(key []any) uint64 {
	var nulls uint64
	for i, part := range key {
		if part == nil {
			nulls |= 1 << i
		}
	}
	return nulls
}

// keyArrays returns the parts of keys that are not NULL in nulls as the
// batch statements take them: one []string per part, each the parts' text
// forms in keys' order, which the statements cast to the columns' types, so
// that pgx encodes them in every query exec mode. (The claim's arrays hold
// every part: see claimArrays.)
func (s *inboxSQL) keyArrays(keys [][]any, nulls uint64, extra int) []any {
	args := make([]any, 0, s.parts+extra)
	for p := range s.parts {
		if nulls&(1<<p) == 0 {
			args = append(args, partTexts(keys, p))
		}
	}
	return args
}

// partTexts returns part p of each of keys in its text form.
func partTexts(keys [][]any, p int) []string {
	texts := make([]string, len(keys))
	for i, key := range keys {
		texts[i] = keyText(key[p])
	}
	return texts
}

// claimArrays returns every part of keys as the batch claim takes them:
// []string for a part that cannot be NULL, []*string (nil for NULL) for
// one that can.
func (s *inboxSQL) claimArrays(keys [][]any, extra int) []any {
	args := make([]any, s.parts, s.parts+extra)
	for p := range s.parts {
		if !s.nullable[p] {
			args[p] = partTexts(keys, p)
			continue
		}
		texts := make([]*string, len(keys))
		for i, key := range keys {
			if key[p] != nil {
				text := keyText(key[p])
				texts[i] = &text
			}
		}
		args[p] = texts
	}
	return args
}

// batchClaimKeys claims keys in key order (so that two batches with
// overlapping keys take their locks in one order and cannot deadlock): the
// key arrays, the fingerprints (bytea[]), the claim's lock_timeout and, for
// a table with a stale-message guard, the entities (text[]) and versions
// (bigint[]) of order. It bounds and restores lock_timeout as the claim
// does, and returns the 1-based position in the arrays of each key it
// inserted and whether its message is fresh.
func (s *inboxSQL) batchClaimKeys(keys [][]any, fps [][]byte, lockWait any, order [][2]any) query {
	args := append(s.claimArrays(keys, 4), fps, lockWait)
	if s.guarded {
		entities, versions := make([]string, len(order)), make([]int64, len(order))
		for i, o := range order {
			entities[i], versions[i] = keyText(o[0]), o[1].(int64)
		}
		args = append(args, entities, versions)
	}
	return query{s.batchClaim, args}
}

// byPattern groups the positions of keys by their null pattern, in a stable
// order (the patterns ascending, the positions in keys' order).
func byPattern(keys [][]any) []patternKeys {
	var groups []patternKeys
	at := map[uint64]int{}
	for i, key := range keys {
		nulls := nullsOf(key)
		g, ok := at[nulls]
		if !ok {
			g = len(groups)
			at[nulls] = g
			groups = append(groups, patternKeys{nulls: nulls})
		}
		groups[g].at = append(groups[g].at, i)
	}
	slices.SortFunc(groups, func(a, b patternKeys) int { return cmp.Compare(a.nulls, b.nulls) })
	return groups
}

// patternKeys are the positions (at) of the keys of one null pattern.
type patternKeys struct {
	nulls uint64
	at    []int
}

// pick returns the keys (or values) at g's positions.
func pick[T any](all []T, g patternKeys) []T {
	out := make([]T, len(g.at))
	for j, i := range g.at {
		out[j] = all[i]
	}
	return out
}

// batchLookupKeys reads position, fingerprint, status and result of each
// of keys it finds, keys all of null pattern nulls: the key arrays.
func (s *inboxSQL) batchLookupKeys(keys [][]any, nulls uint64) query {
	return query{s.batch[nulls].lookup, s.keyArrays(keys, nulls, 0)}
}

// batchCompleteKeys marks keys' rows done, keys all of null pattern nulls,
// and stores their results (JSON texts, see markKeyDone), for a handler
// that has one: the key arrays, then the results as text[].
func (s *inboxSQL) batchCompleteKeys(keys [][]any, nulls uint64, results []string) query {
	return query{s.batch[nulls].complete, append(s.keyArrays(keys, nulls, 1), results)}
}

// batchForgetKeys deletes keys' rows, keys all of null pattern nulls: the
// key arrays.
func (s *inboxSQL) batchForgetKeys(keys [][]any, nulls uint64) query {
	return query{s.batch[nulls].forget, s.keyArrays(keys, nulls, 0)}
}

// purgeBatch bounds how many rows one purge statement deletes.
const purgeBatch = 1000

// purgeRows deletes one batch of the rows past retain: the retention in
// seconds and the batch size.
func (s *inboxSQL) purgeRows(retain time.Duration) query {
	return query{s.purge, []any{retain.Seconds(), purgeBatch}}
}

// The statements of a mode=external consumer's table (ExternalTable). Each
// is one autocommit round trip: no transaction is open while the handler
// runs. $1 is always idem_key.
const (
	// Claims the key: inserts it running, or takes over a released claim
	// or a running one whose lease expired, where the payload is the same.
	// attempts counts the attempt that now runs: a takeover of a running
	// claim is a new one, while a released claim counted its next attempt
	// when it was released. The statement around it returns, third, the
	// status the key's row had before the claim ("" for a new key), read in
	// the same statement's snapshot: a claim that finds it running took the
	// key over from a worker whose lease ran out (idem.lease.takeovers).
	externalClaimSQL = `WITH idem_prev AS MATERIALIZED (
  SELECT status FROM {table} WHERE idem_key = $1::text
),
idem_claim AS (
  INSERT INTO {table} AS t (idem_key, {columns}, fingerprint, status, fence, attempts, lease_until)
  VALUES ($1, {values}, {fingerprint}::bytea, 'running', 1, 1,
    now() + make_interval(secs => {lease}::float8))
  ON CONFLICT (idem_key) DO UPDATE SET status = 'running', fence = t.fence + 1,
    attempts = t.attempts + CASE WHEN t.status = 'running' THEN 1 ELSE 0 END,
    lease_until = EXCLUDED.lease_until, updated_at = now()
  WHERE t.fingerprint = EXCLUDED.fingerprint
    AND (t.status = 'released' OR (t.status = 'running' AND t.lease_until < now()))
  RETURNING t.fence, t.attempts
)
SELECT idem_claim.*, coalesce((SELECT status FROM idem_prev), '') FROM idem_claim`

	// The lookup also says what is left of the row's lease (NULL without
	// one), for RetryAfter of an ErrInProgress.
	externalLookupSQL = `SELECT fingerprint, status, result, coalesce(lease_until > now(), false) AS live,
  greatest(extract(epoch FROM lease_until - now()), 0)::float8 AS lease_left
FROM {table} WHERE idem_key = $1`

	externalHeartbeatSQL = `UPDATE {table}
SET lease_until = now() + make_interval(secs => $3::float8), updated_at = now()
WHERE idem_key = $1 AND fence = $2 AND status = 'running'`

	externalCompleteSQL = `UPDATE {table}
SET status = 'done', result = $3, lease_until = NULL, done_at = now(), updated_at = now()
WHERE idem_key = $1 AND fence = $2 AND status = 'running'`

	externalReleaseSQL = `UPDATE {table}
SET status = 'released', attempts = attempts + 1, lease_until = NULL, updated_at = now()
WHERE idem_key = $1 AND fence = $2 AND status = 'running'`

	// Releases a batch of expired claims; the fence moves on, so a worker
	// that comes back after its claim was released cannot record it done.
	externalSweepSQL = `UPDATE {table}
SET status = 'released', fence = fence + 1, attempts = attempts + 1, lease_until = NULL,
  updated_at = now()
WHERE idem_key IN (
    SELECT idem_key FROM {table}
    WHERE status = 'running' AND lease_until < now()
    ORDER BY lease_until LIMIT $1
    FOR UPDATE SKIP LOCKED
  )
  AND status = 'running' AND lease_until < now()
RETURNING idem_key, attempts`

	externalStuckSQL = `SELECT idem_key, status, attempts, updated_at FROM {table}
WHERE status <> 'done' AND attempts > $1
ORDER BY attempts DESC, idem_key LIMIT $2`

	// Deletes one batch of the oldest expired rows that are not running,
	// skipping rows another purge or a claim holds. A row's retention counts
	// from when it was done (or last released), not from its first claim: a
	// key that took days of retries keeps its done row for the whole
	// retention after it was done. created_at is never later than that, so
	// its index bounds the scan to rows created before the horizon.
	externalPurgeSQL = `DELETE FROM {table} WHERE ctid = ANY (ARRAY(
  SELECT ctid FROM {table}
  WHERE status <> 'running'
    AND created_at < now() - make_interval(secs => $1)
    AND coalesce(done_at, updated_at) < now() - make_interval(secs => $1)
  ORDER BY created_at LIMIT $2
  FOR UPDATE SKIP LOCKED
))`
)

// externalSQL are the statements of one mode=external table, built from its
// ExternalTable.
type externalSQL struct {
	claimSQL, lookup, heartbeat, complete, release, sweep, stuck, purge string
}

// newExternalSQL builds the statements of t; it panics, naming constructor,
// on a declaration they cannot be built from.
func newExternalSQL[M any](constructor string, t ExternalTable[M]) *externalSQL {
	checkColumns(constructor, t.Consumer, t.Columns)
	n := len(t.Columns)
	edit := func(name, sql string) string { return sqlhook.Apply(t.Consumer, name, sql) }
	table := func(sql string) string { return fill(sql, "table", t.Name) }
	return &externalSQL{
		claimSQL: edit("claim", fill(externalClaimSQL, "table", t.Name,
			"columns", list(t.Columns, ", ", func(_ int, c Column) string { return c.Name }),
			"values", list(t.Columns, ", ", func(i int, c Column) string { return ph(i+2) + "::" + c.Type }),
			"fingerprint", ph(n+2), "lease", ph(n+3))),
		lookup:    edit("lookup", table(externalLookupSQL)),
		heartbeat: edit("heartbeat", table(externalHeartbeatSQL)),
		complete:  edit("complete", table(externalCompleteSQL)),
		release:   edit("release", table(externalReleaseSQL)),
		sweep:     edit("sweep", table(externalSweepSQL)),
		stuck:     edit("stuck", table(externalStuckSQL)),
		purge:     edit("purge", table(externalPurgeSQL)),
	}
}

// claim inserts or takes over the claim of key and returns fence, attempts
// and the row's previous status, or no row: the idempotency key, the key
// parts (NULL allowed), the fingerprint and the lease in seconds.
func (s *externalSQL) claim(idemKey string, key []any, fp []byte, lease time.Duration) query {
	args := make([]any, 0, len(key)+3)
	args = append(args, idemKey)
	for _, part := range key {
		args = append(args, param(part))
	}
	return query{s.claimSQL, append(args, fp, lease.Seconds())}
}

// lookupKey returns fingerprint, status, result, whether the lease is live
// and the seconds left of it: the idempotency key.
func (s *externalSQL) lookupKey(idemKey string) query {
	return query{s.lookup, []any{idemKey}}
}

// heartbeatClaim renews the lease of a running claim that still has fence:
// the idempotency key, the fence and the lease in seconds.
func (s *externalSQL) heartbeatClaim(idemKey string, fence int64, lease time.Duration) query {
	return query{s.heartbeat, []any{idemKey, fence, lease.Seconds()}}
}

// completeClaim records a running claim that still has fence done: the
// idempotency key, the fence and the result, JSON as a string (never
// []byte: see inboxSQL.markKeyDone) or nil.
func (s *externalSQL) completeClaim(idemKey string, fence int64, result any) query {
	return query{s.complete, []any{idemKey, fence, result}}
}

// releaseClaim releases a running claim that still has fence: the
// idempotency key and the fence.
func (s *externalSQL) releaseClaim(idemKey string, fence int64) query {
	return query{s.release, []any{idemKey, fence}}
}

// sweepExpired resets a batch of expired claims and returns idem_key and
// attempts of each: the batch size.
func (s *externalSQL) sweepExpired() query {
	return query{s.sweep, []any{sweepBatch}}
}

// stuckClaims returns idem_key, status, attempts and updated_at of the
// claims above threshold: the threshold and the limit of the report.
func (s *externalSQL) stuckClaims(threshold int) query {
	return query{s.stuck, []any{threshold, idem.StuckLimit}}
}

// purgeRows deletes one batch of the rows past retain that are not
// running: the retention in seconds and the batch size.
func (s *externalSQL) purgeRows(retain time.Duration) query {
	return query{s.purge, []any{retain.Seconds(), purgeBatch}}
}

// The statements of a mode=entity consumer's business table (EntityTable).
const (
	// Reads the fingerprint of the key's row, after the duplicate's
	// rollback.
	entityLookupSQL = `SELECT ` + FingerprintColumn + ` FROM {table}
WHERE {match}`

	// Runs right before COMMIT, in its round trip: fails (an invalid
	// boolean whose text is MarkerCheckMessage) unless the key's row
	// exists with the fingerprint of this transaction's setting, so that
	// the COMMIT after it rolls back a delivery whose handler did not
	// insert its marker; that also proves the connection is still in the
	// transaction that set it. The ELSE reads the setting so that the
	// planner cannot fold it into a constant error.
	entityCheckSQL = `SELECT CASE
  WHEN EXISTS (
    SELECT FROM {table}
    WHERE {match}
      AND ` + FingerprintColumn + ` = decode(nullif(current_setting('` + FingerprintSetting + `', true), ''), 'hex')
  )
  THEN true
  ELSE ('` + MarkerCheckMessage + `' || coalesce(current_setting('` + FingerprintSetting + `', true), ''))::boolean
END`
)

// entitySQL are the statements of one mode=entity business table, built
// from its EntityTable.
type entitySQL struct{ lookup, check string }

// newEntitySQL builds the statements of t; it panics, naming constructor,
// on a declaration they cannot be built from.
func newEntitySQL[M any](constructor string, t EntityTable[M]) *entitySQL {
	checkColumns(constructor, t.Consumer, t.Columns)
	match := list(t.Columns, " AND ", func(i int, c Column) string {
		return c.Name + " = " + ph(i+1) + "::" + c.Type
	})
	edit := func(name, sql string) string { return sqlhook.Apply(t.Consumer, name, sql) }
	return &entitySQL{
		lookup: edit("lookup", fill(entityLookupSQL, "table", t.Name, "match", match)),
		check:  edit("check", fill(entityCheckSQL, "table", t.Name, "match", match)),
	}
}

// keyArgs are the key parts as the entity statements take them.
func keyArgs(key []any) []any {
	args := make([]any, 0, len(key))
	for _, part := range key {
		args = append(args, param(part))
	}
	return args
}

// lookupKey returns the FingerprintColumn of key's row: the key parts.
func (s *entitySQL) lookupKey(key []any) query { return query{s.lookup, keyArgs(key)} }

// checkMarker fails, raising an invalid-boolean error whose text holds
// MarkerCheckMessage, unless key's row exists with the fingerprint of
// FingerprintSetting: the key parts.
func (s *entitySQL) checkMarker(key []any) query { return query{s.check, keyArgs(key)} }

// unquote returns the name a column's SQL spelling stands for, as the
// catalog holds it.
func unquote(name string) string {
	if len(name) >= 2 && name[0] == '"' && name[len(name)-1] == '"' {
		return strings.ReplaceAll(name[1:len(name)-1], `""`, `"`)
	}
	return name
}
