package idemtest

import (
	"fmt"
	"time"

	"github.com/idemgen/idemgen/idem/idemimpl"
)

// TextKeyExternal declares by hand what idemgen generates for a
// mode=external consumer keyed by one string field (key=ID, key column
// key_id): the table's idemimpl.ExternalTable and the goose migration that
// creates the table. The runtime's tests of mode=external use it. table must
// be a plain lower-case name.
func TextKeyExternal[M any](consumer, table, field string, key func(M) string) (idemimpl.ExternalTable[M], string) {
	t := idemimpl.ExternalTable[M]{
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
		Lease:  5 * time.Minute,
	}
	migration := fmt.Sprintf(`-- +goose Up
CREATE TABLE %[1]s (
    idem_key    text        NOT NULL PRIMARY KEY,
    key_id      text        NOT NULL,
    fingerprint bytea       NOT NULL,
    status      text        NOT NULL CHECK (status IN ('running', 'released', 'done')),
    fence       bigint      NOT NULL,
    attempts    integer     NOT NULL,
    lease_until timestamptz,
    result      json,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    done_at     timestamptz
);
CREATE INDEX %[1]s_lease_idx ON %[1]s (lease_until) WHERE status = 'running';
CREATE INDEX %[1]s_created_idx ON %[1]s (created_at);
-- +goose Down
DROP TABLE %[1]s;
`, table)
	return t, migration
}
