-- The shipping service's own tables, written by hand. sqlc compiles
-- queries.sql against this file (sqlc.yaml); idemgen's inbox and outbox
-- migrations follow it in this folder.

-- +goose Up
CREATE TABLE shipments (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    order_id   text        NOT NULL UNIQUE,
    address    text        NOT NULL,
    parcels    integer     NOT NULL CHECK (parcels > 0),
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE parcels (
    shipment_id bigint  NOT NULL REFERENCES shipments (id),
    seq         integer NOT NULL,
    weight_g    integer NOT NULL CHECK (weight_g > 0),
    PRIMARY KEY (shipment_id, seq)
);

CREATE TABLE deliveries (
    shipment_id  bigint      NOT NULL REFERENCES shipments (id),
    carrier_ref  text        NOT NULL,
    delivered_at timestamptz NOT NULL,
    PRIMARY KEY (shipment_id)
);

-- +goose Down
DROP TABLE deliveries;
DROP TABLE parcels;
DROP TABLE shipments;
