package inboxsql

import "github.com/idemgen/idemgen/internal/model"

// The runtime's names for the fingerprint of a mode=entity handler's rows
// (idemimpl.FingerprintColumn, idemimpl.FingerprintSetting), which the emitted
// migration spells out; idem's tests check that they agree.
const (
	FingerprintColumn  = "idem_fingerprint"
	FingerprintSetting = "idem.fingerprint"
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
	Consumer, Table, Column, Setting, Default string
}

func entityDataOf(consumer, table string) entityData {
	return entityData{Consumer: consumer, Table: TableName(table), Column: FingerprintColumn, Setting: FingerprintSetting,
		Default: fingerprintDefault}
}

// CreateEntity renders the SQL of the migration that adds the fingerprint
// column to the business table: what follows the header migrate writes.
func CreateEntity(m model.EntityMarker) []byte {
	return []byte(render("entity.sql.tmpl", entityDataOf(m.Consumer, m.Table)))
}
