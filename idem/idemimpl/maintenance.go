package idemimpl

import (
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/internal/link"
)

// Maintenance returns what a [idem.Janitor] needs to purge the inbox's table
// (for a partitioned inbox: to keep its partitions).
func (in *Inbox[M, R]) Maintenance() idem.Maintenance {
	m := idem.Maintenance{
		Consumer: in.table.Consumer,
		Table:    in.table.Name,
		Retain:   in.table.Retain,
	}
	if in.table.Partition != "" {
		p := in.partitions()
		*link.MaintenanceTables(&m) = link.Tables{DB: in.db, Partitions: &p}
		return m
	}
	*link.MaintenanceTables(&m) = link.Tables{DB: in.db, Purge: in.sql.purge}
	return m
}

// Maintenance returns what a [idem.Janitor] needs to purge the table and sweep
// its expired claims.
func (x *ExternalInbox[M, R]) Maintenance() idem.Maintenance {
	m := idem.Maintenance{
		Consumer: x.table.Consumer,
		Table:    x.table.Name,
		External: true,
		Retain:   x.table.Retain,
		Lease:    x.lease,
	}
	*link.MaintenanceTables(&m) = link.Tables{DB: x.db, Purge: x.sql.purge, Sweep: x.sql.sweep}
	return m
}

var (
	_ idem.Maintained = (*Inbox[struct{}, idem.None])(nil)
	_ idem.Maintained = (*ExternalInbox[struct{}, idem.None])(nil)
)
