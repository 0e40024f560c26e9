package idem

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"reflect"
	"strconv"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/idemgen/idemgen/idem/internal/link"
	"github.com/idemgen/idemgen/idem/internal/pgutil"
)

// externalKeyScheme starts the bytes an external idempotency key hashes, so
// that a later scheme can never produce a key of this one.
const externalKeyScheme = "idem.external.v1"

// KeyFrom returns the idempotency key of the delivery ctx belongs to: the
// value to send to an external provider (an Idempotency-Key header, a
// payment API's idempotency_key), so that the provider applies the call once
// however often the handler runs. It is the lowercase hex SHA-256 of the
// consumer and the typed key parts (see [ExternalKey]): 64 ASCII characters,
// the same for every attempt, worker and process that handles the key. ok is
// false outside a mode=external handler.
func KeyFrom(ctx context.Context) (key string, ok bool) {
	key, ok = ctx.Value(link.KeyContext{}).(string)
	return key, ok
}

// ExternalKey computes the idempotency key [KeyFrom] returns to the
// handlers of consumer, for a message whose key parts (in column order, as
// the table's Key returns them) are parts: for tests, provider doubles and
// audits, which have no handler's context.
//
// The hashed encoding is unambiguous: the scheme, the consumer and every
// part are length-prefixed and tagged by kind, so that no two (consumer,
// key) pairs share a key. A nil part (NULL) is distinct from every value,
// the empty string included; integers are written as their decimal value,
// so int64(7) and uint64(7) give the same key; UUIDs ([16]byte types and
// pgtype.UUID) as their canonical lowercase text.
func ExternalKey(consumer string, parts []any) string {
	buf := make([]byte, 0, 64+len(consumer)+24*len(parts))
	buf = appendField(buf, externalKeyScheme)
	buf = appendField(buf, consumer)
	buf = binary.AppendUvarint(buf, uint64(len(parts)))
	for _, part := range parts {
		buf = appendKeyPart(buf, part)
	}
	sum := sha256.Sum256(buf)
	return hex.EncodeToString(sum[:])
}

func appendField(buf []byte, s string) []byte {
	buf = binary.AppendUvarint(buf, uint64(len(s)))
	return append(buf, s...)
}

// appendKeyPart appends one key part: a tag byte, then its length-prefixed
// text.
func appendKeyPart(buf []byte, part any) []byte {
	switch v := part.(type) {
	case nil:
		return append(buf, 'z')
	case string:
		return appendField(append(buf, 's'), v)
	case int64:
		return appendField(append(buf, 'n'), strconv.FormatInt(v, 10))
	case uint64:
		return appendField(append(buf, 'n'), strconv.FormatUint(v, 10))
	case [16]byte:
		return appendField(append(buf, 'u'), pgutil.FormatUUID(v))
	case pgtype.UUID:
		if !v.Valid {
			return append(buf, 'z')
		}
		return appendField(append(buf, 'u'), pgutil.FormatUUID(v.Bytes))
	}
	rv := reflect.ValueOf(part)
	switch rv.Kind() {
	case reflect.Pointer:
		if rv.IsNil() {
			return append(buf, 'z')
		}
		return appendKeyPart(buf, rv.Elem().Interface())
	case reflect.String:
		return appendField(append(buf, 's'), rv.String())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return appendField(append(buf, 'n'), strconv.FormatInt(rv.Int(), 10))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return appendField(append(buf, 'n'), strconv.FormatUint(rv.Uint(), 10))
	case reflect.Array:
		if rv.Len() == 16 && rv.Type().Elem().Kind() == reflect.Uint8 {
			var u [16]byte
			reflect.Copy(reflect.ValueOf(&u).Elem(), rv)
			return appendField(append(buf, 'u'), pgutil.FormatUUID(u))
		}
	}
	// Not a kind generated keys have: its type and value, so that it is
	// still unambiguous.
	return appendField(append(buf, 'v'), fmt.Sprintf("%T:%#v", part, part))
}
