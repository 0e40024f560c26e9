package idemimpl

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/internal/partition"
)

// A partitioned inbox (Table.Partition) is range-partitioned by its bucket
// column, the start of the bucket of each message's own time, which is the
// last key column: every copy of a message has the same time, so it lands in
// the same partition, where the unique key decides between them as in an
// inbox that is not partitioned. The claim, the lookup, the completion and
// the batch statements are built from the key columns, bucket included, so
// they are the same statements. What differs: the key function refuses a
// message older than the retention (bucketed), a claim whose bucket has no
// partition is refused too (noPartition), and the janitor drops whole
// partitions instead of deleting rows (partition.Maintain).

// checkPartition panics, naming the constructor and the consumer, on a
// partitioned table declaration the runtime cannot work with.
func checkPartition[M any](constructor string, t Table[M]) {
	last := t.Columns[len(t.Columns)-1]
	switch {
	case !t.Partition.Valid():
		panic(fmt.Sprintf("%s (consumer %s): unknown partition bucket %q; want hour, day, week or month", constructor, t.Consumer, t.Partition))
	case last.Type != "timestamptz" || last.Nullable:
		panic(fmt.Sprintf("%s (consumer %s): a partitioned table's last key column must be its bucket, a timestamptz that is never NULL, not %+v",
			constructor, t.Consumer, last))
	case t.Retain < t.Partition.Longest():
		panic(fmt.Sprintf("%s (consumer %s): the retention %v is shorter than a %s bucket: its partition would be dropped while its messages still arrive",
			constructor, t.Consumer, t.Retain, t.Partition))
	}
}

// isNoPartition reports whether err is PostgreSQL's refusal of a row whose
// partition key no partition holds ("no partition of relation ... found for
// row", SQLSTATE 23514). The inbox's own CHECK constraint (status) cannot
// fail on a claim, which always inserts 'running'.
func isNoPartition(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == pgerrcode.CheckViolation && strings.HasPrefix(pgErr.Message, "no partition of relation")
}

// noPartition is the ErrOutsideWindow of a claim of msg that no partition
// could hold.
func (in *Inbox[M, R]) noPartition(msg M, err error) error {
	field := in.table.Columns[len(in.table.Columns)-1].Field
	bucket := "its bucket"
	if parts, kerr := in.table.Key(msg); kerr == nil {
		if start, ok := parts[len(parts)-1].(time.Time); ok {
			bucket = fmt.Sprintf("the %s bucket from %s", in.table.Partition, start.UTC().Format(time.RFC3339))
		}
	}
	return fmt.Errorf("%w: %s is in %s, which has no partition: the janitor (idem.Janitor, or the wrapper's Purge) "+
		"creates the partitions of the kept window and %d buckets ahead (%v)",
		idem.ErrOutsideWindow, field, bucket, partition.Ahead, err)
}

// partitions is the inbox as partition.Maintain sees it.
func (in *Inbox[M, R]) partitions() partition.Table {
	return partition.Table{Parent: in.table.Name, Bucket: in.table.Partition, Retain: in.table.Retain}
}
