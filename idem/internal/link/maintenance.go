package link

import "github.com/idemgen/idemgen/idem/internal/pgutil"

// Tables is what an idem.Maintenance holds for the Janitor beside its
// exported fields: the database and the table's statements.
type Tables struct {
	DB    pgutil.DB
	Purge string // the table's purge: $1 the retention in seconds, $2 the batch size
	Sweep string // mode=external: the table's sweep, $1 the batch size
}

// MaintenanceTables returns the Tables of m, an *idem.Maintenance.
var MaintenanceTables func(m any) *Tables
