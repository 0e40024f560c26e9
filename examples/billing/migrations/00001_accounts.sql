-- +goose Up
CREATE TABLE accounts (
    id            text   PRIMARY KEY,
    owner         text   NOT NULL,
    balance_cents bigint NOT NULL DEFAULT 0
);

-- +goose Down
DROP TABLE accounts;
