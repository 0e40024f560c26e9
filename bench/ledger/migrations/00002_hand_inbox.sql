-- The inbox of the hand-written consumer (HandWritten): the same shape as the
-- table idemgen generates for bench.ledger, so that both pay for the same
-- rows and indexes.

-- +goose Up
CREATE TABLE hand_inbox (
    key_message_id text        NOT NULL,
    fingerprint    bytea       NOT NULL,
    status         text        NOT NULL DEFAULT 'running',
    result         jsonb,
    attempts       integer     NOT NULL DEFAULT 1,
    created_at     timestamptz NOT NULL DEFAULT now(),
    completed_at   timestamptz,
    CONSTRAINT hand_inbox_pkey PRIMARY KEY (key_message_id),
    CONSTRAINT hand_inbox_status_check CHECK (status IN ('running', 'done'))
);

CREATE INDEX hand_inbox_created_at_idx ON hand_inbox (created_at);

-- +goose Down
DROP TABLE hand_inbox;
