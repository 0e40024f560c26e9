package idemtest

import (
	"fmt"
	"time"

	"github.com/idemgen/idemgen/idem"
)

// TextKeyInbox declares by hand what idemgen generates for a consumer keyed
// by one string field (key=ID): the inbox table's idem.Table, its statements
// spelled as the generated code spells them, and the goose migration that
// creates the table. Tests of the runtime and of broker adapters use it for
// the inbox of a consumer they need but do not generate, such as the next
// service downstream of a relay. table must be a plain lower-case name.
func TextKeyInbox[M any](consumer, table, field string, key func(M) string) (idem.Table[M], string) {
	t := idem.Table[M]{
		Consumer:  consumer,
		Name:      table,
		KeyFields: []string{field},
		Key: func(msg M) ([]any, error) {
			v := key(msg)
			if err := idem.CheckString(field, v); err != nil {
				return nil, err
			}
			return []any{v}, nil
		},
		Retain: 720 * time.Hour,
		Claim: `WITH wait AS MATERIALIZED (SELECT set_config('lock_timeout', $3::text, true) ` +
			`FROM (SELECT set_config('idem.lock_timeout', current_setting('lock_timeout'), true) OFFSET 0) AS saved) ` +
			`INSERT INTO ` + table + ` (key_id, fingerprint) SELECT $1::text, $2::bytea FROM wait ON CONFLICT DO NOTHING ` +
			`RETURNING set_config('lock_timeout', current_setting('idem.lock_timeout'), true) IS NOT NULL`,
		Complete: `UPDATE ` + table + ` SET result = $2 WHERE key_id = $1`,
		Lookup:   `SELECT fingerprint, status, result FROM ` + table + ` WHERE key_id = $1`,
		Purge: `DELETE FROM ` + table + ` WHERE ctid = ANY (ARRAY(SELECT ctid FROM ` + table +
			` WHERE created_at < now() - make_interval(secs => $1) LIMIT $2))`,
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
