package inboxsql

import (
	"fmt"
	"testing"

	"github.com/idemgen/idemgen/internal/migrate"
	"github.com/idemgen/idemgen/internal/model"
)

// columnTypes are the Go facts of each key type the loader accepts and the
// column type that holds every value of it.
var columnTypes = []struct {
	goType string
	part   model.KeyPart
	want   string
}{
	{"string", model.KeyPart{Kind: model.KeyString}, "text"},
	{"[16]byte", model.KeyPart{Kind: model.KeyUUID}, "uuid"},
	{"int8", model.KeyPart{Kind: model.KeyInt, Bits: 8}, "smallint"},
	{"int16", model.KeyPart{Kind: model.KeyInt, Bits: 16}, "smallint"},
	{"int32", model.KeyPart{Kind: model.KeyInt, Bits: 32}, "integer"},
	{"int64, int", model.KeyPart{Kind: model.KeyInt, Bits: 64}, "bigint"},
	{"uint8", model.KeyPart{Kind: model.KeyInt, Bits: 8, Unsigned: true}, "smallint"},
	{"uint16", model.KeyPart{Kind: model.KeyInt, Bits: 16, Unsigned: true}, "integer"},
	{"uint32", model.KeyPart{Kind: model.KeyInt, Bits: 32, Unsigned: true}, "bigint"},
	{"uint64, uint, uintptr", model.KeyPart{Kind: model.KeyInt, Bits: 64, Unsigned: true}, "numeric(20)"},
}

// TestColumnType: each Go key type is stored in the smallest column that
// holds all its values; nullability does not change the type.
func TestColumnType(t *testing.T) {
	for _, c := range columnTypes {
		t.Run(c.goType, func(t *testing.T) {
			if got := ColumnType(c.part); got != c.want {
				t.Errorf("ColumnType(%+v) = %q, want %q", c.part, got, c.want)
			}
			null := c.part
			null.Null = &model.Null{Pointer: true}
			if got := ColumnType(null); got != c.want {
				t.Errorf("ColumnType of nullable %s = %q, want %q", c.goType, got, c.want)
			}
		})
	}
}

// TestColumnTypeRefusesUnknownFacts: a part the loader cannot produce (an
// integer of no width, a kind beyond the three) is a bug that must not
// silently become some column type.
func TestColumnTypeRefusesUnknownFacts(t *testing.T) {
	for _, part := range []model.KeyPart{
		{Path: "N", Kind: model.KeyInt},
		{Path: "N", Kind: model.KeyInt, Bits: 128},
		{Path: "K", Kind: model.KeyKind(7)},
	} {
		t.Run(fmt.Sprintf("%+v", part), func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Errorf("ColumnType(%+v) did not panic", part)
				}
			}()
			ColumnType(part)
		})
	}
}

// TestSchema: the inbox a handler needs, from its key parts' Go facts: the
// columns and their types, the unique strategy the nullable parts call for,
// the guard's entity column, a json result column.
func TestSchema(t *testing.T) {
	str := model.KeyPart{Column: "key_id", Kind: model.KeyString}
	ref := model.KeyPart{Column: "key_ref", Kind: model.KeyInt, Bits: 64, Null: &model.Null{Pointer: true}}
	line := model.KeyPart{Column: "key_line", Kind: model.KeyInt, Bits: 32, Unsigned: true, Null: &model.Null{ValueField: "Int32"}}
	entity := model.KeyPart{Column: "entity", Kind: model.KeyUUID}
	for _, c := range []struct {
		name string
		h    model.Handler
		want string
	}{
		{"required key", model.Handler{Table: "idem_a", Key: []model.KeyPart{str}},
			"table=idem_a key=key_id:text unique=pkey result=json retention=btree"},
		{"nullable part", model.Handler{Table: "idem_a", Key: []model.KeyPart{str, ref, line}},
			"table=idem_a key=key_id:text,key_ref:bigint?,key_line:bigint? unique=partial result=json retention=btree"},
		{"nullable part, PostgreSQL 15", model.Handler{Table: "idem_a", Key: []model.KeyPart{str, ref}, NullsNotDistinct: true},
			"table=idem_a key=key_id:text,key_ref:bigint? unique=nulls-not-distinct result=json retention=btree"},
		{"required key, PostgreSQL 15", model.Handler{Table: "idem_a", Key: []model.KeyPart{str}, NullsNotDistinct: true},
			"table=idem_a key=key_id:text unique=pkey result=json retention=btree"},
		{"guard", model.Handler{Table: "app.inbox", Key: []model.KeyPart{str},
			Guard: &model.Guard{Entity: entity, Version: model.KeyPart{Kind: model.KeyInt, Bits: 64}}},
			"table=app.inbox key=key_id:text unique=pkey guard=entity:uuid result=json retention=btree"},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.h.Consumer = "app.a"
			in := Schema(c.h)
			if got := migrate.SchemaLine(in); got != migrate.SchemaMarker+c.want {
				t.Errorf("Schema = %q\nwant     %q", got, migrate.SchemaMarker+c.want)
			}
			if in.Consumer != "app.a" {
				t.Errorf("Schema has consumer %q", in.Consumer)
			}
		})
	}
}

// partOf returns a key part whose column is c: the Go facts ColumnType maps
// to c's type, so that tests can build a handler from an inbox.
func partOf(c model.Column) model.KeyPart {
	part := model.KeyPart{Path: c.Name, Column: c.Name}
	for _, ct := range columnTypes {
		if ct.want == c.Type {
			part.Kind, part.Bits, part.Unsigned = ct.part.Kind, ct.part.Bits, ct.part.Unsigned
			break
		}
	}
	if ColumnType(part) != c.Type {
		panic(fmt.Sprintf("no Go key type is stored as %s", c.Type))
	}
	if c.Nullable {
		part.Null = &model.Null{Pointer: true}
	}
	return part
}
