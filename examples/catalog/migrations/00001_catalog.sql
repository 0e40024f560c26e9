-- +goose Up
CREATE TABLE prices (
    sku        text        PRIMARY KEY,
    cents      bigint      NOT NULL CHECK (cents >= 0),
    currency   text        NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE orders (
    id          text        PRIMARY KEY,
    customer    text        NOT NULL,
    sku         text        NOT NULL REFERENCES prices,
    quantity    bigint      NOT NULL CHECK (quantity > 0),
    total_cents bigint      NOT NULL,
    coupon      text        UNIQUE,
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE orders;
DROP TABLE prices;
