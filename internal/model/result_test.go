package model

import (
	"strings"
	"testing"
)

// TestResultColumnInSchemaLine: a schema line without result= (written before
// idemgen stored results as json) reads as a jsonb result column, and
// evolving it to a handler's inbox changes the column to json once: the new
// line records result=json and reads back equal to what the handler wants
// (the inbox a handler keyed on a string needs, as the SQL emitter maps it).
func TestResultColumnInSchemaLine(t *testing.T) {
	legacy, err := ParseInbox("app.a", "-- idemgen:schema table=idem_app_a key=key_id:text unique=pkey")
	if err != nil || legacy.ResultType() != ResultJSONB {
		t.Fatalf("legacy line: %+v, %v; want a jsonb result column", legacy, err)
	}
	if legacy.Marker() != "-- idemgen:schema table=idem_app_a key=key_id:text unique=pkey" {
		t.Errorf("legacy line renders as %q; it must render as written, or its migration reads as edited", legacy.Marker())
	}
	want := Inbox{Consumer: "app.a", Table: "idem_app_a", Key: []Column{{Name: "key_id", Type: "text"}}, Unique: PrimaryKey, Result: ResultJSON}
	change, err := Evolve(legacy, want)
	if err != nil || !change.ResultJSON || change.Describe() != "result_json" {
		t.Fatalf("Evolve(jsonb, json) = %+v (%q), %v; want the result column changed", change, change.Describe(), err)
	}
	if !strings.HasSuffix(want.Marker(), " result=json") {
		t.Errorf("new line %q does not record result=json", want.Marker())
	}
	back, err := ParseInbox("app.a", want.Marker())
	if err != nil || !back.Equal(want) {
		t.Fatalf("new line reads back as %+v, %v; want it equal to the handler's inbox, so the change is planned once", back, err)
	}
	if _, err := Evolve(want, legacy); err == nil || !strings.Contains(err.Error(), "from json to jsonb") {
		t.Errorf("Evolve(json, jsonb) = %v; want it refused", err)
	}
	if _, err := ParseInbox("app.a", "-- idemgen:schema table=t key=k:text unique=pkey result=xml"); err == nil {
		t.Error("result=xml was accepted")
	}
}
