-- +goose Up
CREATE TABLE payments (
    id       text   PRIMARY KEY,
    event    text   NOT NULL,
    amount   bigint NOT NULL CHECK (amount > 0),
    refunded bigint NOT NULL DEFAULT 0 CHECK (refunded BETWEEN 0 AND amount)
);

CREATE TABLE refunds (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    client     text   NOT NULL,
    payment    text   NOT NULL REFERENCES payments,
    amount     bigint NOT NULL CHECK (amount > 0),
    created_at timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE refunds;
DROP TABLE payments;
