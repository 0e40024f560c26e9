package idem_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/idemgen/idemgen/examples/telemetry"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemtest"
	"github.com/idemgen/idemgen/idem/internal/link"
)

// The janitor keeps the partitions of the inbox of examples/telemetry,
// partitioned by day with a retention of 14 days (336h), at a clock of the
// test's choosing.

const telemetryInbox = "idem_telemetry_reading"

// partitionJanitor is a janitor of the telemetry inbox on db whose clock
// says now.
func partitionJanitor(t testing.TB, db *idemtest.DB, now time.Time) *idem.Janitor {
	t.Helper()
	j, err := idem.NewJanitor(db.Pool, []idem.Maintained{telemetry.NewRecordReadingIdem(db.Pool)},
		link.JanitorClock(func() time.Time { return now }).(idem.JanitorOption))
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// partitions lists the partitions of the telemetry inbox, sorted.
func partitions(t testing.TB, db *idemtest.DB) []string {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), `SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = $1::text::regclass ORDER BY 1`, telemetryInbox)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		out = append(out, name)
	}
	return out
}

// days names the day partitions of the telemetry inbox from first through
// last.
func days(first, last time.Time) []string {
	var out []string
	for d := first; !d.After(last); d = d.AddDate(0, 0, 1) {
		out = append(out, telemetryInbox+"_p"+d.Format("20060102"))
	}
	return out
}

func TestJanitorKeepsPartitions(t *testing.T) {
	db := idemtest.New(t, telemetry.Migrations())
	ctx := context.Background()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

	// The window at noon on 1 December: from the day that holds noon on 17
	// November (336h before) through two days ahead.
	want := days(time.Date(2026, 11, 17, 0, 0, 0, 0, time.UTC), time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC))
	rep, err := partitionJanitor(t, db, now).RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := rep.Created[telemetryInbox]; !slices.Equal(got, want) || len(rep.Dropped) != 0 {
		t.Fatalf("the first round created %v and dropped %v; want %v created, none dropped", got, rep.Dropped, want)
	}
	if got := partitions(t, db); !slices.Equal(got, want) {
		t.Fatalf("partitions after the first round: %v; want %v", got, want)
	}
	rep, err = partitionJanitor(t, db, now).RunOnce(ctx)
	if err != nil || len(rep.Created) != 0 || len(rep.Dropped) != 0 {
		t.Fatalf("a second round at the same time: created %v, dropped %v, %v; want nothing to do", rep.Created, rep.Dropped, err)
	}

	// Two rows in the oldest day, one in the next; then a day later the
	// oldest day is wholly past the retention, and only it goes.
	mustExec(t, db, `INSERT INTO `+telemetryInbox+` (key_reading_id, bucket, fingerprint) VALUES
		('a', '2026-11-17T00:00:00Z', '\x01'), ('b', '2026-11-17T00:00:00Z', '\x01'), ('c', '2026-11-18T00:00:00Z', '\x01')`)
	mustExec(t, db, `ANALYZE `+telemetryInbox)
	rep, err = partitionJanitor(t, db, now.Add(24*time.Hour)).RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := rep.Dropped[telemetryInbox]; !slices.Equal(got, []string{telemetryInbox + "_p20261117"}) {
		t.Errorf("a day later the janitor dropped %v; want the partition of 17 November only", got)
	}
	if got := rep.Created[telemetryInbox]; !slices.Equal(got, []string{telemetryInbox + "_p20261204"}) {
		t.Errorf("a day later the janitor created %v; want the partition of 4 December", got)
	}
	if got := rep.Purged[telemetryInbox]; got != 2 {
		t.Errorf("the dropped partition's rows counted %d in Purged; want 2 (its statistics)", got)
	}
	var left []string
	rows, err := db.Pool.Query(ctx, `SELECT key_reading_id FROM `+telemetryInbox+` ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		left = append(left, k)
	}
	if !slices.Equal(left, []string{"c"}) {
		t.Errorf("rows left: %v; want the one of 18 November", left)
	}
	// A partition attached under another name is left alone, even when
	// its range is long past.
	mustExec(t, db, `CREATE TABLE archive_2025 PARTITION OF `+telemetryInbox+` FOR VALUES FROM ('2025-01-01T00:00:00Z') TO ('2025-01-02T00:00:00Z')`)
	if _, err := partitionJanitor(t, db, now.Add(24*time.Hour)).RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(partitions(t, db), "archive_2025") {
		t.Error("the janitor dropped a partition it did not create")
	}
}

// Janitors in several processes keep the partitions of one inbox at once:
// each partition is created, and dropped, by exactly one of them, and none
// fails.
func TestJanitorsAtOnceKeepEachPartitionOnce(t *testing.T) {
	db := idemtest.New(t, telemetry.Migrations())
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	const janitors = 4
	round := func(at time.Time) (created, dropped []string) {
		t.Helper()
		reps := make([]idem.JanitorReport, janitors)
		errs := make([]error, janitors)
		js := make([]*idem.Janitor, janitors)
		for i := range js {
			js[i] = partitionJanitor(t, db, at)
		}
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range js {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				reps[i], errs[i] = js[i].RunOnce(context.Background())
			}()
		}
		close(start)
		wg.Wait()
		for i, rep := range reps {
			if errs[i] != nil {
				t.Fatalf("janitor %d: %v", i, errs[i])
			}
			created = append(created, rep.Created[telemetryInbox]...)
			dropped = append(dropped, rep.Dropped[telemetryInbox]...)
		}
		slices.Sort(created)
		slices.Sort(dropped)
		return created, dropped
	}
	want := days(time.Date(2026, 11, 17, 0, 0, 0, 0, time.UTC), time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC))
	if created, _ := round(now); !slices.Equal(created, want) {
		t.Errorf("%d janitors at once created %v; want each of %v once", janitors, created, want)
	}
	created, dropped := round(now.Add(48 * time.Hour))
	if wantDropped := days(time.Date(2026, 11, 17, 0, 0, 0, 0, time.UTC), time.Date(2026, 11, 18, 0, 0, 0, 0, time.UTC)); !slices.Equal(dropped, wantDropped) {
		t.Errorf("two days later %d janitors at once dropped %v; want each of %v once", janitors, dropped, wantDropped)
	}
	if wantCreated := days(time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC), time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)); !slices.Equal(created, wantCreated) {
		t.Errorf("two days later %d janitors at once created %v; want each of %v once", janitors, created, wantCreated)
	}
}
