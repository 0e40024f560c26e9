package idem

import (
	"context"
	"fmt"
	"time"

	"github.com/idemgen/idemgen/idem/internal/obs"
)

// Maintenance describes one consumer's table to a [Janitor]: which table it
// purges, after how long, and for a mode=external consumer the lease after
// which its sweeper resets a claim. [Inbox.Maintenance] and
// [ExternalInbox.Maintenance] return it, and so do the Maintenance methods
// of the generated wrappers; its zero value is not usable.
type Maintenance struct {
	// Consumer is the consumer's name.
	Consumer string
	// Table is the consumer's table, as its statements write it.
	Table string
	// External is true for a mode=external consumer, whose table has
	// claims with leases that the sweeper resets.
	External bool
	// Retain is how long rows are kept: the directive's retain=.
	Retain time.Duration
	// Lease is the lease of a mode=external consumer's claims (lease= or
	// WithLease); 0 for mode=tx.
	Lease time.Duration

	db    DB
	purge string // the table's purge: $1 the retention in seconds, $2 the batch size
	sweep string // mode=external: the table's sweep, $1 the batch size
}

// kind is the idem.kind of the table's purged rows.
func (m Maintenance) kind() string {
	if m.External {
		return obs.KindExternal
	}
	return obs.KindInbox
}

// Check reports whether the consumer's table is there with the columns its
// statements use: it prepares (never runs) the table's purge and, for
// mode=external, sweep statements. A missing table is SQLSTATE 42P01, a
// missing column 42703. The broker adapters' consumers call it when they
// start, so that a worker without its migrations stops at once instead of
// failing every delivery.
func (m Maintenance) Check(ctx context.Context) error {
	if m.db == nil {
		return fmt.Errorf("idem: consumer %s: a Maintenance that no inbox made", m.Consumer)
	}
	c, err := m.db.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("idem: consumer %s: check the table %s: acquire a connection: %w", m.Consumer, m.Table, err)
	}
	defer c.Release()
	for _, sql := range []string{m.purge, m.sweep} {
		if sql == "" {
			continue
		}
		if _, err := c.Conn().PgConn().Prepare(ctx, "", sql, nil); err != nil {
			return fmt.Errorf("idem: consumer %s: the table %s: %w (were its migrations applied?)", m.Consumer, m.Table, err)
		}
	}
	return nil
}

// Maintenance returns what a [Janitor] needs to purge the inbox's table.
func (in *Inbox[M, R]) Maintenance() Maintenance {
	return Maintenance{
		Consumer: in.table.Consumer,
		Table:    in.table.Name,
		Retain:   in.table.Retain,
		db:       in.db,
		purge:    in.sql.purge,
	}
}

// Maintenance returns what a [Janitor] needs to purge the table and sweep
// its expired claims.
func (x *ExternalInbox[M, R]) Maintenance() Maintenance {
	return Maintenance{
		Consumer: x.table.Consumer,
		Table:    x.table.Name,
		External: true,
		Retain:   x.table.Retain,
		Lease:    x.lease,
		db:       x.db,
		purge:    x.sql.purge,
		sweep:    x.sql.sweep,
	}
}

// Maintained is a consumer whose table a [Janitor] keeps: the generated
// wrappers, [Inbox] and [ExternalInbox] implement it.
type Maintained interface {
	Maintenance() Maintenance
}

var (
	_ Maintained = (*Inbox[struct{}, None])(nil)
	_ Maintained = (*ExternalInbox[struct{}, None])(nil)
)
