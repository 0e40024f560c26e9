package idem

import (
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgtype"
)

// Table describes one consumer's inbox table: how a message's key is taken
// apart and the statements that claim, complete, look up and purge a key.
//
// For generated code: idemgen declares one per handler, with the SQL spelled
// out so that a reviewer sees exactly what runs, and renders the statements
// to the placeholder contract below, which idem's tests check against the
// generated tables (TestTablePlaceholders). Do not declare one by hand: the
// statements must match the migration idemgen writes for the same consumer,
// and the fields may change with the contract version of generated code.
//
// Placeholders: $1 to $n are the key parts in column order (n =
// len(KeyFields)). Claim takes the fingerprint as $n+1, the claim wait (a
// lock_timeout value) as $n+2, and for a table with a stale-message guard
// the entity and version as $n+3 and $n+4. It bounds its own wait for a
// concurrent claim with that lock_timeout, restores the session's value
// before it returns, and returns one boolean row when it inserted the key:
// true unless the guard found the version stale. The row it inserts is done
// (it becomes visible only with the commit); Complete stores the JSON result
// (the placeholder after the key's) of a handler that has one. Lookup returns
// fingerprint, status and result; Purge takes the retention in seconds as $1
// and the batch size as $2.
//
// A key part that is NULL (a nil in Key's result) cannot be matched with =:
// for keys with NULL parts, Complete and Lookup come from NullComplete and
// NullLookup, by null pattern (bit i set when part i is NULL), and number
// only the parts that are not NULL.
//
// Batch statements (HandleBatch): BatchClaim, BatchLookup and BatchComplete
// take the key parts as arrays, $1 to $n, one text[] per key part holding
// each message's part in its text form (a UUID as 8-4-4-4-12 hex, an
// integer in decimal), which the statement casts to the column's type, so
// that pgx encodes them in every query exec mode. BatchClaim takes the
// fingerprints as $n+1 (bytea[]) and the claim wait as $n+2 (text), inserts
// the keys in key order (so that two batches with overlapping keys take
// their locks in one order and cannot deadlock), bounds and restores
// lock_timeout as Claim does, and returns the 1-based position in the arrays
// of each key it inserted. BatchLookup returns position, fingerprint, status
// and result of each key it finds; BatchComplete stores $n+1 (text[], the
// JSON results) in the keys' rows. A Table without BatchClaim (a table with
// a stale-message guard or with nullable key parts: idemgen spells out none
// for those) runs a batch as one transaction per message.
type Table[M any] struct {
	// Consumer is the stable consumer name of the directive.
	Consumer string
	// Name is the inbox table, as written in the statements.
	Name string
	// KeyFields are the Go field paths of the key parts, in column order.
	KeyFields []string
	// Key returns the key parts of msg in column order, or an error wrapping
	// ErrInvalidKey.
	Key func(msg M) ([]any, error)
	// Retain is how long inbox rows are kept before Purge deletes them.
	Retain time.Duration

	// Order returns the entity and the version of msg for a table with a
	// stale-message guard (order= and version= in the directive); nil
	// without one.
	Order func(msg M) (entity any, version int64, err error)

	Claim    string
	Complete string
	Lookup   string
	Purge    string

	NullComplete map[uint64]string
	NullLookup   map[uint64]string

	BatchClaim    string
	BatchLookup   string
	BatchComplete string
}

// The statements of a Table and the arguments idem passes them, in the order
// of the placeholder contract (see Table). Every statement is sent through
// one of these, and TestTablePlaceholders checks each against the
// statements of the generated Tables.

// claimStatement returns the claim and its arguments: the key parts, the
// fingerprint, the claim's lock_timeout and, for a table with a
// stale-message guard (order not nil), the entity and the version.
func (t *Table[M]) claimStatement(key []any, fp []byte, lockWait any, order []any) (string, []any) {
	args := make([]any, 0, len(key)+2+len(order))
	for _, part := range key {
		args = append(args, param(part))
	}
	args = append(args, fp, lockWait)
	for _, v := range order {
		args = append(args, param(v))
	}
	return t.Claim, args
}

// completeStatement returns the statement that stores result in key's row
// and its arguments: the parts of the key that are not NULL, then the
// result. The result goes as text, never as []byte: pgx sends a []byte of
// unknown parameter type as bytea ('\x7b...'), which json refuses, whenever
// it does not describe the statement first (QueryExecModeExec and
// QueryExecModeSimpleProtocol, what poolers such as PgBouncer and RDS Proxy
// need). As text, the server reads it as the column's type in every mode.
func (t *Table[M]) completeStatement(key []any, result []byte) (string, []any) {
	sql, args := t.statement(t.Complete, t.NullComplete, key)
	return sql, append(args, string(result))
}

// lookupStatement returns the statement that reads key's row and its
// arguments: the parts of the key that are not NULL.
func (t *Table[M]) lookupStatement(key []any) (string, []any) {
	return t.statement(t.Lookup, t.NullLookup, key)
}

// batches reports whether the table has the statements of HandleBatch.
func (t *Table[M]) batches() bool {
	return t.BatchClaim != "" && t.BatchLookup != "" && t.BatchComplete != "" && t.Order == nil
}

// keyArrays returns the key parts of keys as the batch statements take them:
// one []string per key part, each the parts' text forms in keys' order.
func (t *Table[M]) keyArrays(keys [][]any) []any {
	args := make([]any, len(t.KeyFields))
	for p := range args {
		col := make([]string, len(keys))
		for i, key := range keys {
			col[i] = keyText(key[p])
		}
		args[p] = col
	}
	return args
}

// keyText is a key part in the text form the batch statements cast from.
func keyText(part any) string {
	switch v := part.(type) {
	case string:
		return v
	case [16]byte:
		return formatUUID(v)
	case int64:
		return strconv.FormatInt(v, 10)
	case uint64:
		return strconv.FormatUint(v, 10)
	default:
		return fmt.Sprint(v)
	}
}

// batchClaimStatement returns the claim of keys and its arguments: the key
// arrays, the fingerprints, the claim's lock_timeout.
func (t *Table[M]) batchClaimStatement(keys [][]any, fps [][]byte, lockWait any) (string, []any) {
	return t.BatchClaim, append(t.keyArrays(keys), fps, lockWait)
}

// batchLookupStatement returns the lookup of keys and its arguments: the key
// arrays.
func (t *Table[M]) batchLookupStatement(keys [][]any) (string, []any) {
	return t.BatchLookup, t.keyArrays(keys)
}

// batchCompleteStatement returns the statement that stores results (JSON
// texts, see completeStatement) in keys' rows and its arguments.
func (t *Table[M]) batchCompleteStatement(keys [][]any, results []string) (string, []any) {
	return t.BatchComplete, append(t.keyArrays(keys), results)
}

// purgeBatch bounds how many rows one purge statement deletes.
const purgeBatch = 1000

// purgeStatement returns the purge and its arguments: the retention in
// seconds and the batch size.
func (t *Table[M]) purgeStatement() (string, []any) {
	return t.Purge, []any{t.Retain.Seconds(), purgeBatch}
}

// statement picks the variant of a statement for key's null pattern and the
// arguments it takes: the parts that are not NULL.
func (t *Table[M]) statement(plain string, byNulls map[uint64]string, key []any) (string, []any) {
	var nulls uint64
	args := make([]any, 0, len(key)+1)
	for i, part := range key {
		if part == nil {
			nulls |= 1 << i
			continue
		}
		args = append(args, param(part))
	}
	if nulls == 0 {
		return plain, args
	}
	return byNulls[nulls], args
}

// param returns a key part or entity as it is sent. A UUID ([16]byte) goes as
// a pgtype.UUID: pgx has no encoding of a bare [16]byte for a parameter whose
// type it has not asked the server for (QueryExecModeExec and
// QueryExecModeSimpleProtocol, what poolers such as PgBouncer need), while
// pgtype.UUID encodes in every mode.
func param(v any) any {
	if u, ok := v.([16]byte); ok {
		return pgtype.UUID{Bytes: u, Valid: true}
	}
	return v
}

// MaxKeyBytes bounds the total size of a key's string parts. PostgreSQL cannot
// index a B-tree entry much larger than 2.7 kB; a longer key is rejected with
// ErrInvalidKey before anything is written, instead of failing in the index.
const MaxKeyBytes = 2048

// CheckString validates a string key part: not empty, valid UTF-8, no NUL byte
// (PostgreSQL text cannot hold one), at most MaxKeyBytes long.
//
// For generated code: the key functions of generated Tables call it; a
// handler has no need to.
func CheckString(path, v string) error {
	switch {
	case v == "":
		return InvalidKey(path, "is empty")
	case len(v) > MaxKeyBytes:
		return InvalidKey(path, fmt.Sprintf("is %d bytes long, more than %d", len(v), MaxKeyBytes))
	case !utf8.ValidString(v):
		return InvalidKey(path, "is not valid UTF-8")
	case strings.IndexByte(v, 0) >= 0:
		return InvalidKey(path, "contains a NUL byte")
	}
	return nil
}

// CheckUUID validates a UUID key part: not the zero UUID, which is what an
// unset field holds.
//
// For generated code: the key functions of generated Tables call it.
func CheckUUID(path string, v [16]byte) error {
	if v == ([16]byte{}) {
		return InvalidKey(path, "is the zero UUID")
	}
	return nil
}

// CheckInt validates an integer key part: not 0, which is what an unset
// field holds, so that two messages without an id do not collide. A part for
// which 0 is a real value is listed in the directive's zero= and not checked.
//
// For generated code: the key functions of generated Tables call it.
func CheckInt[T int64 | uint64](path string, v T) error {
	if v == 0 {
		return InvalidKey(path, "is zero (an unset field? if 0 is a real value of it, list it in the directive's zero=)")
	}
	return nil
}

// validKey returns msg's key parts as keyOf makes them, checked against
// MaxKeyBytes (an error is keyOf's, or an ErrInvalidKey for the size).
func validKey[M any](msg M, keyOf func(M) ([]any, error), fields []string) ([]any, error) {
	key, err := keyOf(msg)
	if err == nil {
		err = checkKeySize(fields, key)
	}
	return key, err
}

// identify returns msg's valid key parts (validKey) and its payload
// fingerprint: what every mode that records a key needs before it sends
// anything. On an error the key is nil unless the key was valid.
func identify[M any](msg M, keyOf func(M) ([]any, error), fields []string) ([]any, []byte, error) {
	key, err := validKey(msg, keyOf, fields)
	if err != nil {
		return nil, nil, err
	}
	fp, err := fingerprint(msg)
	if err != nil {
		return key, nil, err
	}
	return key, fp, nil
}

// checkKeySize rejects keys whose string parts together exceed MaxKeyBytes.
func checkKeySize(fields []string, key []any) error {
	total := 0
	for _, part := range key {
		if s, ok := part.(string); ok {
			total += len(s)
		}
	}
	if total > MaxKeyBytes {
		return InvalidKey(strings.Join(fields, ","), fmt.Sprintf("together are %d bytes long, more than %d", total, MaxKeyBytes))
	}
	return nil
}

// formatKey renders key parts as Field=value pairs for errors and logs.
func formatKey(fields []string, key []any) string {
	var b strings.Builder
	for i, part := range key {
		if i > 0 {
			b.WriteByte(',')
		}
		if i < len(fields) {
			b.WriteString(fields[i])
			b.WriteByte('=')
		}
		switch v := part.(type) {
		case string:
			b.WriteString(strconv.Quote(v))
		case [16]byte:
			b.WriteString(formatUUID(v))
		default:
			fmt.Fprint(&b, v)
		}
	}
	return b.String()
}

func formatUUID(u [16]byte) string {
	var buf [36]byte
	hex.Encode(buf[0:8], u[0:4])
	buf[8] = '-'
	hex.Encode(buf[9:13], u[4:6])
	buf[13] = '-'
	hex.Encode(buf[14:18], u[6:8])
	buf[18] = '-'
	hex.Encode(buf[19:23], u[8:10])
	buf[23] = '-'
	hex.Encode(buf[24:], u[10:])
	return string(buf[:])
}
