package link

import (
	"time"

	"github.com/idemgen/idemgen/idem/internal/partition"
	"github.com/idemgen/idemgen/idem/internal/pgutil"
)

// Tables is what an idem.Maintenance holds for the Janitor beside its
// exported fields: the database and the table's statements.
type Tables struct {
	DB    pgutil.DB
	Purge string // the table's purge: $1 the retention in seconds, $2 the batch size
	Sweep string // mode=external: the table's sweep, $1 the batch size
	// Partitions is the table of a partitioned inbox, whose partitions the
	// janitor keeps (partition.Maintain) instead of running a Purge; nil
	// for the others.
	Partitions *partition.Table
}

// MaintenanceTables returns the Tables of m, an *idem.Maintenance.
var MaintenanceTables func(m any) *Tables

// JanitorClock returns the idem.JanitorOption that sets a janitor's clock
// (time.Now without it), the now its partitions are kept at: for
// idem/idemtest, which proves what a partitioned inbox does once a bucket
// is past its retention without waiting for it.
var JanitorClock func(now func() time.Time) any
