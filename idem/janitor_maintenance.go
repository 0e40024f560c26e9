package idem

import (
	"time"

	"github.com/idemgen/idemgen/idem/internal/link"
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

	t link.Tables // the database and the table's statements
}

// kind is the idem.kind of the table's purged rows.
func (m Maintenance) kind() string {
	if m.External {
		return obs.KindExternal
	}
	return obs.KindInbox
}

// Maintenance returns what a [Janitor] needs to purge the inbox's table.
func (in *Inbox[M, R]) Maintenance() Maintenance {
	m := Maintenance{
		Consumer: in.table.Consumer,
		Table:    in.table.Name,
		Retain:   in.table.Retain,
	}
	*link.MaintenanceTables(&m) = link.Tables{DB: in.db, Purge: in.sql.purge}
	return m
}

// Maintenance returns what a [Janitor] needs to purge the table and sweep
// its expired claims.
func (x *ExternalInbox[M, R]) Maintenance() Maintenance {
	m := Maintenance{
		Consumer: x.table.Consumer,
		Table:    x.table.Name,
		External: true,
		Retain:   x.table.Retain,
		Lease:    x.lease,
	}
	*link.MaintenanceTables(&m) = link.Tables{DB: x.db, Purge: x.sql.purge, Sweep: x.sql.sweep}
	return m
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
