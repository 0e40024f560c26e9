// Package queries is shaped as sqlc writes its Go code: a DBTX interface that
// a pool and a transaction both satisfy, New, and a method per query.
package queries

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

type DBTX interface {
	Exec(context.Context, string, ...interface{}) (pgconn.CommandTag, error)
	Query(context.Context, string, ...interface{}) (pgx.Rows, error)
	QueryRow(context.Context, string, ...interface{}) pgx.Row
}

func New(db DBTX) *Queries {
	return &Queries{db: db}
}

type Queries struct {
	db DBTX
}

func (q *Queries) WithTx(tx pgx.Tx) *Queries {
	return &Queries{
		db: tx,
	}
}

const createOrder = `INSERT INTO orders (id) VALUES ($1)`

func (q *Queries) CreateOrder(ctx context.Context, id string) error {
	_, err := q.db.Exec(ctx, createOrder, id)
	return err
}
