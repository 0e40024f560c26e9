package migrate

import (
	"fmt"
	"slices"
	"strings"

	"github.com/idemgen/idemgen/internal/model"
)

// Change is how an inbox's schema moves from one definition to the next
// without losing what it records: only additive changes have one.
type Change struct {
	// AddColumns are new nullable key parts: rows recorded before have
	// NULL in them, which is exactly the key those messages had.
	AddColumns []model.Column
	// DropNotNull are required parts that become nullable.
	DropNotNull []model.Column
	// Widen are integer parts whose type grows (new type; Old has the
	// type before).
	Widen []model.Column
	Old   map[string]model.Column
	// ReplaceUnique: the unique constraint or indexes are dropped and
	// created anew (the key's columns, their nullability or the strategy
	// changed).
	ReplaceUnique bool
	// AddGuard: the stale-message guard's versions table is created.
	AddGuard bool
	// ResultJSON: the result column changes from jsonb to json, which
	// holds every result encoding/json writes (jsonb refuses \u0000).
	ResultJSON bool
	// RetentionBTree: the BRIN index on created_at is replaced by a B-tree,
	// which the purge reads oldest first.
	RetentionBTree bool
}

// Describe names the change for a migration file name.
func (c Change) Describe() string {
	var parts []string
	for _, col := range c.AddColumns {
		parts = append(parts, "add_"+col.Name)
	}
	if len(c.DropNotNull) > 0 {
		parts = append(parts, "nullable")
	}
	if len(c.Widen) > 0 {
		parts = append(parts, "widen")
	}
	if c.AddGuard {
		parts = append(parts, "guard")
	}
	if c.ResultJSON {
		parts = append(parts, "result_json")
	}
	if c.RetentionBTree {
		parts = append(parts, "retention_btree")
	}
	if len(parts) == 0 {
		parts = append(parts, "unique")
	}
	return strings.Join(parts, "_")
}

// widenings lists the integer column types each type can grow into without
// changing any stored value.
var widenings = map[string][]string{
	"smallint": {"integer", "bigint", "numeric(20)"},
	"integer":  {"bigint", "numeric(20)"},
	"bigint":   {"numeric(20)"},
}

// Evolve returns the change from prev to next, or an error that says why the
// change would lose or reinterpret what the inbox has recorded, and what to
// do instead.
func Evolve(prev, next model.Inbox) (Change, error) {
	fresh := "give the handler a new consumer name (its new inbox starts empty; the old one keeps its rows until you drop it), " +
		"or, if no migration of " + prev.Consumer + " was applied anywhere yet, delete them and run idemgen again"
	c := Change{Old: map[string]model.Column{}}
	if prev.Table != next.Table {
		return c, fmt.Errorf("its inbox table changed from %s to %s: running consumers use the old name until the deploy finishes, so a rename is yours to plan; %s",
			prev.Table, next.Table, fresh)
	}
	if prev.Partition != next.Partition {
		return c, fmt.Errorf("its inbox would be %s, and idemgen does not move the rows recorded so far between layouts "+
			"(docs/scale.md#moving-an-existing-consumer-to-partitions says how to switch); %s",
			partitionChange(prev.Partition, next.Partition), fresh)
	}
	old := map[string]model.Column{}
	for _, col := range prev.Key {
		old[col.Name] = col
		c.Old[col.Name] = col
	}
	seen := map[string]bool{}
	for _, col := range next.Key {
		seen[col.Name] = true
		was, ok := old[col.Name]
		switch {
		case !ok && !col.Nullable:
			return c, fmt.Errorf("its key gained the required part %s, which the rows recorded so far have no value for; make the new part nullable (a pointer, sql.Null or pgtype) or %s",
				col.Name, fresh)
		case !ok:
			c.AddColumns = append(c.AddColumns, col)
			c.ReplaceUnique = true
			continue
		case was.Nullable && !col.Nullable:
			return c, fmt.Errorf("key part %s became required, but rows recorded so far may hold NULL in it; keep it nullable or %s", col.Name, fresh)
		case !was.Nullable && col.Nullable:
			c.DropNotNull = append(c.DropNotNull, col)
			c.ReplaceUnique = true
		}
		if was.Type != col.Type {
			if !slices.Contains(widenings[was.Type], col.Type) {
				return c, fmt.Errorf("key part %s changed type from %s to %s, which would reinterpret the keys recorded so far; %s",
					col.Name, was.Type, col.Type, fresh)
			}
			c.Widen = append(c.Widen, col)
		}
	}
	for _, col := range prev.Key {
		if !seen[col.Name] {
			return c, fmt.Errorf("key part %s was removed (or renamed), so keys recorded so far that differ only in it would collide; %s", col.Name, fresh)
		}
	}
	if prev.Unique != next.Unique {
		c.ReplaceUnique = true
	}
	switch {
	case prev.Guard == nil && next.Guard != nil:
		c.AddGuard = true
	case prev.Guard != nil && next.Guard == nil:
		return c, fmt.Errorf("its stale-message guard (order=, version=) was removed; idemgen does not drop the versions table it keeps: keep the guard, or %s", fresh)
	case prev.Guard != nil && *prev.Guard != *next.Guard:
		return c, fmt.Errorf("the entity of its stale-message guard changed type from %s to %s, which would reinterpret the versions recorded so far; %s",
			prev.Guard.Type, next.Guard.Type, fresh)
	}
	switch prev, next := prev.ResultType(), next.ResultType(); {
	case prev == next:
	case prev == model.ResultJSONB && next == model.ResultJSON:
		c.ResultJSON = true
	default:
		return c, fmt.Errorf("its result column would change type from %s to %s, which cannot hold every result recorded so far; keep %s", prev, next, prev)
	}
	switch prev, next := prev.RetentionIndex(), next.RetentionIndex(); {
	case prev == next:
	case prev == model.RetentionBRIN && next == model.RetentionBTree:
		c.RetentionBTree = true
	default:
		return c, fmt.Errorf("its retention index would change from %s to %s; idemgen only moves inboxes from BRIN to B-tree", prev, next)
	}
	return c, nil
}

// partitionChange says how an inbox's partitioning would change, for the
// error that refuses it.
func partitionChange(prev, next string) string {
	switch {
	case prev == "":
		return "partitioned by " + next + " (partition=" + next + ") instead of a plain table"
	case next == "":
		return "a plain table instead of partitioned by " + prev + " (partition= was removed)"
	default:
		return "partitioned by " + next + " instead of by " + prev
	}
}
