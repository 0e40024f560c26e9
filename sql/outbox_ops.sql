-- The queries of the operator's commands over idem_outbox (migrations/),
-- run by internal/ops. idemgen outbox dead lists the dead rows; idemgen
-- outbox revive makes them due again. The relay never claims a dead row, so
-- these statements touch no row a relay holds.

-- name: OutboxSchema :one
-- OutboxSchema names the schema of the idem_outbox table that the
-- connection's search_path finds. The relay's unqualified statements find
-- the same table. No row when there is none.
SELECT n.nspname::text AS schema
FROM pg_catalog.pg_class AS c
JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
WHERE c.oid = to_regclass('idem_outbox');

-- name: DeadRows :many
-- DeadRows lists the dead rows of every consumer, or of @consumer, by id.
-- That is the order the relay published them in, and would again.
SELECT id, message_id, consumer, key, destination,
       coalesce(ordering_key, '')::text AS ordering_key,
       coalesce(attempts, 0)::integer AS attempts,
       created_at,
       dead_at::timestamptz AS dead_at,
       coalesce(last_error, '')::text AS last_error
FROM idem_outbox
WHERE dead_at IS NOT NULL
  AND (@consumer::text = '' OR consumer = @consumer::text)
ORDER BY id;

-- name: LockDeadRows :many
-- LockDeadRows locks the dead rows to revive in the same transaction: those
-- whose id is in @ids, or with @all_rows every dead row (of @consumer, when
-- not ''). The lock keeps another revive from reviving them at once.
SELECT id, message_id, consumer, key, destination,
       coalesce(ordering_key, '')::text AS ordering_key,
       coalesce(attempts, 0)::integer AS attempts,
       created_at,
       dead_at::timestamptz AS dead_at,
       coalesce(last_error, '')::text AS last_error
FROM idem_outbox
WHERE dead_at IS NOT NULL
  AND (id = ANY (@ids::bigint[])
       OR (@all_rows::boolean AND (@consumer::text = '' OR consumer = @consumer::text)))
ORDER BY id
FOR UPDATE;

-- name: DeadBefore :many
-- DeadBefore pairs each dead row in @ids that has an ordering key with the
-- dead rows of its key that have a lower id and are not in @ids. A dead row
-- does not hold back its key. So the later row, revived alone, would be the
-- key's head, and the ordered relay would publish it before them.
SELECT r.id, e.id AS earlier_id, r.ordering_key::text AS ordering_key
FROM idem_outbox AS r
JOIN idem_outbox AS e
  ON e.ordering_key = r.ordering_key
 AND e.id < r.id
 AND e.dead_at IS NOT NULL
WHERE r.id = ANY (@ids::bigint[])
  AND r.dead_at IS NOT NULL
  AND coalesce(r.ordering_key, '') <> ''
  AND NOT (e.id = ANY (@ids::bigint[]))
ORDER BY r.id, e.id;

-- name: ReviveRows :execrows
-- ReviveRows makes the dead rows in @ids due again, as if just written. It
-- clears dead_at, the attempts (the relay's next claim is attempt 1), the
-- backoff and any claim. With available_at NULL a row is due from
-- created_at, so the unordered relay takes it before the rows written after
-- it. id is kept, so the ordered relay publishes the rows of a key in the
-- order they were written. last_error stays until the next failure, or
-- until the row is published (deleted).
UPDATE idem_outbox
SET dead_at      = NULL,
    attempts     = NULL,
    available_at = NULL,
    claim_token  = NULL,
    lease_until  = NULL
WHERE id = ANY (@ids::bigint[])
  AND dead_at IS NOT NULL;
