package idemimpl

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/internal/partition"
	"github.com/idemgen/idemgen/idem/internal/pgutil"
)

// Table describes one consumer's inbox table: how a message's key is taken
// apart and the table's shape, from which the runtime builds the statements
// that claim, complete, look up and purge a key (once, in [NewInbox]).
//
// For generated code: idemgen declares one per handler, from the same facts
// as the migration it writes for the consumer. Do not declare one by hand:
// the declaration must match that migration, and the fields may change with
// the contract version of generated code.
type Table[M any] struct {
	// Consumer is the stable consumer name of the directive.
	Consumer string
	// Name is the inbox table, as SQL writes it: schema-qualified and
	// double-quoted where needed.
	Name string
	// Columns are the key's columns, in key order.
	Columns []Column
	// Key returns the key parts of msg in column order (nil for a NULL
	// part), or an error wrapping ErrInvalidKey.
	Key func(msg M) ([]any, error)
	// Retain is how long inbox rows are kept before Purge deletes them.
	Retain time.Duration
	// Handler is the Go name of a set-based handler (PostAll,
	// Service.PostAll), as its errors name it; empty for a handler of one
	// message.
	Handler string

	// Partition is the time bucket of a partitioned inbox (partition= and
	// time= in the directive), "" for an inbox that is not partitioned.
	// The last of Columns is then the bucket column, of type timestamptz,
	// and the last of Key's parts the message's own time, a time.Time, which
	// the inbox replaces with the start of its bucket (in UTC): the bucket is
	// part of the key, so every copy of a message lands in one partition. A
	// message older than Retain gets ErrOutsideWindow. (Code generated
	// before this field leaves it "": the field keeps the contract version.)
	Partition Bucket

	// Order returns the entity and the version of msg for a table with a
	// stale-message guard (order= and version= in the directive); nil
	// without one.
	Order func(msg M) (entity any, version int64, err error)
	// Versions is the guard's versions table, as SQL writes it, and
	// EntityType the SQL type of its entity column; both empty without a
	// guard.
	Versions   string
	EntityType string

	// Migration is the migration that creates the table. OutboxMigration
	// is the first of the outbox chain beside it, for a publishing inbox.
	// Both are paths relative to the package's directory, "" when unknown.
	// Check names them when what they create is missing or differs.
	Migration       string
	OutboxMigration string
}

// Bucket is the width of the partitions of a partitioned inbox
// (Table.Partition): the time buckets its messages are placed in, in UTC.
type Bucket = partition.Bucket

// The buckets of partition= (docs/directive.md).
const (
	Hour  = partition.Hour
	Day   = partition.Day
	Week  = partition.Week
	Month = partition.Month
)

// bucketed returns the key function of a partitioned inbox: t's, with the
// last part, the message's time, replaced by the start of its bucket, and
// a message outside the kept window refused (ErrOutsideWindow). now is the
// clock.
func bucketed[M any](t Table[M], now func() time.Time) func(M) ([]any, error) {
	field := t.Columns[len(t.Columns)-1].Field
	keep := partition.Table{Bucket: t.Partition, Retain: t.Retain}
	return func(msg M) ([]any, error) {
		key, err := t.Key(msg)
		if err != nil {
			return nil, err
		}
		last := len(key) - 1
		at, ok := key[last].(time.Time)
		switch {
		case !ok:
			return nil, fmt.Errorf("idem: consumer %s: the key's last part is a %T, not the message's time (time.Time)", t.Consumer, key[last])
		case at.IsZero():
			return nil, InvalidKey(field, "is the zero time: a message without its time has no bucket")
		}
		if window := keep.Window(now()); at.Before(window) {
			return nil, outsideWindow(field, at, fmt.Sprintf("is older than the retention (retain=%v): it is before %s",
				t.Retain, window.UTC().Format(time.RFC3339)))
		}
		parts := slices.Clone(key)
		parts[last] = t.Partition.Start(at)
		return parts, nil
	}
}

// outsideWindow is the ErrOutsideWindow of a message whose time, in field,
// is at, for the reason given.
func outsideWindow(field string, at time.Time, reason string) error {
	return fmt.Errorf("%w: %s %s %s", idem.ErrOutsideWindow, field, at.UTC().Format(time.RFC3339Nano), reason)
}

// keyText is a key part in the text form the batch statements cast from.
func keyText(part any) string {
	switch v := part.(type) {
	case string:
		return v
	case [16]byte:
		return pgutil.FormatUUID(v)
	case int64:
		return strconv.FormatInt(v, 10)
	case uint64:
		return strconv.FormatUint(v, 10)
	case time.Time:
		return v.UTC().Format(time.RFC3339Nano)
	default:
		return fmt.Sprint(v)
	}
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

// CheckString validates a string key part: not empty, valid UTF-8, no NUL byte
// (PostgreSQL text cannot hold one), at most MaxKeyBytes long.
//
// For generated code: the key functions of generated Tables call it; a
// handler has no need to.
func CheckString(path, v string) error {
	switch {
	case v == "":
		return InvalidKey(path, "is empty")
	case len(v) > idem.MaxKeyBytes:
		return InvalidKey(path, fmt.Sprintf("is %d bytes long, more than %d", len(v), idem.MaxKeyBytes))
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

// identify returns msg's valid key parts (validKey) and, when fingerprinted,
// its payload fingerprint: what every delivery needs before it sends
// anything. On an error the key is nil unless the key was valid.
func identify[M any](msg M, keyOf func(M) ([]any, error), fields []string, fingerprinted bool) ([]any, []byte, error) {
	key, err := validKey(msg, keyOf, fields)
	switch {
	case err != nil:
		return nil, nil, err
	case !fingerprinted:
		return key, nil, nil
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
	if total > idem.MaxKeyBytes {
		return InvalidKey(strings.Join(fields, ","), fmt.Sprintf("together are %d bytes long, more than %d", total, idem.MaxKeyBytes))
	}
	return nil
}

// InvalidKey returns an error wrapping ErrInvalidKey for the key part at path
// (a Go field path such as "Meta.ID").
//
// For generated code: the key functions of generated Tables return it. To
// have a message dead-lettered from a handler, return an error wrapping
// ErrUndecodablePayload (or ErrInvalidKey) with fmt.Errorf.
func InvalidKey(path, reason string) error {
	return fmt.Errorf("%w: %s %s", idem.ErrInvalidKey, path, reason)
}
