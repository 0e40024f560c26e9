-- The queries of relay.Relay over idem_outbox (migrations/), compiled by sqlc
-- into generated/outboxdb. Every statement is one short transaction of its
-- own; none is held open while a message is on its way to a broker.

-- name: Claim :many
-- Claim takes up to batch_size due rows that are not dead nor held by a live
-- lease, oldest first, skipping rows another relay is
-- claiming at this moment. Each gets the claim token, a lease and one more
-- attempt. The locking subquery's conditions are checked again on the row's
-- latest version once it is locked, so a row another relay claimed or
-- published in the meantime is skipped, never claimed twice. The token is a
-- bigint, and the three columns set are the last of the row, adjacent, so
-- that the WAL record of this HOT update, which logs the bytes between the
-- first and the last changed one, holds 20 of them (migrations/00003).
-- attempts is NULL until the first claim, and available_at until a failed
-- publish sets a backoff, the row due from created_at on: the conditions
-- and the order name the expression of the index idem_outbox_due.
UPDATE idem_outbox AS o
SET claim_token = @claim_token::bigint,
    lease_until = now() + make_interval(secs => @lease_seconds::float8),
    attempts    = coalesce(o.attempts, 0) + 1
WHERE o.message_id IN (
    SELECT c.message_id
    FROM idem_outbox AS c
    WHERE c.dead_at IS NULL
      AND coalesce(c.available_at, c.created_at) <= now()
      AND (c.lease_until IS NULL OR c.lease_until <= now())
    ORDER BY coalesce(c.available_at, c.created_at), c.id
    LIMIT @batch_size
    FOR UPDATE SKIP LOCKED
)
RETURNING o.id, o.message_id, o.destination, coalesce(o.ordering_key, '')::text AS ordering_key,
          coalesce(o.headers, '{}')::jsonb AS headers, o.payload, coalesce(o.attempts, 0)::integer AS attempts;

-- name: ClaimOrdered :many
-- ClaimOrdered is Claim for the ordered mode: of the rows that have an
-- ordering key it takes only each key's head, the row with the lowest id
-- among the key's rows that are not dead (a published row is deleted), and
-- only when it is due and no other relay holds it under a live lease. A head
-- that waits for its backoff therefore holds back its key, and only its key;
-- a dead row no longer does. Rows without an ordering key are claimed as by
-- Claim. Rows are taken by ascending id.
UPDATE idem_outbox AS o
SET claim_token = @claim_token::bigint,
    lease_until = now() + make_interval(secs => @lease_seconds::float8),
    attempts    = coalesce(o.attempts, 0) + 1
WHERE o.message_id IN (
    SELECT c.message_id
    FROM idem_outbox AS c
    WHERE c.dead_at IS NULL
      AND coalesce(c.available_at, c.created_at) <= now()
      AND (c.lease_until IS NULL OR c.lease_until <= now())
      AND (coalesce(c.ordering_key, '') = '' OR NOT EXISTS (
          SELECT 1
          FROM idem_outbox AS p
          WHERE p.ordering_key = c.ordering_key
            AND p.ordering_key <> ''
            AND p.id < c.id
            AND p.dead_at IS NULL
      ))
    ORDER BY c.id
    LIMIT @batch_size
    FOR UPDATE SKIP LOCKED
)
RETURNING o.id, o.message_id, o.destination, coalesce(o.ordering_key, '')::text AS ordering_key,
          coalesce(o.headers, '{}')::jsonb AS headers, o.payload, coalesce(o.attempts, 0)::integer AS attempts;

-- name: ExtendLease :many
-- ExtendLease renews the lease of the rows the token still holds and returns
-- their message ids; a row missing from the result was lost to another
-- relay. The statements after the claim name rows by their message id, the
-- primary key, sent as text (a type pgx encodes in every QueryExecMode) and
-- cast.
UPDATE idem_outbox
SET lease_until = now() + make_interval(secs => @lease_seconds::float8)
WHERE message_id = ANY ((@message_ids::text[])::uuid[])
  AND claim_token = @claim_token::bigint
RETURNING message_id;

-- name: MarkPublished :execrows
-- MarkPublished records the broker's confirmation of the rows the token still
-- holds by deleting them: a published row is not kept. A delete writes one
-- small WAL record a row and nothing in the indexes, where an update that
-- set a published time rewrote the row and added an entry to its indexes
-- (migrations/00002_idem_outbox_delete_on_publish.sql). A row whose claim
-- was lost is left to the relay that holds it now.
DELETE FROM idem_outbox
WHERE message_id = ANY ((@message_ids::text[])::uuid[])
  AND claim_token = @claim_token::bigint;

-- name: RecordFailure :execrows
-- RecordFailure records a failed publish of the rows the token still holds,
-- one error text per message id: the error is kept in last_error, the row
-- becomes due again after an exponential backoff (backoff_base_seconds
-- doubled per attempt, at most backoff_max_seconds), and a row that has had
-- max_attempts attempts is dead-lettered: kept, visible, never claimed
-- again.
UPDATE idem_outbox AS o
SET last_error   = f.error,
    available_at = now() + make_interval(secs => least(f.base * power(2, least(o.attempts - 1, 62)), f.max)),
    dead_at      = CASE WHEN o.attempts >= f.max_attempts THEN now() END,
    claim_token  = NULL,
    lease_until  = NULL
FROM (SELECT unnest(@message_ids::text[])::uuid AS message_id,
             unnest(@errors::text[]) AS error,
             @backoff_base_seconds::float8 AS base,
             @backoff_max_seconds::float8 AS max,
             @max_attempts::integer AS max_attempts) AS f
WHERE o.message_id = f.message_id
  AND o.claim_token = @claim_token::bigint;

-- name: Release :execrows
-- Release gives the rows the token still holds back, due at once, with the
-- attempt of the claim taken back: the relay is stopping and did not get to
-- (or through) the publish.
UPDATE idem_outbox
SET claim_token = NULL,
    lease_until = NULL,
    attempts    = nullif(attempts - 1, 0)
WHERE message_id = ANY ((@message_ids::text[])::uuid[])
  AND claim_token = @claim_token::bigint;

-- name: ReleaseClaims :execrows
-- ReleaseClaims gives back the rows held by any of the tokens, due at once,
-- with the claim's attempt taken back. The tokens are of claims whose answer
-- the relay never got: the connection broke after the claim was sent, as
-- when the primary fails over. The relay does not know which rows they took,
-- if any, and without it those rows would wait for their lease to lapse. No
-- index holds the token: the statement reads the outbox, which holds only
-- what waits, and runs only after such a failure.
UPDATE idem_outbox
SET claim_token = NULL,
    lease_until = NULL,
    attempts    = nullif(attempts - 1, 0)
WHERE claim_token = ANY ((@claim_tokens::text[])::bigint[]);

-- name: OutboxLayout :one
-- OutboxLayout names the newest outbox migration that idem_outbox lacks
-- for this release's statements, '' when it has them all: a table still
-- without 00002 has published_at, keeps its published rows, and this
-- release's claim would take them again; a table without 00003 has a uuid
-- claim_token, which this release's bigint token does not match. An absent
-- table fails with SQLSTATE 42P01, as every statement of the relay does.
SELECT (CASE
    WHEN EXISTS (
        SELECT 1
        FROM pg_catalog.pg_attribute
        WHERE attrelid = 'idem_outbox'::regclass
          AND attname = 'published_at'
          AND NOT attisdropped
    ) THEN '00002_idem_outbox_delete_on_publish'
    WHEN NOT EXISTS (
        SELECT 1
        FROM pg_catalog.pg_attribute
        WHERE attrelid = 'idem_outbox'::regclass
          AND attname = 'claim_token'
          AND atttypid = 'pg_catalog.int8'::pg_catalog.regtype
          AND NOT attisdropped
    ) THEN '00003_idem_outbox_compact_claim'
    ELSE ''
END)::text AS missing;

-- name: Backlog :one
-- Backlog reads what waits in the outbox, for the outbox gauges and
-- Relay.Backlog: the rows that are not dead (a published row is deleted)
-- and the age in seconds of the oldest of them (0 when there is none), and
-- the dead rows. Each part goes through a partial index of the outbox
-- migrations: the pending rows through idem_outbox_due (dead_at IS NULL),
-- the dead ones through idem_outbox_dead (an index-only count). The table
-- holds only what waits, so it costs what the backlog is.
SELECT p.pending,
       coalesce(extract(epoch FROM now() - p.oldest), 0)::float8 AS oldest_seconds,
       d.dead
FROM (SELECT count(*)::bigint AS pending, min(created_at) AS oldest
      FROM idem_outbox
      WHERE dead_at IS NULL) AS p,
     (SELECT count(*)::bigint AS dead
      FROM idem_outbox
      WHERE dead_at IS NOT NULL) AS d;

-- name: InsertOutbox :execrows
-- InsertOutbox writes the outgoing messages of a delivery's commit (or of a
-- batch of deliveries) as one statement for any number of rows: the
-- arguments are arrays, one element per message, zipped by the parallel
-- unnests. Each array goes as a type that pgx encodes without asking the
-- server for the parameter's type ([]string, [][]byte), and the statement
-- casts it, so that it works in every pgx.QueryExecMode (exec and
-- simple_protocol too, what PgBouncer and RDS Proxy need). ORDER BY n keeps
-- the order of the Publish calls in the rows' ids, which the relay's ordered
-- mode follows. A message id already in the table (a rerun after the inbox
-- row was purged, while the first run's row waits or is dead) writes no
-- second row. An empty ordering key and empty headers are stored as NULL,
-- 8 bytes less a row with the alignment (migrations/00003); the relay's
-- claims read them back as '' and '{}'. NOT EXISTS rather than ON CONFLICT: a speculative insertion
-- writes one more WAL record a row (its confirmation), some 48 bytes. Two
-- transactions cannot write one message id at the same moment, as the
-- inbox's row of the incoming key serialises them; were they to, the
-- primary key would fail the second one's commit, never write a second
-- row.
INSERT INTO idem_outbox (message_id, consumer, key, destination, ordering_key, headers, payload)
SELECT m.message_id, @consumer::text, m.key, m.destination, NULLIF(m.ordering_key, ''), NULLIF(m.headers, '{}'::jsonb), m.payload
FROM (
    SELECT unnest(@keys::text[]) AS key,
           unnest(@message_ids::text[])::uuid AS message_id,
           unnest(@destinations::text[]) AS destination,
           unnest(@ordering_keys::text[]) AS ordering_key,
           unnest(@headers::text[])::jsonb AS headers,
           unnest(@payloads::bytea[]) AS payload,
           generate_series(1, cardinality(@keys::text[])) AS n
) AS m
WHERE NOT EXISTS (SELECT 1 FROM idem_outbox AS o WHERE o.message_id = m.message_id)
ORDER BY m.n;
