package inboxsql

import (
	"strings"
	"testing"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/internal/model"
)

// TestEntityNamesAgreeWithRuntime: the SQL idemgen writes spells the
// runtime's names.
func TestEntityNamesAgreeWithRuntime(t *testing.T) {
	if FingerprintColumn != idem.FingerprintColumn || FingerprintSetting != idem.FingerprintSetting || MarkerCheckMessage != idem.MarkerCheckMessage {
		t.Fatalf("inboxsql (%s, %s, %q) and idem (%s, %s, %q) disagree", FingerprintColumn, FingerprintSetting, MarkerCheckMessage,
			idem.FingerprintColumn, idem.FingerprintSetting, idem.MarkerCheckMessage)
	}
}

// TestEntityStatements: the key columns in key order, cast to their types.
func TestEntityStatements(t *testing.T) {
	h := model.Handler{Consumer: "s.e", Entity: &model.Entity{Table: "app.enrollments", Columns: []string{"course_id", "user"}},
		Key: []model.KeyPart{{Path: "CourseID", Kind: model.KeyInt, Bits: 64}, {Path: "User", Kind: model.KeyString}}}
	st := EntityStatementsFor(h)
	want := `SELECT idem_fingerprint FROM app.enrollments WHERE course_id = $1::bigint AND "user" = $2::text`
	if st.Lookup != want {
		t.Errorf("Lookup\n got %s\nwant %s", st.Lookup, want)
	}
	if !strings.Contains(st.Check, `WHERE course_id = $1::bigint AND "user" = $2::text AND idem_fingerprint = decode(`) {
		t.Errorf("Check: %s", st.Check)
	}
}
