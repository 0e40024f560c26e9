package consume

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/idemgen/idemgen/idem"
)

// checkTimeout bounds the check of the handler's tables at start.
const checkTimeout = 5 * time.Second

// checked is a handler that can verify its tables: every generated wrapper
// (its Check).
type checked interface {
	Check(ctx context.Context) error
}

// CheckTables runs the Check of the handler, which every generated wrapper
// has. It returns Check's error when a table, key column or unique
// constraint is missing or differs (idem.ErrNotMigrated). So a consumer
// that would fail every delivery stops before it takes one, naming the
// migration to apply. Any other error (the database unreachable for now) is
// logged and not returned: the deliveries retry as usual.
func (c *Core[M]) CheckTables(ctx context.Context, log *slog.Logger) error {
	h, ok := c.handler.(checked)
	if !ok {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	err := h.Check(cctx)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, idem.ErrNotMigrated):
		return err
	}
	if ctx.Err() == nil {
		log.Warn(c.system+" consumer: cannot check the handler's tables; consuming anyway", "err", err)
	}
	return nil
}
