-- +goose Up
CREATE TABLE orders (id text PRIMARY KEY, customer text NOT NULL, amount bigint NOT NULL);
CREATE TABLE orders_tx (id text PRIMARY KEY, customer text NOT NULL, amount bigint NOT NULL);
-- +goose Down
DROP TABLE orders_tx;
DROP TABLE orders;
