package idemtest

import (
	"fmt"
	"time"

	"github.com/idemgen/idemgen/idem/idemimpl"
)

// TextKeyInbox declares by hand what idemgen generates for a consumer keyed
// by one string field (key=ID): the inbox table's idemimpl.Table and the goose
// migration that creates the table. Tests of the runtime and of broker adapters use it for
// the inbox of a consumer they need but do not generate, such as the next
// service downstream of a relay. table must be a plain lower-case name.
func TextKeyInbox[M any](consumer, table, field string, key func(M) string) (idemimpl.Table[M], string) {
	t := idemimpl.Table[M]{
		Consumer: consumer,
		Name:     table,
		Columns:  []idemimpl.Column{{Field: field, Name: "key_id", Type: "text"}},
		Key: func(msg M) ([]any, error) {
			v := key(msg)
			if err := idemimpl.CheckString(field, v); err != nil {
				return nil, err
			}
			return []any{v}, nil
		},
		Retain: 720 * time.Hour,
	}
	migration := fmt.Sprintf(`-- +goose Up
CREATE TABLE %[1]s (
    key_id       text        PRIMARY KEY,
    fingerprint  bytea       NOT NULL,
    status       text        NOT NULL DEFAULT 'done',
    result       json,
    attempts     integer     NOT NULL DEFAULT 1,
    created_at   timestamptz NOT NULL DEFAULT now(),
    completed_at timestamptz
);
-- +goose Down
DROP TABLE %[1]s;
`, table)
	return t, migration
}
