-- +goose Up
CREATE TABLE notifications (
    id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    message_id text        NOT NULL,
    order_id   text        NOT NULL UNIQUE,
    account_id text        NOT NULL,
    text       text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE notifications;
