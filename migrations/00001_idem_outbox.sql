-- idemgen:outbox
-- The transactional outbox: handlers write outgoing messages here, in their own transaction.
-- A relay (idem/relay) publishes them. This chain changes by new migrations, never by edits.
-- +goose Up
CREATE TABLE idem_outbox (
    -- id orders the rows: the relay's ordered mode publishes the rows of one
    -- ordering key by ascending id.
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- message_id is the stable id the broker carries as its message id.
    message_id   uuid        NOT NULL UNIQUE,
    -- consumer and key name the incoming message whose handler wrote the row.
    consumer     text        NOT NULL,
    key          text        NOT NULL,
    destination  text        NOT NULL,
    -- ordering_key is '' when the message has none.
    ordering_key text        NOT NULL DEFAULT '',
    headers      jsonb       NOT NULL DEFAULT '{}',
    payload      bytea       NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    -- available_at: not published before then (the backoff after a failure).
    available_at timestamptz NOT NULL DEFAULT now(),
    published_at timestamptz,
    -- attempts counts claims: a relay that dies while publishing counts too.
    attempts     integer     NOT NULL DEFAULT 0,
    last_error   text,
    -- claim_token and lease_until: the relay that holds the row, and until
    -- when; the row is marked published only while the token holds.
    claim_token  uuid,
    lease_until  timestamptz,
    -- dead_at: dead-lettered after too many attempts; kept, never published.
    dead_at      timestamptz
);

-- The relay's claim: due rows that are neither published nor dead, oldest
-- first.
CREATE INDEX idem_outbox_due ON idem_outbox (available_at, id)
    WHERE published_at IS NULL AND dead_at IS NULL;

-- Ordered mode: the head of each ordering key, the earliest pending row.
CREATE INDEX idem_outbox_ordered ON idem_outbox (ordering_key, id)
    WHERE published_at IS NULL AND dead_at IS NULL AND ordering_key <> '';

-- Purge: published rows by age.
CREATE INDEX idem_outbox_published ON idem_outbox (published_at)
    WHERE published_at IS NOT NULL;

-- The audit and the metrics: dead rows.
CREATE INDEX idem_outbox_dead ON idem_outbox (dead_at)
    WHERE dead_at IS NOT NULL;

-- +goose Down
DROP TABLE idem_outbox;
