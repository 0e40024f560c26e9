package idem

import (
	"time"

	"github.com/idemgen/idemgen/idem/internal/link"
	"github.com/idemgen/idemgen/idem/internal/obs"
)

// Maintenance describes one consumer's table to a [Janitor]: which table it
// purges, after how long, and for a mode=external consumer the lease after
// which its sweeper resets a claim. The Maintenance methods of the
// generated wrappers return it; its zero value is not usable.
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

// Maintained is a consumer whose table a [Janitor] keeps: the generated
// wrappers of mode=tx and mode=external implement it.
type Maintained interface {
	Maintenance() Maintenance
}
