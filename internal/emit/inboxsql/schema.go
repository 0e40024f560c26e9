package inboxsql

import (
	"fmt"

	"github.com/idemgen/idemgen/internal/model"
)

// Schema returns the inbox schema h needs: its key columns with the SQL types
// of their Go facts, how it keeps one row per key, and the entity column of
// its stale-message guard.
func Schema(h model.Handler) model.Inbox {
	in := model.Inbox{Consumer: h.Consumer, Table: h.Table, Unique: model.PrimaryKey, Result: model.ResultJSON, Retention: model.RetentionBTree}
	for _, k := range h.Key {
		in.Key = append(in.Key, model.Column{Name: k.Column, Type: ColumnType(k), Nullable: k.Null != nil})
		if k.Null != nil {
			in.Unique = model.PartialIndexes
			if h.NullsNotDistinct {
				in.Unique = model.NullsNotDistinct
			}
		}
	}
	if h.Guard != nil {
		in.Guard = &model.Column{Name: h.Guard.Entity.Column, Type: ColumnType(h.Guard.Entity)}
	}
	if h.Partition != nil {
		in.Partition = h.Partition.Bucket
	}
	return in
}

// ColumnType is the SQL type of the column a key part is stored in: text for
// strings, uuid for UUIDs, and for integers the smallest of smallint, integer
// and bigint that holds every value of the Go type, numeric(20) for uint64
// (whose values bigint does not hold). It panics on a part the loader cannot
// produce, an integer of another width.
func ColumnType(k model.KeyPart) string {
	switch k.Kind {
	case model.KeyString:
		return "text"
	case model.KeyUUID:
		return "uuid"
	case model.KeyInt:
	default:
		panic(fmt.Sprintf("inboxsql: key part %s has unknown kind %d", k.Path, k.Kind))
	}
	if k.Bits != 8 && k.Bits != 16 && k.Bits != 32 && k.Bits != 64 {
		panic(fmt.Sprintf("inboxsql: key part %s is an integer of %d bits", k.Path, k.Bits))
	}
	// A signed column needs one bit more than an unsigned Go type has.
	need := k.Bits
	if k.Unsigned {
		need++
	}
	switch {
	case need <= 16:
		return "smallint"
	case need <= 32:
		return "integer"
	case need <= 64:
		return "bigint"
	default:
		return "numeric(20)"
	}
}
