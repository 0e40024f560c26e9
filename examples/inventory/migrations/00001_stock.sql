-- +goose Up
CREATE TABLE stock (
    sku         text   PRIMARY KEY,
    on_hand     bigint NOT NULL,
    counted_seq bigint
);

CREATE TABLE movements (
    id     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    sku    text   NOT NULL,
    delta  bigint NOT NULL,
    reason text   NOT NULL
);

-- +goose Down
DROP TABLE movements;
DROP TABLE stock;
