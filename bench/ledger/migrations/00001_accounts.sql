-- +goose Up
CREATE TABLE accounts (
    id      bigint PRIMARY KEY,
    balance bigint NOT NULL DEFAULT 0
);

-- +goose Down
DROP TABLE accounts;
