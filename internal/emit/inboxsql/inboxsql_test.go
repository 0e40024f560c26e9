package inboxsql

import (
	"strings"
	"testing"

	"github.com/idemgen/idemgen/internal/model"
)

func TestIdentifierFitsPostgres(t *testing.T) {
	short := Identifier("idem_a", "pkey")
	if short != "idem_a_pkey" {
		t.Errorf("short name changed: %q", short)
	}
	base := "idem_" + strings.Repeat("x", 53)
	a, b := Identifier(base, "created_at_idx"), Identifier(base+"y", "created_at_idx")
	if len(a) > MaxIdentifier || len(b) > MaxIdentifier {
		t.Errorf("names over %d bytes: %q (%d), %q (%d)", MaxIdentifier, a, len(a), b, len(b))
	}
	if a == b || !strings.HasSuffix(a, "_created_at_idx") {
		t.Errorf("shortened names %q and %q must stay distinct and keep their suffix", a, b)
	}
}

func TestQuote(t *testing.T) {
	for name, want := range map[string]string{
		"idem_a":       "idem_a",
		"key_order":    "key_order",
		"version":      "version", // unreserved: stays bare
		"order":        `"order"`,
		"user":         `"user"`,
		"select":       `"select"`,
		"between":      `"between"`, // col_name
		"left":         `"left"`,    // type_func_name
		"Order":        `"Order"`,
		"9lives":       `"9lives"`,
		`a"b`:          `"a""b"`,
		"app.inbox_a":  `"app.inbox_a"`,
		"":             `""`,
		"über":         `"über"`,
		"system_user":  `"system_user"`, // a keyword from PostgreSQL 16
		"_leading_bar": "_leading_bar",
	} {
		if got := Quote(name); got != want {
			t.Errorf("Quote(%q) = %s, want %s", name, got, want)
		}
	}
	for table, want := range map[string]string{
		"idem_a":      "idem_a",
		"order":       `"order"`,
		"app.inbox_a": "app.inbox_a",
		"user.order":  `"user"."order"`,
		"select.x":    `"select".x`,
	} {
		if got := TableName(table); got != want {
			t.Errorf("TableName(%q) = %s, want %s", table, got, want)
		}
	}
}

// TestNamesOfCollidingNullableParts: key parts Order, Line and OrderLine
// would name two partial indexes key_null_order_line_idx.
func TestNamesOfCollidingNullableParts(t *testing.T) {
	in := model.Inbox{Consumer: "ic.a", Table: "idem_ic_a", Unique: model.PartialIndexes, Key: []model.Column{
		{Name: "key_id", Type: "text"},
		{Name: "key_order", Type: "text", Nullable: true},
		{Name: "key_line", Type: "text", Nullable: true},
		{Name: "key_order_line", Type: "text", Nullable: true},
	}}
	n := names(in)
	if d := duplicate(ObjectNames(in)); d != "" {
		t.Fatalf("name %s is given twice: %q", d, ObjectNames(in))
	}
	// The names that did not collide are the ones idemgen always wrote.
	for pattern, want := range map[int]string{
		0:     "idem_ic_a_key_idx",
		0b001: "idem_ic_a_key_null_order_idx",
		0b010: "idem_ic_a_key_null_line_idx",
		0b101: "idem_ic_a_key_null_order_order_line_idx",
	} {
		if n.partial[pattern] != want {
			t.Errorf("index of null pattern %03b is %s, want %s", pattern, n.partial[pattern], want)
		}
	}
	for _, pattern := range []int{0b011, 0b100} {
		if got := n.partial[pattern]; !strings.HasPrefix(got, "idem_ic_a_key_null_order_line_") || !strings.HasSuffix(got, "_idx") || len(got) != len("idem_ic_a_key_null_order_line_12345678_idx") {
			t.Errorf("index of null pattern %03b is %s, want idem_ic_a_key_null_order_line_<hash>_idx", pattern, got)
		}
	}
	if n.pkey != "idem_ic_a_pkey" || n.statusCheck != "idem_ic_a_status_check" || n.createdIndex != "idem_ic_a_created_at_idx" || n.versionsTable != "idem_ic_a_versions" {
		t.Errorf("fixed names changed: %+v", n)
	}
}

// TestIdentifierOfALongSuffix: a nullable part with a long name makes a
// suffix that leaves no room for the base; Identifier used to panic on it.
func TestIdentifierOfALongSuffix(t *testing.T) {
	suffix := "key_null_shipping_provider_return_authorization_code_idx"
	a := Identifier("idem_lines_return_authorized", suffix)
	b := Identifier("idem_lines_return_authorized", suffix+"_x")
	if len(a) > MaxIdentifier || len(b) > MaxIdentifier || a == b {
		t.Errorf("Identifier gave %q (%d bytes) and %q (%d bytes)", a, len(a), b, len(b))
	}
	if !strings.HasPrefix(a, "idem_lines_return_authorized_key_null_shipping") {
		t.Errorf("Identifier(...) = %q: the start of the name is lost", a)
	}
}

// TestExternalObjectNames: the objects of a claims table have distinct names
// within PostgreSQL's limit, also for a table name of 63 bytes.
func TestExternalObjectNames(t *testing.T) {
	for _, table := range []string{"idem_payments_charge", strings.Repeat("t", MaxIdentifier), "app." + strings.Repeat("x", 60)} {
		names := ExternalObjectNames(model.ExternalInbox{Consumer: "app.x", Table: table})
		if d := duplicate(names); d != "" {
			t.Errorf("table %s: name %s is given twice: %q", table, d, names)
		}
		for _, n := range names {
			if len(n) > MaxIdentifier {
				t.Errorf("table %s: name %s is %d bytes, more than %d", table, n, len(n), MaxIdentifier)
			}
		}
	}
}
