-- +goose Up
CREATE TABLE readings (
    reading_id text        NOT NULL PRIMARY KEY,
    device_id  text        NOT NULL,
    taken_at   timestamptz NOT NULL,
    value      double precision NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE readings;
