package migrate

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"testing/fstest"

	"github.com/idemgen/idemgen/idem/idemtest"
	"github.com/idemgen/idemgen/internal/model"
)

// testInbox renders placeholder SQL: the planner's tests are about files, not
// the SQL in them.
var testInbox = InboxKind{
	Create: func(in model.Inbox) []byte { return []byte("-- +goose Up\nCREATE " + in.Table + ";\n") },
	Alter: func(prev, next model.Inbox, c Change) []byte {
		return []byte("-- +goose Up\nALTER " + next.Table + " " + c.Describe() + ";\n")
	},
}

func TestVersion(t *testing.T) {
	for name, want := range map[string]int64{
		"00001_accounts.sql":                1,
		"00042_idem_a.sql":                  42,
		"123456_big.sql":                    123456,
		"1_short.sql":                       1,
		"accounts.sql":                      0,
		"_x.sql":                            0,
		"-0001_negative.sql":                0,
		"00x01_letters.sql":                 0,
		"99999999999999999999_overflow.sql": 0,
	} {
		if got := Version(name); got != want {
			t.Errorf("Version(%q) = %d, want %d", name, got, want)
		}
	}
}

func TestFileName(t *testing.T) {
	for _, c := range []struct {
		version int64
		name    string
		want    string
	}{
		{1, "idem_a", "00001_idem_a.sql"},
		{42, "app_idem_a_add_key_x", "00042_app_idem_a_add_key_x.sql"},
		{123456, "big", "123456_big.sql"},
	} {
		got := FileName(c.version, c.name)
		if got != c.want || Version(got) != c.version {
			t.Errorf("FileName(%d, %q) = %q (version %d), want %q", c.version, c.name, got, Version(got), c.want)
		}
	}
}

// TestReadDir reads the .sql files, the checksum file and the record of
// result shapes, and nothing else; a missing folder is empty.
func TestReadDir(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{
		"00002_b.sql": "b", "00001_a.sql": "a", "notes.txt": "x", SumFile: "sum", ResultsFile: "results",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "00003_dir.sql"), 0o755); err != nil {
		t.Fatal(err)
	}
	d, err := ReadDir(dir)
	want := Dir{Path: dir, Files: []File{{"00001_a.sql", 1, []byte("a")}, {"00002_b.sql", 2, []byte("b")}}, Sum: []byte("sum"), Results: []byte("results")}
	if err != nil || !reflect.DeepEqual(d, want) {
		t.Errorf("ReadDir = %+v, %v; want %+v", d, err, want)
	}
	missing := filepath.Join(dir, "none")
	if d, err := ReadDir(missing); err != nil || !reflect.DeepEqual(d, Dir{Path: missing}) {
		t.Errorf("ReadDir of a missing folder = %+v, %v; want it empty", d, err)
	}
}

// TestIdemtestReadsTheSchemaLine: idemtest, which cannot import this
// package, finds the schema of a schema-qualified inbox in the line
// SchemaLine writes (its copy of SchemaMarker is the same).
func TestIdemtestReadsTheSchemaLine(t *testing.T) {
	_, a, _ := testInbox.Render(nil, model.Inbox{Consumer: "a", Table: "app.inbox_a", Unique: model.PrimaryKey, Key: []model.Column{{Name: "key_id", Type: "text"}}})
	_, b, _ := testInbox.Render(nil, model.Inbox{Consumer: "b", Table: "idem_b", Unique: model.PrimaryKey, Key: []model.Column{{Name: "key_id", Type: "text"}}})
	got, err := idemtest.NamedSchemas(fstest.MapFS{"00001_a.sql": {Data: a}, "00002_b.sql": {Data: b}})
	if err != nil || !reflect.DeepEqual(got, []string{"app"}) {
		t.Errorf("NamedSchemas = %q, %v; want [app]", got, err)
	}
}
