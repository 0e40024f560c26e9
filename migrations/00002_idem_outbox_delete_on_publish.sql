-- idemgen:outbox
-- The relay deletes a row once published: the table keeps only what waits (docs/outbox.md).
-- Locks the table while it copies the waiting rows back; published rows are not kept.
-- +goose Up
LOCK TABLE idem_outbox IN ACCESS EXCLUSIVE MODE;

CREATE TEMPORARY TABLE idem_outbox_waiting AS
    SELECT id, message_id, consumer, key, destination, ordering_key, headers, payload,
           created_at, available_at, attempts, last_error, claim_token, lease_until, dead_at
    FROM idem_outbox
    WHERE published_at IS NULL;

-- TRUNCATE keeps the identity sequence where it is (no RESTART IDENTITY).
TRUNCATE idem_outbox;

DROP INDEX idem_outbox_due;
DROP INDEX idem_outbox_ordered;
DROP INDEX idem_outbox_published;

ALTER TABLE idem_outbox DROP CONSTRAINT idem_outbox_pkey;

ALTER TABLE idem_outbox DROP CONSTRAINT idem_outbox_message_id_key;

ALTER TABLE idem_outbox DROP COLUMN published_at;

ALTER TABLE idem_outbox SET (fillfactor = 40);

INSERT INTO idem_outbox (id, message_id, consumer, key, destination, ordering_key, headers, payload,
                         created_at, available_at, attempts, last_error, claim_token, lease_until, dead_at)
OVERRIDING SYSTEM VALUE
SELECT id, message_id, consumer, key, destination, ordering_key, headers, payload,
       created_at, available_at, attempts, last_error, claim_token, lease_until, dead_at
FROM idem_outbox_waiting
ORDER BY id;

ALTER TABLE idem_outbox ADD CONSTRAINT idem_outbox_pkey PRIMARY KEY (message_id);

DROP TABLE idem_outbox_waiting;

-- The relay's claim: due rows that are not dead, oldest first.
CREATE INDEX idem_outbox_due ON idem_outbox (available_at, id)
    WHERE dead_at IS NULL;

-- Ordered mode: the head of each ordering key, the earliest row not dead.
CREATE INDEX idem_outbox_ordered ON idem_outbox (ordering_key, id)
    WHERE dead_at IS NULL AND ordering_key <> '';

-- +goose Down
-- Back to the layout of 00001: the rows that wait are kept as they are, not
-- published (published_at NULL); the rows deleted on publish are gone.
LOCK TABLE idem_outbox IN ACCESS EXCLUSIVE MODE;

DROP INDEX idem_outbox_due;
DROP INDEX idem_outbox_ordered;

ALTER TABLE idem_outbox DROP CONSTRAINT idem_outbox_pkey;

ALTER TABLE idem_outbox ADD CONSTRAINT idem_outbox_pkey PRIMARY KEY (id);

ALTER TABLE idem_outbox ADD CONSTRAINT idem_outbox_message_id_key UNIQUE (message_id);

ALTER TABLE idem_outbox ADD COLUMN published_at timestamptz;

ALTER TABLE idem_outbox RESET (fillfactor);

CREATE INDEX idem_outbox_due ON idem_outbox (available_at, id)
    WHERE published_at IS NULL AND dead_at IS NULL;

CREATE INDEX idem_outbox_ordered ON idem_outbox (ordering_key, id)
    WHERE published_at IS NULL AND dead_at IS NULL AND ordering_key <> '';

CREATE INDEX idem_outbox_published ON idem_outbox (published_at)
    WHERE published_at IS NOT NULL;
