-- idemgen:outbox
-- A smaller row and claim: claim_token a bigint at the row's end, NULL for defaults (docs/outbox.md).
-- Locks the table while it copies the waiting rows back; a held row keeps its lease, not its token.
-- +goose Up
LOCK TABLE idem_outbox IN ACCESS EXCLUSIVE MODE;

CREATE TEMPORARY TABLE idem_outbox_waiting AS
    SELECT id, message_id, consumer, key, destination, ordering_key, headers, payload,
           created_at, available_at, attempts, last_error, lease_until, dead_at
    FROM idem_outbox;

-- TRUNCATE keeps the identity sequence where it is (no RESTART IDENTITY).
TRUNCATE idem_outbox;

ALTER TABLE idem_outbox DROP COLUMN claim_token;

ALTER TABLE idem_outbox DROP COLUMN lease_until;

ALTER TABLE idem_outbox DROP COLUMN attempts;

-- The relay's claim sets these three, the last of the row; attempts is NULL before it.
ALTER TABLE idem_outbox ADD COLUMN claim_token bigint;

ALTER TABLE idem_outbox ADD COLUMN lease_until timestamptz;

ALTER TABLE idem_outbox ADD COLUMN attempts integer;

-- NULL: no ordering key, no headers ('' and '{}' mean the same).
ALTER TABLE idem_outbox ALTER COLUMN ordering_key DROP NOT NULL;

ALTER TABLE idem_outbox ALTER COLUMN ordering_key DROP DEFAULT;

ALTER TABLE idem_outbox ALTER COLUMN headers DROP NOT NULL;

ALTER TABLE idem_outbox ALTER COLUMN headers DROP DEFAULT;

-- NULL: due from created_at on (no backoff).
ALTER TABLE idem_outbox ALTER COLUMN available_at DROP NOT NULL;

ALTER TABLE idem_outbox ALTER COLUMN available_at DROP DEFAULT;

DROP INDEX idem_outbox_due;

INSERT INTO idem_outbox (id, message_id, consumer, key, destination, ordering_key, headers, payload,
                         created_at, available_at, last_error, dead_at, lease_until, attempts)
OVERRIDING SYSTEM VALUE
SELECT id, message_id, consumer, key, destination, NULLIF(ordering_key, ''), NULLIF(headers, '{}'), payload,
       created_at, NULLIF(available_at, created_at), last_error, dead_at, lease_until, NULLIF(attempts, 0)
FROM idem_outbox_waiting
ORDER BY id;

DROP TABLE idem_outbox_waiting;

-- The relay's claim: due rows that are not dead, oldest first.
CREATE INDEX idem_outbox_due ON idem_outbox ((coalesce(available_at, created_at)), id)
    WHERE dead_at IS NULL;

-- +goose Down
-- Back to the layout of 00002; a held row keeps its lease, not its token.
LOCK TABLE idem_outbox IN ACCESS EXCLUSIVE MODE;

CREATE TEMPORARY TABLE idem_outbox_waiting AS
    SELECT id, message_id, consumer, key, destination, ordering_key, headers, payload,
           created_at, available_at, attempts, last_error, lease_until, dead_at
    FROM idem_outbox;

TRUNCATE idem_outbox;

ALTER TABLE idem_outbox DROP COLUMN claim_token;

ALTER TABLE idem_outbox ADD COLUMN claim_token uuid;

ALTER TABLE idem_outbox ALTER COLUMN ordering_key SET DEFAULT '';

ALTER TABLE idem_outbox ALTER COLUMN ordering_key SET NOT NULL;

ALTER TABLE idem_outbox ALTER COLUMN headers SET DEFAULT '{}';

ALTER TABLE idem_outbox ALTER COLUMN headers SET NOT NULL;

ALTER TABLE idem_outbox ALTER COLUMN available_at SET DEFAULT now();

ALTER TABLE idem_outbox ALTER COLUMN available_at SET NOT NULL;

ALTER TABLE idem_outbox ALTER COLUMN attempts SET DEFAULT 0;

ALTER TABLE idem_outbox ALTER COLUMN attempts SET NOT NULL;

DROP INDEX idem_outbox_due;

INSERT INTO idem_outbox (id, message_id, consumer, key, destination, ordering_key, headers, payload,
                         created_at, available_at, attempts, last_error, lease_until, dead_at)
OVERRIDING SYSTEM VALUE
SELECT id, message_id, consumer, key, destination, coalesce(ordering_key, ''), coalesce(headers, '{}'), payload,
       created_at, coalesce(available_at, created_at), coalesce(attempts, 0), last_error, lease_until, dead_at
FROM idem_outbox_waiting
ORDER BY id;

DROP TABLE idem_outbox_waiting;

CREATE INDEX idem_outbox_due ON idem_outbox (available_at, id)
    WHERE dead_at IS NULL;
