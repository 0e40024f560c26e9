package migrate

import (
	"strings"
	"testing"

	"github.com/idemgen/idemgen/internal/model"
)

func externalBase() model.ExternalInbox {
	return model.ExternalInbox{Consumer: "app.x", Table: "idem_app_x",
		Key: []model.Column{col("key_id", "text", false), col("key_seq", "integer", false)}}
}

// externals renders a fixed body, so that Read and Render are tested apart
// from the SQL (inboxsql's).
var externals = ExternalKind{
	Create: func(in model.ExternalInbox) []byte { return []byte("-- create\n") },
	Alter: func(prev, next model.ExternalInbox, c ExternalChange) []byte {
		return []byte("-- alter " + c.Describe() + "\n")
	},
}

// TestExternalReadsWhatItRenders: the header of a rendered migration reads
// back as the chain and schema it was rendered for, and a migration of
// another kind is not the external kind's.
func TestExternalReadsWhatItRenders(t *testing.T) {
	in := externalBase()
	in.Key[1].Nullable = true
	name, content, err := externals.Render(nil, in)
	if err != nil || name != "idem_app_x" {
		t.Fatalf("Render: %q, %v", name, err)
	}
	chain, state, ok, err := externals.Read(content)
	if !ok || err != nil || chain != "app.x" {
		t.Fatalf("Read: %q, %v, %v", chain, ok, err)
	}
	if got := ExternalSchemaLine(state.(model.ExternalInbox)); got != ExternalSchemaLine(in) {
		t.Fatalf("read back %q, want %q", got, ExternalSchemaLine(in))
	}
	if !strings.Contains(ExternalSchemaLine(in), "key_seq:integer?") {
		t.Fatalf("the schema line does not mark the nullable part: %q", ExternalSchemaLine(in))
	}
	inbox := []byte(Header + "\n" + InboxMarker + "app.x\n" + SchemaLine(model.Inbox{Table: "t", Key: in.Key, Unique: model.PrimaryKey}) + "\n")
	if _, _, ok, _ := externals.Read(inbox); ok {
		t.Fatal("the external kind reads an inbox migration as its own")
	}
	if _, _, ok, _ := (InboxKind{}).Read(content); ok {
		t.Fatal("the inbox kind reads an external migration as its own")
	}
	damaged := []byte(Header + "\n" + ExternalMarker + "app.x\n" + SchemaMarker + "table=t key=key_id:text unique=pkey\n")
	if _, _, ok, err := externals.Read(damaged); !ok || err == nil {
		t.Fatalf("a schema line with an inbox's field: ok %v, err %v; want it refused", ok, err)
	}
}

// TestExternalEvolve: only the changes that keep every idem_key migrate;
// the others are refused with a new consumer name as the way out.
func TestExternalEvolve(t *testing.T) {
	if steps, err := externals.Evolve(externalBase(), externalBase()); err != nil || len(steps) != 0 {
		t.Fatalf("unchanged: %v, %v; want no step", steps, err)
	}
	for _, c := range []struct {
		name, describe string
		to             func(*model.ExternalInbox)
	}{
		{"widen", "widen", func(in *model.ExternalInbox) { in.Key[1].Type = "bigint" }},
		{"nullable", "nullable", func(in *model.ExternalInbox) { in.Key[1].Nullable = true }},
		{"both", "nullable_widen", func(in *model.ExternalInbox) { in.Key[1].Type, in.Key[1].Nullable = "numeric(20)", true }},
	} {
		next := externalBase()
		c.to(&next)
		steps, err := externals.Evolve(externalBase(), next)
		if err != nil || len(steps) != 1 {
			t.Fatalf("%s: %v, %v; want one step", c.name, steps, err)
		}
		name, content, err := externals.Render(externalBase(), steps[0])
		if err != nil || name != "idem_app_x_"+c.describe || !strings.HasSuffix(string(content), "-- alter "+c.describe+"\n") {
			t.Fatalf("%s: Render %q, %v:\n%s", c.name, name, err, content)
		}
	}
	for _, c := range []struct {
		name, want string
		to         func(*model.ExternalInbox)
	}{
		{"part added", "its key changed", func(in *model.ExternalInbox) { in.Key = append(in.Key, col("key_ref", "text", true)) }},
		{"part removed", "its key changed", func(in *model.ExternalInbox) { in.Key = in.Key[:1] }},
		{"part renamed", "its key changed", func(in *model.ExternalInbox) { in.Key[1].Name = "key_line" }},
		{"type changed", "changed type from integer to text", func(in *model.ExternalInbox) { in.Key[1].Type = "text" }},
		{"narrowed", "changed type from integer to smallint", func(in *model.ExternalInbox) { in.Key[1].Type = "smallint" }},
		{"made required", "became required", func(in *model.ExternalInbox) {}},
		{"table renamed", "its table changed", func(in *model.ExternalInbox) { in.Table = "claims_x" }},
	} {
		from, next := externalBase(), externalBase()
		if c.name == "made required" {
			from.Key[1].Nullable = true
		}
		c.to(&next)
		_, err := externals.Evolve(from, next)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "new consumer name") {
			t.Errorf("%s: %v; want an error saying %q and what to do", c.name, err, c.want)
		}
	}
}
