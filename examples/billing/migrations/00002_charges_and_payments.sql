-- +goose Up
CREATE TABLE charges (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    order_id     text   NOT NULL UNIQUE,
    account_id   text   NOT NULL REFERENCES accounts,
    amount_cents bigint NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE payments (
    provider     text   NOT NULL,
    payment_id   text   NOT NULL,
    account_id   text   NOT NULL REFERENCES accounts,
    amount_cents bigint NOT NULL,
    PRIMARY KEY (provider, payment_id)
);

-- +goose Down
DROP TABLE payments;
DROP TABLE charges;
