-- The queries of the operator's commands over idem_outbox (migrations/):
-- idemgen outbox dead lists the dead rows and idemgen outbox revive makes
-- them due again (internal/ops). The relay never claims a dead row, so
-- these statements touch no row a relay holds.

-- name: OutboxSchema :one
-- OutboxSchema names the schema of the idem_outbox table the connection's
-- search_path finds, as the relay's unqualified statements find it; NULL
-- when there is none.
SELECT n.nspname::text AS schema
FROM pg_catalog.pg_class AS c
JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
WHERE c.oid = to_regclass('idem_outbox');

-- name: DeadRows :many
-- DeadRows lists the dead rows, of every consumer or of @consumer, by id:
-- the order the relay published them in, and would publish them again in.
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
-- LockDeadRows locks, for a revive in the same transaction, the dead rows
-- whose id is in @ids, or every dead row (of @consumer, when not '') when
-- @all_rows is true. The lock keeps another revive from reviving them at
-- the same time.
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
-- DeadBefore finds, for each dead row in @ids that has an ordering key, the
-- dead rows of the same key with a lower id that are not in @ids. Reviving
-- the later row alone would let the ordered relay publish it before them:
-- a dead row does not hold back its key, and the revived one becomes the
-- key's head.
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
-- ReviveRows makes the dead rows in @ids due again, as if just written: no
-- dead_at, no attempts (the relay's next claim is attempt 1), no backoff
-- (available_at NULL: due from created_at, so the unordered relay takes
-- them before rows written after them), no claim. id is kept, so the
-- ordered relay publishes them in the order they were written, ahead of
-- the later rows of their key. last_error is kept until the next publish
-- fails or the row is published (deleted).
UPDATE idem_outbox
SET dead_at      = NULL,
    attempts     = NULL,
    available_at = NULL,
    claim_token  = NULL,
    lease_until  = NULL
WHERE id = ANY (@ids::bigint[])
  AND dead_at IS NOT NULL;
