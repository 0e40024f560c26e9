package inboxsql

import (
	"fmt"
	"strings"

	"github.com/idemgen/idemgen/internal/model"
)

// The runtime's names for the fingerprint of a mode=entity handler's rows
// (idem.FingerprintColumn, idem.FingerprintSetting, idem.MarkerCheckMessage),
// which the emitted SQL spells out; idem's tests check that they agree.
const (
	FingerprintColumn  = "idem_fingerprint"
	FingerprintSetting = "idem.fingerprint"
	MarkerCheckMessage = "idem: no entity row with this fingerprint"
)

// fingerprintDefault is the column's default: the setting as bytes, NULL
// when it is unset or empty (outside the wrapper's transactions).
const fingerprintDefault = "decode(nullif(current_setting('" + FingerprintSetting + "', true), ''), 'hex')"

// EntitySchema is the state h's migrations leave: the fingerprint column on
// its business table.
func EntitySchema(h model.Handler) model.EntityMarker {
	return model.EntityMarker{Consumer: h.Consumer, Table: h.Entity.Table}
}

type entityData struct {
	Consumer, Table, Column, Setting, Default, Where, CheckMessage string
}

func entityDataOf(consumer, table string) entityData {
	return entityData{Consumer: consumer, Table: TableName(table), Column: FingerprintColumn, Setting: FingerprintSetting,
		Default: fingerprintDefault, CheckMessage: MarkerCheckMessage}
}

// CreateEntity renders the SQL of the migration that adds the fingerprint
// column to the business table: what follows the header migrate writes.
func CreateEntity(m model.EntityMarker) []byte {
	return []byte(render("entity.sql.tmpl", entityDataOf(m.Consumer, m.Table)))
}

// EntityStatements are the SQL texts of a mode=entity consumer, as
// idem.EntityTable wants them.
type EntityStatements struct{ Lookup, Check string }

// EntityStatementsFor renders the statements of h's business table: the
// key parts are $1..$n, cast to the types of their Go facts.
func EntityStatementsFor(h model.Handler) EntityStatements {
	d := entityDataOf(h.Consumer, h.Entity.Table)
	var where []string
	for i, k := range h.Key {
		col := ""
		if i < len(h.Entity.Columns) {
			col = h.Entity.Columns[i]
		}
		where = append(where, fmt.Sprintf("%s = $%d::%s", Quote(col), i+1, ColumnType(k)))
	}
	d.Where = strings.Join(where, " AND ")
	return EntityStatements{Lookup: render("entity_lookup", d), Check: render("entity_check", d)}
}
