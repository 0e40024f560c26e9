package telemetry_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemgen/idemgen/examples/telemetry"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemtest"
)

// The service as it runs: a janitor keeps the partitions (its first round
// creates those of the two weeks kept and two days ahead), readings inside
// the window are processed once, and a reading outside it is refused for
// the dead-letter queue, alone or in a batch.
func TestReadingsInsideAndOutsideTheWindow(t *testing.T) {
	db := idemtest.New(t, telemetry.Migrations())
	ctx := context.Background()
	record := telemetry.NewRecordReadingIdem(db.Pool)
	janitor, err := idem.NewJanitor(db.Pool, []idem.Maintained{record})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := janitor.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(rep.Created["idem_telemetry_reading"]); n < 17 {
		t.Fatalf("the janitor's first round created %d partitions; want the 15 or 16 days of the window and 2 ahead", n)
	}

	now := time.Now()
	fresh := telemetry.Reading{ReadingID: "r-fresh", DeviceID: "dev-1", TakenAt: now, Value: 1}
	for _, want := range []idem.Outcome{idem.Processed, idem.Duplicate} {
		if o, err := record.Handle(ctx, fresh); err != nil || o != want {
			t.Fatalf("a reading taken now: %v, %v; want %v", o, err, want)
		}
	}
	old := telemetry.Reading{ReadingID: "r-old", DeviceID: "dev-1", TakenAt: now.Add(-15 * 24 * time.Hour), Value: 2}
	future := telemetry.Reading{ReadingID: "r-future", DeviceID: "dev-1", TakenAt: now.Add(4 * 24 * time.Hour), Value: 3}
	for name, msg := range map[string]telemetry.Reading{"15 days old (past the retention)": old, "4 days ahead (no partition yet)": future} {
		_, err := record.Handle(ctx, msg)
		if !errors.Is(err, idem.ErrOutsideWindow) || idem.ActionFor(err) != idem.DeadLetter {
			t.Errorf("a reading %s: %v; want idem.ErrOutsideWindow, dead-lettered", name, err)
		}
	}

	// In a batch, only the readings outside the window are refused.
	next := telemetry.Reading{ReadingID: "r-next", DeviceID: "dev-2", TakenAt: now, Value: 4}
	results, err := record.HandleBatch(ctx, []telemetry.Reading{next, old, future, fresh})
	if err != nil {
		t.Fatal(err)
	}
	if r := results[0]; r.Err != nil || r.Outcome != idem.Processed {
		t.Errorf("a new reading in the batch: %v, %v; want Processed", r.Outcome, r.Err)
	}
	for i, name := range map[int]string{1: "the old reading", 2: "the reading ahead"} {
		if r := results[i]; !errors.Is(r.Err, idem.ErrOutsideWindow) {
			t.Errorf("%s in the batch: %v, %v; want idem.ErrOutsideWindow", name, r.Outcome, r.Err)
		}
	}
	if r := results[3]; r.Err != nil || r.Outcome != idem.Duplicate {
		t.Errorf("the processed reading in the batch: %v, %v; want Duplicate", r.Outcome, r.Err)
	}
	var stored int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM readings`).Scan(&stored); err != nil || stored != 2 {
		t.Errorf("%d readings stored (%v); want 2", stored, err)
	}
}

// The migrations go down to 0, with partitions the janitor created (Down
// drops the parent and them with it), and up again to an empty partitioned
// inbox.
func TestMigrationsGoDownAndUpAgain(t *testing.T) {
	db := idemtest.New(t, telemetry.Migrations())
	ctx := context.Background()
	record := telemetry.NewRecordReadingIdem(db.Pool)
	if _, err := record.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := record.Handle(ctx, telemetry.Reading{ReadingID: "r-1", DeviceID: "dev-1", TakenAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	p := db.Migrations(t, telemetry.Migrations())
	if _, err := p.DownTo(ctx, 0); err != nil {
		t.Fatalf("down to 0: %v", err)
	}
	var left int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname LIKE 'idem_telemetry_reading%'`, db.Schema).Scan(&left); err != nil || left != 0 {
		t.Fatalf("%d relations of the inbox left after down to 0 (%v); want none", left, err)
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatalf("up again: %v", err)
	}
	var kind string
	if err := db.Pool.QueryRow(ctx, `SELECT relkind::text FROM pg_class WHERE oid = 'idem_telemetry_reading'::regclass`).Scan(&kind); err != nil || kind != "p" {
		t.Fatalf("after up again the inbox has relkind %q (%v); want p, a partitioned table", kind, err)
	}
}
