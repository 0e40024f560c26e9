-- idemgen:outbox
-- What the relay's claim and the outbox INSERT write to the WAL, made
-- smaller (the claim's row lock and the delete on publish stay as they are):
--
-- - The claim's update of a row is a HOT update in the row's page, and the
--   WAL record of such an update logs only the bytes between the first and
--   the last byte the update changed. Under 00002 those were attempts, the
--   NULL last_error, a 16-byte uuid claim_token and lease_until, 32 bytes
--   with the padding. Here claim_token is a bigint (the relay draws a random
--   one, never 0, per claim) and the three columns the claim sets are the
--   last of the row, claim_token, lease_until, attempts, nothing between
--   them: 20 bytes, and a claim writes 12 bytes less a row.
-- - An outgoing message without an ordering key or headers stores NULL in
--   ordering_key and headers rather than '' and '{}': '' and '{}' took 6
--   bytes a row, 8 with the alignment of what follows. Both forms mean the
--   same (the relay's statements read NULL as '' and '{}'), so a writer of
--   an older release that stores '' and '{}' is still read right.
-- - available_at is NULL until a failed publish sets a backoff: the row is
--   due from created_at on, which it repeated (8 bytes a row). The relay's
--   index of due rows is on coalesce(available_at, created_at), the same
--   order as before; a writer that still sets available_at is read right.
-- - attempts is NULL until the first claim rather than 0: the 4 bytes of a
--   0 made the INSERT's WAL record of each row 8 bytes longer once aligned,
--   and the claim, which sets it, logs the same bytes either way. A writer
--   of an older release that stores 0 is read right.
--
-- The columns cannot be reordered in place: claim_token, lease_until and
-- attempts are dropped and added again at the end of the row (a dropped
-- column stays in the table's catalog as a NULL no row stores). As 00002
-- does, what waits is copied aside and back with its ids, so the table, its
-- grants and its identity sequence stay; the table is locked meanwhile. A
-- row a relay held keeps its lease (no other relay takes it before the
-- lease ends) but loses its token: the relay that held it cannot mark it,
-- and it is claimed again once the lease is over (at least once holds). An
-- index of your own on claim_token, lease_until or attempts goes with the
-- column: create it again in a migration after this one. A
-- relay of an older release fails on the bigint claim_token instead of
-- publishing, and a relay of this release refuses a table without this
-- migration.
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

-- claim_token and lease_until: the relay that holds the row, and until when;
-- attempts counts claims, NULL before the first (a 0 would be 4 bytes in
-- every row written, 8 with the WAL record's alignment). The claim sets the
-- three, the last of the row.
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

-- The relay's claim: due rows that are not dead, oldest first (the order of
-- 00002's index on (available_at, id)).
CREATE INDEX idem_outbox_due ON idem_outbox ((coalesce(available_at, created_at)), id)
    WHERE dead_at IS NULL;

-- +goose Down
-- Back to the layout of 00002: a uuid claim_token (the rows a relay holds
-- keep their lease, not their token), '' and '{}' for no ordering key and no
-- headers, available_at always set, attempts 0 before the first claim.
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
