package migrate

import (
	"slices"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/internal/model"
)

func col(name, typ string, nullable bool) model.Column {
	return model.Column{Name: name, Type: typ, Nullable: nullable}
}

// base is the inbox every evolution case starts from.
func base() model.Inbox {
	return model.Inbox{Consumer: "app.e", Table: "idem_app_e", Unique: model.PrimaryKey, Result: model.ResultJSON,
		Key: []model.Column{col("key_id", "text", false), col("key_seq", "integer", false)}}
}

// TestEvolveAdditive: every change that keeps the meaning of the rows
// recorded so far has one migration, named after it.
func TestEvolveAdditive(t *testing.T) {
	for _, c := range []struct {
		name     string
		from     func(*model.Inbox)
		to       func(*model.Inbox)
		describe string
		check    func(Change) bool
	}{
		{name: "add a nullable part", to: func(in *model.Inbox) {
			in.Key = append(in.Key, col("key_batch", "text", true))
			in.Unique = model.PartialIndexes
		}, describe: "add_key_batch", check: func(c Change) bool {
			return len(c.AddColumns) == 1 && c.AddColumns[0].Name == "key_batch" && c.ReplaceUnique
		}},
		{name: "add two nullable parts", to: func(in *model.Inbox) {
			in.Key = append(in.Key, col("key_a", "text", true), col("key_b", "bigint", true))
			in.Unique = model.NullsNotDistinct
		}, describe: "add_key_a_add_key_b", check: func(c Change) bool { return len(c.AddColumns) == 2 && c.ReplaceUnique }},
		{name: "a required part becomes nullable", to: func(in *model.Inbox) {
			in.Key[1].Nullable = true
			in.Unique = model.PartialIndexes
		}, describe: "nullable", check: func(c Change) bool { return len(c.DropNotNull) == 1 && c.ReplaceUnique }},
		{name: "integer to bigint", to: func(in *model.Inbox) { in.Key[1].Type = "bigint" }, describe: "widen",
			check: func(c Change) bool {
				return len(c.Widen) == 1 && c.Old["key_seq"].Type == "integer" && !c.ReplaceUnique
			}},
		{name: "smallint to numeric(20)", from: func(in *model.Inbox) { in.Key[1].Type = "smallint" }, to: func(in *model.Inbox) { in.Key[1].Type = "numeric(20)" },
			describe: "widen", check: func(c Change) bool { return len(c.Widen) == 1 }},
		{name: "bigint to numeric(20)", from: func(in *model.Inbox) { in.Key[1].Type = "bigint" }, to: func(in *model.Inbox) { in.Key[1].Type = "numeric(20)" },
			describe: "widen", check: func(c Change) bool { return len(c.Widen) == 1 }},
		{name: "partial indexes to nulls not distinct", from: func(in *model.Inbox) {
			in.Key[1].Nullable, in.Unique = true, model.PartialIndexes
		}, to: func(in *model.Inbox) { in.Key[1].Nullable, in.Unique = true, model.NullsNotDistinct },
			describe: "unique", check: func(c Change) bool { return c.ReplaceUnique && len(c.DropNotNull) == 0 }},
		{name: "add a guard", to: func(in *model.Inbox) { in.Guard = &model.Column{Name: "entity", Type: "text"} },
			describe: "guard", check: func(c Change) bool { return c.AddGuard && !c.ReplaceUnique }},
		{name: "jsonb result to json", from: func(in *model.Inbox) { in.Result = model.ResultJSONB }, to: func(in *model.Inbox) { in.Result = model.ResultJSON },
			describe: "result_json", check: func(c Change) bool { return c.ResultJSON }},
		{name: "empty result is json", from: func(in *model.Inbox) { in.Result = "" }, to: func(in *model.Inbox) { in.Result = model.ResultJSON },
			describe: "unique", check: func(c Change) bool { return !c.ResultJSON && !c.ReplaceUnique }},
		{name: "several at once", to: func(in *model.Inbox) {
			in.Key[1].Type = "bigint"
			in.Key = append(in.Key, col("key_x", "text", true))
			in.Unique = model.PartialIndexes
			in.Guard = &model.Column{Name: "entity", Type: "bigint"}
		}, describe: "add_key_x_widen_guard", check: func(c Change) bool { return len(c.AddColumns) == 1 && len(c.Widen) == 1 && c.AddGuard }},
	} {
		prev, next := base(), base()
		if c.from != nil {
			c.from(&prev)
			c.from(&next)
		}
		next.Key = slices.Clone(next.Key)
		if c.to != nil {
			c.to(&next)
		}
		change, err := Evolve(prev, next)
		if err != nil || !c.check(change) || change.Describe() != c.describe {
			t.Errorf("%s: Evolve = %+v (%q), %v; want %q", c.name, change, change.Describe(), err, c.describe)
		}
	}
}

// TestEvolveRefuses: every change that would lose or reinterpret what the
// inbox recorded is refused, saying why and what to do instead.
func TestEvolveRefuses(t *testing.T) {
	guarded := func(in *model.Inbox) { in.Guard = &model.Column{Name: "entity", Type: "text"} }
	for _, c := range []struct {
		name string
		from func(*model.Inbox)
		to   func(*model.Inbox)
		msg  string
	}{
		{name: "table renamed", to: func(in *model.Inbox) { in.Table = "idem_other" }, msg: "its inbox table changed from idem_app_e to idem_other"},
		{name: "required part added", to: func(in *model.Inbox) { in.Key = append(in.Key, col("key_x", "text", false)) }, msg: "gained the required part key_x"},
		{name: "part removed", to: func(in *model.Inbox) { in.Key = in.Key[:1] }, msg: "key part key_seq was removed"},
		{name: "part renamed", to: func(in *model.Inbox) { in.Key[1].Name = "key_n" }, msg: "gained the required part key_n"},
		{name: "nullable part becomes required", from: func(in *model.Inbox) { in.Key[1].Nullable, in.Unique = true, model.PartialIndexes },
			to: func(in *model.Inbox) { in.Key[1].Nullable, in.Unique = false, model.PrimaryKey }, msg: "key part key_seq became required"},
		{name: "type changed", to: func(in *model.Inbox) { in.Key[0].Type = "uuid" }, msg: "key part key_id changed type from text to uuid"},
		{name: "integer narrowed", from: func(in *model.Inbox) { in.Key[1].Type = "bigint" }, to: func(in *model.Inbox) { in.Key[1].Type = "integer" },
			msg: "changed type from bigint to integer"},
		{name: "guard removed", from: guarded, to: func(in *model.Inbox) { in.Guard = nil }, msg: "its stale-message guard (order=, version=) was removed"},
		{name: "guard entity type changed", from: guarded, to: func(in *model.Inbox) { in.Guard = &model.Column{Name: "entity", Type: "bigint"} },
			msg: "changed type from text to bigint"},
		{name: "json result to jsonb", to: func(in *model.Inbox) { in.Result = model.ResultJSONB }, msg: "its result column would change type from json to jsonb"},
		{name: "partitioned", to: func(in *model.Inbox) { in.Partition = model.BucketDay },
			msg: "its inbox would be partitioned by day (partition=day) instead of a plain table"},
		{name: "no longer partitioned", from: func(in *model.Inbox) { in.Partition = model.BucketDay }, to: func(in *model.Inbox) { in.Partition = "" },
			msg: "a plain table instead of partitioned by day"},
		{name: "another bucket", from: func(in *model.Inbox) { in.Partition = model.BucketDay }, to: func(in *model.Inbox) { in.Partition = model.BucketHour },
			msg: "partitioned by hour instead of by day"},
	} {
		prev, next := base(), base()
		if c.from != nil {
			c.from(&prev)
			c.from(&next)
		}
		next.Key = slices.Clone(next.Key)
		c.to(&next)
		_, err := Evolve(prev, next)
		if err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: Evolve = %v; want an error containing %q", c.name, err, c.msg)
		}
		if err != nil && c.name != "json result to jsonb" && !strings.Contains(err.Error(), "give the handler a new consumer name") {
			t.Errorf("%s: %v does not say what to do instead", c.name, err)
		}
	}
}

// TestInboxKindEvolve: InboxKind plans no migration for an unchanged inbox,
// one for an additive change, and keeps the result column of an inbox whose
// handler stores no result (an empty Result in the wanted schema).
func TestInboxKindEvolve(t *testing.T) {
	cur := base()
	if steps, err := testInbox.Evolve(cur, cur); err != nil || steps != nil {
		t.Errorf("unchanged: %v, %v; want no step", steps, err)
	}
	legacy := base()
	legacy.Result = model.ResultJSONB
	open := base()
	open.Result = ""
	if steps, err := testInbox.Evolve(legacy, open); err != nil || steps != nil {
		t.Errorf("no result wanted, jsonb column: %v, %v; want no step (the column stays)", steps, err)
	}
	if steps, err := testInbox.Evolve(nil, open); err != nil || len(steps) != 1 || steps[0].(model.Inbox).Result != model.ResultJSON {
		t.Errorf("new inbox without a result: %v, %v; want one step to a json column", steps, err)
	}
	if steps, err := testInbox.Evolve(legacy, base()); err != nil || len(steps) != 1 {
		t.Errorf("json wanted, jsonb column: %v, %v; want one step", steps, err)
	}
	narrowed := base()
	narrowed.Key = slices.Clone(narrowed.Key)
	narrowed.Key[1].Type = "smallint"
	if _, err := testInbox.Evolve(cur, narrowed); err == nil {
		t.Error("a narrowed key part was planned")
	}
	if _, _, err := testInbox.Render(cur, narrowed); err == nil {
		t.Error("a narrowed key part was rendered")
	}
}
