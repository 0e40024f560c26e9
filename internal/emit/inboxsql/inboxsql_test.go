package inboxsql

import (
	"strings"
	"testing"

	"github.com/idemgen/idemgen/internal/model"
)

func TestMigrationStartsWithTheMarkersTheLoaderReads(t *testing.T) {
	h := model.Handler{Consumer: "a.b", Table: "idem_a_b", Key: []model.KeyPart{{Column: "key_id", SQLType: "text"}}}
	lines := strings.SplitN(string(Create(h.Inbox())), "\n", 4)
	if lines[0] != model.SQLHeader || lines[1] != model.InboxMarker+"a.b" {
		t.Errorf("header lines %q, want %q and %q", lines[:2], model.SQLHeader, model.InboxMarker+"a.b")
	}
	if schema, err := model.ParseInbox("a.b", lines[2]); err != nil || !schema.Equal(h.Inbox()) {
		t.Errorf("schema line %q reads back as %+v, %v", lines[2], schema, err)
	}
}

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
