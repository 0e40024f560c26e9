package idemtest

import (
	"fmt"
	"time"

	"github.com/idemgen/idemgen/idem"
)

// TextKeyExternal declares by hand what idemgen generates for a
// mode=external consumer keyed by one string field (key=ID, key column
// key_id): the table's idem.ExternalTable, its statements spelled as the
// contract of docs/external.md gives them, and the goose migration that
// creates the table. The runtime's tests of mode=external use it, and the
// generator's output for the same consumer is compared with it. table must
// be a plain lower-case name.
func TextKeyExternal[M any](consumer, table, field string, key func(M) string) (idem.ExternalTable[M], string) {
	t := idem.ExternalTable[M]{
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
		Lease:  5 * time.Minute,
		Claim: `INSERT INTO ` + table + ` AS r (idem_key, key_id, fingerprint, status, fence, attempts, lease_until) ` +
			`VALUES ($1::text, $2::text, $3::bytea, 'running', 1, 1, now() + make_interval(secs => $4::float8)) ` +
			`ON CONFLICT (idem_key) DO UPDATE SET status = 'running', fence = r.fence + 1, ` +
			`attempts = r.attempts + CASE WHEN r.status = 'running' THEN 1 ELSE 0 END, ` +
			`lease_until = EXCLUDED.lease_until, updated_at = now() ` +
			`WHERE r.fingerprint = EXCLUDED.fingerprint AND (r.status = 'released' OR (r.status = 'running' AND r.lease_until < now())) ` +
			`RETURNING r.fence, r.attempts`,
		Lookup: `SELECT fingerprint, status, result, coalesce(lease_until > now(), false) AS live FROM ` + table + ` WHERE idem_key = $1::text`,
		Heartbeat: `UPDATE ` + table + ` SET lease_until = now() + make_interval(secs => $3::float8), updated_at = now() ` +
			`WHERE idem_key = $1::text AND fence = $2::bigint AND status = 'running'`,
		Complete: `UPDATE ` + table + ` SET status = 'done', result = $3::json, lease_until = NULL, done_at = now(), updated_at = now() ` +
			`WHERE idem_key = $1::text AND fence = $2::bigint AND status = 'running'`,
		Release: `UPDATE ` + table + ` SET status = 'released', attempts = attempts + 1, lease_until = NULL, updated_at = now() ` +
			`WHERE idem_key = $1::text AND fence = $2::bigint AND status = 'running'`,
		Sweep: `UPDATE ` + table + ` AS r SET status = 'released', fence = r.fence + 1, attempts = r.attempts + 1, lease_until = NULL, updated_at = now() ` +
			`FROM (SELECT idem_key FROM ` + table + ` WHERE status = 'running' AND lease_until < now() ` +
			`ORDER BY lease_until LIMIT $1 FOR UPDATE SKIP LOCKED) AS expired ` +
			`WHERE r.idem_key = expired.idem_key AND r.status = 'running' AND r.lease_until < now() ` +
			`RETURNING r.idem_key, r.attempts`,
		Stuck: `SELECT idem_key, status, attempts, updated_at FROM ` + table + ` WHERE status <> 'done' AND attempts > $1 ` +
			`ORDER BY attempts DESC, idem_key LIMIT $2`,
		Purge: `DELETE FROM ` + table + ` WHERE ctid = ANY (ARRAY(SELECT ctid FROM ` + table +
			` WHERE status <> 'running' AND created_at < now() - make_interval(secs => $1) ORDER BY created_at LIMIT $2 FOR UPDATE SKIP LOCKED))`,
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
