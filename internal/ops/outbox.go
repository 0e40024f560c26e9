package ops

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/idemgen/idemgen/generated/outboxdb"
)

// ErrOrder is wrapped by Revive's error when the rows asked for would be
// published out of their ordering key's order.
var ErrOrder = errors.New("the revive would break an ordering key's order")

// DeadRow is an outbox row dead-lettered after too many publish attempts.
type DeadRow struct {
	// ID orders the rows: the ordered relay publishes the rows of one
	// ordering key by ascending id.
	ID int64
	// MessageID is the stable id the broker carries.
	MessageID   string
	Consumer    string
	Key         string
	Destination string
	// OrderingKey is "" when the message has none.
	OrderingKey string
	// Attempts are the publish attempts the row had when it died.
	Attempts  int
	CreatedAt time.Time
	DeadAt    time.Time
	// LastError is the error of the last failed publish.
	LastError string
}

// Outbox is the state of the outbox table a command worked on.
type Outbox struct {
	// Schema is the schema of the idem_outbox table the connection's
	// search_path finds, as the relay finds it.
	Schema string
	// Now is the server's time when the command ran.
	Now time.Time
	// Rows are the dead rows listed, or those revived, by id.
	Rows []DeadRow
}

// Dead lists the dead rows of the outbox, of every consumer or of consumer
// when it is not "", by id.
func Dead(ctx context.Context, conn *pgx.Conn, consumer string) (Outbox, error) {
	var out Outbox
	err := pgx.BeginTxFunc(ctx, conn, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		q := outboxdb.New(tx)
		var err error
		if out.Schema, out.Now, err = outboxTable(ctx, tx, q); err != nil {
			return err
		}
		rows, err := q.DeadRows(ctx, consumer)
		if err != nil {
			return fmt.Errorf("list the dead rows of %s.idem_outbox: %w", out.Schema, err)
		}
		for _, r := range rows {
			out.Rows = append(out.Rows, deadRow(outboxdb.LockDeadRowsRow(r)))
		}
		return nil
	})
	return out, err
}

// Revival says which dead rows Revive makes due again: those with the ids
// in IDs, or with All every dead row (of Consumer, when it is not "").
type Revival struct {
	IDs      []int64
	All      bool
	Consumer string
}

// Revive makes dead rows due again, in one transaction: dead_at, attempts
// (the next claim is attempt 1), the backoff and any claim are cleared, and
// id and created_at are kept, so that the relay publishes them in the order
// they were written, ahead of the rows written after them. It returns the
// rows revived, as they were before.
//
// An id that is not a dead row fails the revive, wrapping ErrNotFound;
// reviving a row of an ordering key whose earlier dead rows stay dead fails
// it too, wrapping ErrOrder, and names the ids to add: the ordered relay
// would publish the later row first. Nothing is changed on an error.
func Revive(ctx context.Context, conn *pgx.Conn, r Revival) (Outbox, error) {
	var out Outbox
	if r.All == (len(r.IDs) > 0) {
		return out, errors.New("revive: give either the ids of the rows or all of them, not both or neither")
	}
	if !r.All && r.Consumer != "" {
		return out, errors.New("revive: the consumer selects rows only with all of them, not with ids")
	}
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		q := outboxdb.New(tx)
		var err error
		if out.Schema, out.Now, err = outboxTable(ctx, tx, q); err != nil {
			return err
		}
		if missing, err := q.OutboxLayout(ctx); err != nil {
			return fmt.Errorf("read the layout of %s.idem_outbox: %w", out.Schema, err)
		} else if missing != "" {
			return fmt.Errorf("%s.idem_outbox lacks the outbox migration %s: apply it (and deploy the relays of this release) before reviving rows", out.Schema, missing)
		}
		ids := slices.Clone(r.IDs)
		if ids == nil {
			ids = []int64{}
		}
		locked, err := q.LockDeadRows(ctx, outboxdb.LockDeadRowsParams{Ids: ids, AllRows: r.All, Consumer: r.Consumer})
		if err != nil {
			return fmt.Errorf("lock the dead rows of %s.idem_outbox: %w", out.Schema, err)
		}
		found := make([]int64, 0, len(locked))
		for _, row := range locked {
			found = append(found, row.ID)
			out.Rows = append(out.Rows, deadRow(row))
		}
		if missing := notIn(r.IDs, found); len(missing) > 0 {
			return errorf(ErrNotFound, "%s.idem_outbox has no dead row with id %s (idemgen outbox dead lists them)", out.Schema, joinIDs(missing))
		}
		before, err := q.DeadBefore(ctx, found)
		if err != nil {
			return fmt.Errorf("look for earlier dead rows of the same ordering keys: %w", err)
		}
		if len(before) > 0 {
			return orderError(before)
		}
		n, err := q.ReviveRows(ctx, found)
		if err != nil {
			return fmt.Errorf("revive the dead rows of %s.idem_outbox: %w", out.Schema, err)
		}
		if n != int64(len(found)) {
			return fmt.Errorf("revived %d row(s) of %d locked: the table changed under the lock", n, len(found))
		}
		return nil
	})
	if err != nil {
		out.Rows = nil
	}
	return out, err
}

// outboxTable refuses a standby and finds the schema of the outbox table
// the connection's search_path leads to.
func outboxTable(ctx context.Context, tx pgx.Tx, q *outboxdb.Queries) (string, time.Time, error) {
	now, err := RequirePrimary(ctx, tx)
	if err != nil {
		return "", now, err
	}
	schema, err := q.OutboxSchema(ctx)
	if errors.Is(err, pgx.ErrNoRows) {
		var path string
		if err := tx.QueryRow(ctx, "SELECT current_setting('search_path')").Scan(&path); err != nil {
			return "", now, fmt.Errorf("read the search_path: %w", err)
		}
		return "", now, errorf(ErrNotFound, "no idem_outbox table in the schemas of the search_path (%s); name its schema with -schema", path)
	}
	if err != nil {
		return "", now, fmt.Errorf("find the idem_outbox table: %w", err)
	}
	return schema, now, nil
}

// orderError says which earlier dead rows of their keys the rows asked for
// need beside them.
func orderError(before []outboxdb.DeadBeforeRow) error {
	var parts []string
	var add []int64
	for i := 0; i < len(before); {
		j := i
		var earlier []int64
		for ; j < len(before) && before[j].ID == before[i].ID; j++ {
			earlier = append(earlier, before[j].EarlierID)
		}
		parts = append(parts, fmt.Sprintf("row %d (ordering key %q) comes after dead row(s) %s, which would then go out after it", before[i].ID, before[i].OrderingKey, joinIDs(earlier)))
		add = append(add, earlier...)
		i = j
	}
	slices.Sort(add)
	add = slices.Compact(add)
	return errorf(ErrOrder, "revive refused, to keep each ordering key's order: %s; revive them together (add -id %s), or every dead row (-all)", strings.Join(parts, "; "), joinIDs(add))
}

func deadRow(r outboxdb.LockDeadRowsRow) DeadRow {
	return DeadRow{
		ID: r.ID, MessageID: uuidString(r.MessageID), Consumer: r.Consumer, Key: r.Key, Destination: r.Destination,
		OrderingKey: r.OrderingKey, Attempts: int(r.Attempts), CreatedAt: r.CreatedAt.Time, DeadAt: r.DeadAt.Time, LastError: r.LastError,
	}
}

func uuidString(u pgtype.UUID) string {
	v, err := u.Value()
	if err != nil || v == nil {
		return ""
	}
	return v.(string)
}

// notIn returns the ids of want missing from have, sorted, once each.
func notIn(want, have []int64) []int64 {
	var missing []int64
	for _, id := range want {
		if !slices.Contains(have, id) && !slices.Contains(missing, id) {
			missing = append(missing, id)
		}
	}
	slices.Sort(missing)
	return missing
}

// joinIDs writes ids as a comma-separated list, as -id takes them.
func joinIDs(ids []int64) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.FormatInt(id, 10)
	}
	return strings.Join(s, ",")
}
