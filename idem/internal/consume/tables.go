package consume

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemgen/idemgen/idem"
)

// checkTimeout bounds the check of the handler's tables at start.
const checkTimeout = 5 * time.Second

// CheckTables checks the tables of h when it is an idem.Maintained (every
// generated wrapper, idemimpl.Inbox, idemimpl.ExternalInbox) and returns an error
// when a table or one of its columns is missing (SQLSTATE 42P01, 42703): a
// consumer that would fail every delivery stops before it takes one. Any
// other error (the database unreachable for now) is logged and not
// returned: the deliveries retry as usual.
func (c *Core[M]) CheckTables(ctx context.Context, log *slog.Logger) error {
	m, ok := c.handler.(idem.Maintained)
	if !ok {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	err := m.Maintenance().Check(cctx)
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &pgErr) && (pgErr.Code == pgerrcode.UndefinedTable || pgErr.Code == pgerrcode.UndefinedColumn):
		return err
	}
	if ctx.Err() == nil {
		log.Warn(c.system+" consumer: cannot check the handler's table; consuming anyway", "err", err)
	}
	return nil
}
