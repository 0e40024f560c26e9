package load

import (
	"go/types"
	"slices"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/internal/model"
)

// TestSnake: field names turn into snake case at each lower-to-upper step,
// before the last capital of an acronym, and after digits.
func TestSnake(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"ID", "id"},
		{"OrderID", "order_id"},
		{"HTTPServer", "http_server"},
		{"Meta_ID", "meta_id"},
		{"Meta_Id", "meta_id"},
		{"V2Key", "v2_key"},
		{"Line2", "line2"},
		{"already_snake", "already_snake"},
		{"", ""},
		{"Ünits", "ünits"},
	} {
		if got := snake(c.in); got != c.want {
			t.Errorf("snake(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestFieldWords: key hygiene reads the words of a path's last element.
func TestFieldWords(t *testing.T) {
	for _, c := range []struct {
		path string
		want []string
	}{
		{"RetryCount", []string{"retry", "count"}},
		{"Meta.DeliveryTag", []string{"delivery", "tag"}},
		{"Envelope.Meta.ReceivedAt", []string{"received", "at"}},
		{"TraceID", []string{"trace", "id"}},
		{"ID", []string{"id"}},
		{"Meta.", []string{""}},
	} {
		if got := fieldWords(c.path); !slices.Equal(got, c.want) {
			t.Errorf("fieldWords(%q) = %q, want %q", c.path, got, c.want)
		}
	}
}

// TestKeyColumn: a key field path is stored in key_ and its elements in
// snake case; a column that is not a plain lower-case ASCII name, or longer
// than PostgreSQL's 63 bytes, is refused with the path in the message.
func TestKeyColumn(t *testing.T) {
	long := strings.Repeat("A", 59) // key_ + 59 = 63 bytes
	for _, c := range []struct {
		path, column, problem string
	}{
		{"OrderID", "key_order_id", ""},
		{"Meta.ID", "key_meta_id", ""},
		{"Source.EventID", "key_source_event_id", ""},
		{"Meta.HTTPRef", "key_meta_http_ref", ""},
		{long, "key_" + strings.ToLower(long), ""},
		{long + "B", "key_" + strings.ToLower(long) + "b", "would be stored in column key_" + strings.ToLower(long) + "b, 64 bytes long, more than PostgreSQL's 63-byte identifiers"},
		{"Größe", "key_größe", `key field Größe cannot be named as a column ("key_größe")`},
		{"Ünits", "key_ünits", `cannot be named as a column ("key_ünits")`},
	} {
		column, problem := keyColumn(c.path)
		if column != c.column {
			t.Errorf("keyColumn(%q) column = %q, want %q", c.path, column, c.column)
		}
		switch {
		case c.problem == "" && problem != "":
			t.Errorf("keyColumn(%q) refused: %s", c.path, problem)
		case c.problem != "" && !strings.Contains(problem, c.problem):
			t.Errorf("keyColumn(%q) problem = %q, want it to contain %q", c.path, problem, c.problem)
		}
	}
}

// TestConsumerNames: the consumers idemgen accepts, at most MaxConsumer bytes,
// and the default tables named after them, which stay plain names within
// PostgreSQL's identifiers.
func TestConsumerNames(t *testing.T) {
	longest := "a" + strings.Repeat("b", MaxConsumer-1)
	for _, c := range []struct {
		consumer, table, problem string
	}{
		{"billing.charge", "idem_billing_charge", ""},
		{"shop-orders.v2", "idem_shop_orders_v2", ""},
		{"a", "idem_a", ""},
		{"a_b", "idem_a_b", ""},
		{longest, "idem_" + longest, ""},
		{longest + "c", "", "is 49 bytes long, more than 48"},
		{"Billing.charge", "", `consumer "Billing.charge" is not a safe name`},
		{"1billing", "", "is not a safe name"},
		{"billing charge", "", "is not a safe name"},
		{"billing/charge", "", "is not a safe name"},
		{"", "", "is not a safe name"},
	} {
		problem := consumerProblem(c.consumer)
		if c.problem == "" {
			if problem != "" {
				t.Errorf("consumer %q refused: %s", c.consumer, problem)
				continue
			}
			table := defaultTable(c.consumer)
			if table != c.table {
				t.Errorf("defaultTable(%q) = %q, want %q", c.consumer, table, c.table)
			}
			if p := tableProblem(table); p != "" {
				t.Errorf("default table of consumer %q is refused as a table= name: %s", c.consumer, p)
			}
		} else if !strings.Contains(problem, c.problem) {
			t.Errorf("consumerProblem(%q) = %q, want it to contain %q", c.consumer, problem, c.problem)
		}
	}
}

// TestTableNames: table= takes a plain lower-case name, optionally
// schema-qualified, each part at most 63 bytes.
func TestTableNames(t *testing.T) {
	part63 := strings.Repeat("t", 63)
	for _, c := range []struct{ table, problem string }{
		{"inbox", ""},
		{"app.inbox_a", ""},
		{"_private", ""},
		{part63, ""},
		{part63 + "." + part63, ""},
		{part63 + "t", "has a name of 64 bytes, more than PostgreSQL's 63-byte identifiers"},
		{"app." + part63 + "t", "has a name of 64 bytes"},
		{"Inbox", `table "Inbox" is not a plain PostgreSQL name`},
		{"a.b.c", "is not a plain PostgreSQL name"},
		{"app.", "is not a plain PostgreSQL name"},
		{"1inbox", "is not a plain PostgreSQL name"},
		{`"inbox"`, "is not a plain PostgreSQL name"},
	} {
		problem := tableProblem(c.table)
		switch {
		case c.problem == "" && problem != "":
			t.Errorf("table %q refused: %s", c.table, problem)
		case c.problem != "" && !strings.Contains(problem, c.problem):
			t.Errorf("tableProblem(%q) = %q, want it to contain %q", c.table, problem, c.problem)
		}
	}
}

// TestIntegerWidth: the Go facts recorded for each integer type, the same on
// every platform, and which of them fit an int64 (so are sent as one).
func TestIntegerWidth(t *testing.T) {
	for _, c := range []struct {
		kind     types.BasicKind
		bits     int
		unsigned bool
		fits     bool
	}{
		{types.Int8, 8, false, true}, {types.Int16, 16, false, true}, {types.Int32, 32, false, true},
		{types.Int64, 64, false, true}, {types.Int, 64, false, true},
		{types.Uint8, 8, true, true}, {types.Uint16, 16, true, true}, {types.Uint32, 32, true, true},
		{types.Uint64, 64, true, false}, {types.Uint, 64, true, false}, {types.Uintptr, 64, true, false},
	} {
		name := types.Typ[c.kind].Name()
		bits, unsigned := integerWidth(c.kind)
		if bits != c.bits || unsigned != c.unsigned {
			t.Errorf("integerWidth(%s) = %d, unsigned %v; want %d, unsigned %v", name, bits, unsigned, c.bits, c.unsigned)
		}
		part := model.KeyPart{Kind: model.KeyInt, Bits: bits, Unsigned: unsigned}
		if part.FitsInt64() != c.fits {
			t.Errorf("%s: FitsInt64() = %v, want %v", name, part.FitsInt64(), c.fits)
		}
	}
	if (model.KeyPart{Kind: model.KeyString}).FitsInt64() {
		t.Error("a string part fits an int64")
	}
}
