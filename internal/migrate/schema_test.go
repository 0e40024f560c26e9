package migrate

import (
	"reflect"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/internal/model"
)

// schemas are inboxes of every shape a schema line records.
var schemas = map[string]model.Inbox{
	"one text part": {Consumer: "app.a", Table: "idem_app_a", Unique: model.PrimaryKey, Result: model.ResultJSON,
		Key: []model.Column{{Name: "key_id", Type: "text"}}, Retention: model.RetentionBRIN},
	"nullable parts, partial indexes, guard": {Consumer: "app.b", Table: "billing.idem_b", Unique: model.PartialIndexes, Result: model.ResultJSON,
		Key:   []model.Column{{Name: "key_id", Type: "uuid"}, {Name: "key_ref", Type: "bigint", Nullable: true}, {Name: "key_n", Type: "numeric(20)", Nullable: true}},
		Guard: &model.Column{Name: "entity", Type: "text"}, Retention: model.RetentionBRIN},
	"nulls not distinct": {Consumer: "app.c", Table: "idem_c", Unique: model.NullsNotDistinct, Result: model.ResultJSON,
		Key: []model.Column{{Name: "key_a", Type: "integer", Nullable: true}}, Retention: model.RetentionBTree},
	"legacy jsonb result": {Consumer: "app.d", Table: "idem_d", Unique: model.PrimaryKey, Result: model.ResultJSONB,
		Key: []model.Column{{Name: "key_a", Type: "smallint"}}, Retention: model.RetentionBRIN},
	"partitioned by day": {Consumer: "app.e", Table: "idem_e", Unique: model.PrimaryKey, Result: model.ResultJSON,
		Key: []model.Column{{Name: "key_id", Type: "text"}}, Retention: model.RetentionBTree, Partition: model.BucketDay},
}

// TestSchemaLineRoundTrip: every schema reads back from its line as it was.
func TestSchemaLineRoundTrip(t *testing.T) {
	for name, in := range schemas {
		line := SchemaLine(in)
		back, err := ParseSchemaLine(in.Consumer, line)
		if err != nil || !reflect.DeepEqual(back, in) {
			t.Errorf("%s: %q reads back as %+v, %v; want %+v", name, line, back, err, in)
		}
	}
	want := "-- idemgen:schema table=billing.idem_b key=key_id:uuid,key_ref:bigint?,key_n:numeric(20)? unique=partial guard=entity:text result=json"
	if got := SchemaLine(schemas["nullable parts, partial indexes, guard"]); got != want {
		t.Errorf("SchemaLine = %q, want %q (a changed line makes every recorded migration read as edited)", got, want)
	}
	want = "-- idemgen:schema table=idem_e key=key_id:text unique=pkey result=json retention=btree partition=day"
	if got := SchemaLine(schemas["partitioned by day"]); got != want {
		t.Errorf("SchemaLine = %q, want %q", got, want)
	}
}

// TestRetentionSchemaLine: a schema line without retention= (written before
// idemgen indexed created_at with a B-tree) reads as a BRIN index and
// renders as written, and evolves once, to a B-tree, recorded as
// retention=btree.
func TestRetentionSchemaLine(t *testing.T) {
	const line = "-- idemgen:schema table=idem_app_a key=key_id:text unique=pkey result=json"
	old, err := ParseSchemaLine("app.a", line)
	if err != nil || old.RetentionIndex() != model.RetentionBRIN {
		t.Fatalf("line without retention=: %+v, %v; want a BRIN index", old, err)
	}
	if SchemaLine(old) != line {
		t.Errorf("line renders as %q; it must render as written, or its migration reads as edited", SchemaLine(old))
	}
	want := old
	want.Retention = model.RetentionBTree
	change, err := Evolve(old, want)
	if err != nil || !change.RetentionBTree || change.Describe() != "retention_btree" {
		t.Fatalf("Evolve(brin, btree) = %+v (%q), %v; want the index replaced", change, change.Describe(), err)
	}
	if !strings.HasSuffix(SchemaLine(want), " retention=btree") {
		t.Errorf("new line %q does not record retention=btree", SchemaLine(want))
	}
	if _, err := Evolve(want, old); err == nil {
		t.Error("Evolve(btree, brin) succeeded; want it refused")
	}
}

// TestLegacySchemaLine: a schema line without result= (written before idemgen
// stored results as json) reads as a jsonb result column and renders as
// written, and a handler's schema evolves from it once, to json.
func TestLegacySchemaLine(t *testing.T) {
	const line = "-- idemgen:schema table=idem_app_a key=key_id:text unique=pkey"
	legacy, err := ParseSchemaLine("app.a", line)
	if err != nil || legacy.ResultType() != model.ResultJSONB {
		t.Fatalf("legacy line: %+v, %v; want a jsonb result column", legacy, err)
	}
	if SchemaLine(legacy) != line {
		t.Errorf("legacy line renders as %q; it must render as written, or its migration reads as edited", SchemaLine(legacy))
	}
	want := legacy
	want.Result = model.ResultJSON
	change, err := Evolve(legacy, want)
	if err != nil || !change.ResultJSON || change.Describe() != "result_json" {
		t.Fatalf("Evolve(jsonb, json) = %+v (%q), %v; want the result column changed", change, change.Describe(), err)
	}
	if !strings.HasSuffix(SchemaLine(want), " result=json") {
		t.Errorf("new line %q does not record result=json", SchemaLine(want))
	}
}

// TestParseSchemaLineRefuses: damaged lines are errors that say what is
// wrong, never a schema.
func TestParseSchemaLineRefuses(t *testing.T) {
	for line, msg := range map[string]string{
		"-- idemgen:inbox consumer=a":                                        "not a schema line",
		"-- idemgen:schema key=k:text unique=pkey":                           "incomplete",
		"-- idemgen:schema table=t unique=pkey":                              "incomplete",
		"-- idemgen:schema table=t key=k:text":                               "incomplete",
		"-- idemgen:schema table=t key=k:text unique=primary":                "unknown unique=primary",
		"-- idemgen:schema table=t key=k:text unique=pkey result=xml":        "unknown result=xml",
		"-- idemgen:schema table=t key=k unique=pkey":                        `malformed column "k"`,
		"-- idemgen:schema table=t key=k:text,:text unique=pkey":             `malformed column ":text"`,
		"-- idemgen:schema table=t key=k:text, unique=pkey":                  `malformed column ""`,
		"-- idemgen:schema table=t key=k:text unique=pkey guard=e":           `malformed column "e"`,
		"-- idemgen:schema table=t key=k:text unique=pkey guard=e:text?":     "nullable guard",
		"-- idemgen:schema table=t key=k:text unique=pkey lease=2m":          `unknown field "lease=2m"`,
		"-- idemgen:schema table=t key=k:text unique=pkey result=json extra": `unknown field "extra"`,
		"-- idemgen:schema table=t key=k:text unique=pkey partition=daily":   "unknown partition=daily",
	} {
		in, err := ParseSchemaLine("c", line)
		if err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("ParseSchemaLine(%q) = %+v, %v; want an error containing %q", line, in, err, msg)
		}
	}
}

// FuzzSchemaLine: a line that parses renders as a line that parses back to
// the same schema, and rendering it again gives the same line; no input
// panics. Seeds: testdata/fuzz/FuzzSchemaLine and the schemas above.
func FuzzSchemaLine(f *testing.F) {
	for _, in := range schemas {
		f.Add(SchemaLine(in))
	}
	f.Fuzz(func(t *testing.T, line string) {
		in, err := ParseSchemaLine("fuzz", line)
		if err != nil {
			return
		}
		rendered := SchemaLine(in)
		back, err := ParseSchemaLine("fuzz", rendered)
		if err != nil {
			t.Fatalf("%q parses as %+v, which renders as %q, which does not parse: %v", line, in, rendered, err)
		}
		if !reflect.DeepEqual(back, in) {
			t.Fatalf("%q parses as %+v, which renders as %q, which parses as %+v", line, in, rendered, back)
		}
		if again := SchemaLine(back); again != rendered {
			t.Fatalf("%q renders as %q, then as %q", line, rendered, again)
		}
	})
}

// TestInboxHeader: InboxKind writes the header it reads: the consumer and
// the schema come back from a rendered migration, above the renderer's SQL.
func TestInboxHeader(t *testing.T) {
	in := schemas["nullable parts, partial indexes, guard"]
	name, content, err := testInbox.Render(nil, in)
	if err != nil || name != "billing_idem_b" {
		t.Fatalf("Render = %q, %v; want the name billing_idem_b", name, err)
	}
	lines := strings.SplitN(string(content), "\n", 4)
	if lines[0] != Header || lines[1] != InboxMarker+"app.b" || lines[2] != SchemaLine(in) || lines[3] != string(testInbox.Create(in)) {
		t.Errorf("migration is\n%s\nwant the header, the consumer line, the schema line, then the SQL", content)
	}
	consumer, state, ok, err := testInbox.Read(content)
	if !ok || err != nil || consumer != "app.b" || !reflect.DeepEqual(state, State(in)) {
		t.Errorf("Read = %q, %+v, %v, %v; want app.b and the schema", consumer, state, ok, err)
	}
	for content, want := range map[string]string{
		"-- +goose Up\nSELECT 1;\n":                                     "", // a user's migration
		Header + "\n-- +goose Up\n":                                     "", // not an inbox
		"-- copied\n" + InboxMarker + "app.b\n" + SchemaLine(in) + "\n": "", // not idemgen's
		Header + "\n" + InboxMarker + "app.b":                           "it has no schema line",
		Header + "\n" + InboxMarker + "app.b\n-- x\n":                   "not a schema line",
	} {
		_, _, ok, err := testInbox.Read([]byte(content))
		switch {
		case want == "" && ok:
			t.Errorf("Read(%q) took it for an inbox migration", content)
		case want != "" && (!ok || err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("Read(%q) = %v, %v; want an inbox migration whose header is damaged: %s", content, ok, err, want)
		}
	}
}
