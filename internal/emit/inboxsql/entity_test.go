package inboxsql

import (
	"slices"
	"testing"

	"github.com/idemgen/idemgen/idem/idemimpl"
	"github.com/idemgen/idemgen/internal/model"
)

// TestEntityNamesAgreeWithRuntime: the SQL idemgen writes spells the
// runtime's names.
func TestEntityNamesAgreeWithRuntime(t *testing.T) {
	if FingerprintColumn != idemimpl.FingerprintColumn || FingerprintSetting != idemimpl.FingerprintSetting {
		t.Fatalf("inboxsql (%s, %s) and idem (%s, %s) disagree", FingerprintColumn, FingerprintSetting,
			idemimpl.FingerprintColumn, idemimpl.FingerprintSetting)
	}
}

// TestEntityKeyColumns: the business table's columns in key order, quoted
// where needed, with the types of their Go facts.
func TestEntityKeyColumns(t *testing.T) {
	h := model.Handler{Consumer: "s.e", Entity: &model.Entity{Table: "app.enrollments", Columns: []string{"course_id", "user"}},
		Key: []model.KeyPart{{Path: "CourseID", Kind: model.KeyInt, Bits: 64}, {Path: "User", Kind: model.KeyString}}}
	got := KeyColumns(h, h.Entity.Columns)
	want := []KeyColumn{{Field: "CourseID", Name: "course_id", Type: "bigint"}, {Field: "User", Name: `"user"`, Type: "text"}}
	if !slices.Equal(got, want) {
		t.Errorf("KeyColumns\n got %+v\nwant %+v", got, want)
	}
}
