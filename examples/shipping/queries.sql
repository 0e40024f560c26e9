-- The shipping service's business SQL, compiled by sqlc into package
-- queries (sqlc.yaml). The handlers run it on the pgx.Tx idemgen's wrapper
-- gives them: queries.New(tx).

-- name: CreateShipment :one
INSERT INTO shipments (order_id, address, parcels)
VALUES ($1, $2, $3)
RETURNING id, created_at;

-- name: AddParcel :exec
INSERT INTO parcels (shipment_id, seq, weight_g)
VALUES ($1, $2, $3);

-- name: ShipmentByOrder :one
SELECT id, order_id, address, parcels, created_at
FROM shipments
WHERE order_id = $1;

-- name: RecordDelivery :execrows
INSERT INTO deliveries (shipment_id, carrier_ref, delivered_at)
SELECT s.id, sqlc.arg(carrier_ref), sqlc.arg(delivered_at)
FROM shipments s
WHERE s.order_id = sqlc.arg(order_id);

-- name: CountShipments :one
SELECT count(*) FROM shipments WHERE order_id = $1;

-- name: CountDeliveries :one
SELECT count(*)
FROM deliveries d
JOIN shipments s ON s.id = d.shipment_id
WHERE s.order_id = $1;
