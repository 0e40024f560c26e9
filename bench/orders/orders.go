// Package orders is the consumer of the benchmark's entity part (go run
// ./bench -parts entity): one business INSERT per message, delivered as a
// bare transaction, through a mode=entity wrapper whose row is the marker,
// and through a mode=tx wrapper with an inbox table.
package orders

//go:generate go run github.com/idemgen/idemgen/cmd/idemgen -migrations migrations .

import (
	"context"
	"embed"
	"io/fs"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Order is the benchmark's message.
type Order struct {
	OrderID  string `json:"order_id"`
	Customer string `json:"customer"`
	Amount   int64  `json:"amount"`
}

// PlaceEntity inserts the order; the row is the message's marker.
//
//idem:handler consumer=bench.order-entity key=OrderID mode=entity table=orders columns=id
func PlaceEntity(ctx context.Context, tx pgx.Tx, msg Order) error {
	_, err := tx.Exec(ctx, insertOrder, msg.OrderID, msg.Customer, msg.Amount)
	return err
}

// PlaceTx inserts the same order into orders_tx, in one transaction with the
// inbox row of its key.
//
//idem:handler consumer=bench.order-tx key=OrderID
func PlaceTx(ctx context.Context, tx pgx.Tx, msg Order) error {
	_, err := tx.Exec(ctx, insertOrderTx, msg.OrderID, msg.Customer, msg.Amount)
	return err
}

const (
	insertOrder   = `INSERT INTO orders (id, customer, amount) VALUES ($1, $2, $3)`
	insertOrderTx = `INSERT INTO orders_tx (id, customer, amount) VALUES ($1, $2, $3)`
)

// Bare is the business transaction without deduplication, BEGIN; INSERT;
// COMMIT, sent in one round trip (a pgx pipeline).
func Bare(ctx context.Context, pool *pgxpool.Pool, msg Order) error {
	b := &pgx.Batch{}
	b.Queue("begin")
	b.Queue(insertOrder, msg.OrderID, msg.Customer, msg.Amount)
	b.Queue("commit")
	return pool.SendBatch(ctx, b).Close()
}

//go:embed migrations/*.sql
var migrations embed.FS

// Migrations returns the goose migrations: the two tables, the fingerprint
// column and the inbox of PlaceTx.
func Migrations() fs.FS {
	sub, err := fs.Sub(migrations, "migrations")
	if err != nil {
		panic(err)
	}
	return sub
}
