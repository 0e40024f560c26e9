package migrations_test

import (
	"context"
	"io/fs"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/idem/idemtest"
	"github.com/idemgen/idemgen/migrations"
)

// TestUpDownUp applies the outbox chain, migrates down to 0 and up again
// through goose's Go API, as CI's goose CLI round trip does with a folder
// holding the chain: every Down undoes its Up.
func TestUpDownUp(t *testing.T) {
	db := idemtest.New(t, nil)
	ctx := context.Background()
	provider := db.Migrations(t, migrations.FS)
	tableExists := func() bool {
		var ok bool
		if err := db.Pool.QueryRow(ctx, `SELECT to_regclass('idem_outbox') IS NOT NULL`).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if _, err := provider.Up(ctx); err != nil {
		t.Fatalf("up: %v", err)
	}
	if !tableExists() {
		t.Fatal("idem_outbox missing after up")
	}
	if _, err := provider.DownTo(ctx, 0); err != nil {
		t.Fatalf("down to 0: %v", err)
	}
	if tableExists() {
		t.Fatal("idem_outbox still there after down to 0")
	}
	if _, err := provider.Up(ctx); err != nil {
		t.Fatalf("up again: %v", err)
	}
	if !tableExists() {
		t.Fatal("idem_outbox missing after the second up")
	}
}

// TestEveryMigrationCarriesTheMarker checks that idemgen can recognise every
// file of the chain by its marker line, which stands before goose's
// annotations.
func TestEveryMigrationCarriesTheMarker(t *testing.T) {
	names, err := fs.Glob(migrations.FS, "*.sql")
	if err != nil || len(names) == 0 {
		t.Fatalf("no migrations embedded (%v)", err)
	}
	for _, name := range names {
		b, err := fs.ReadFile(migrations.FS, name)
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		marker := strings.Index(text, migrations.Marker+"\n")
		up := strings.Index(text, "-- +goose Up")
		if marker < 0 || up < 0 || marker > up {
			t.Errorf("%s: want a %q line before -- +goose Up", name, migrations.Marker)
		}
		if strings.Contains(text, "Code generated") {
			t.Errorf("%s: a hand-written runtime migration must not claim to be generated", name)
		}
	}
}
