// Package store is another package of the module, whose functions the
// handlers of package app call.
package store

import (
	"context"
	"net/http"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"example.com/vet/queries"
)

// DB is the process's pool, opened at start-up.
var DB *pgxpool.Pool

// Save writes through the handle its caller gives it: tx, or not.
func Save(ctx context.Context, db queries.DBTX, id string) error {
	_, err := db.Exec(ctx, `INSERT INTO orders (id) VALUES ($1)`, id)
	return err
}

// Audit writes through the process's pool, whatever its caller holds.
func Audit(ctx context.Context, id string) error {
	return insertAudit(ctx, id)
}

func insertAudit(ctx context.Context, id string) error {
	_, err := DB.Exec(ctx, `INSERT INTO audit (id) VALUES ($1)`, id)
	return err
}

// Repo keeps a pool of its own.
type Repo struct {
	Pool *pgxpool.Pool
}

// Save writes through the Repo's pool.
func (r *Repo) Save(ctx context.Context, id string) error {
	_, err := r.Pool.Exec(ctx, `INSERT INTO orders (id) VALUES ($1)`, id)
	return err
}

// Notify calls a webhook.
func Notify(ctx context.Context, id string) error {
	resp, err := http.Post("https://hooks.example.com/orders", "text/plain", strings.NewReader(id))
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

// Allowed writes an audit row through the pool on purpose.
func Allowed(ctx context.Context, id string) error {
	//idem:allow outside-tx the audit row must outlive a rollback of the handler
	_, err := DB.Exec(ctx, `INSERT INTO audit (id) VALUES ($1)`, id)
	return err
}
