package main

import (
	"testing"
	"time"
)

// TestSizingPartTiny runs the sizing part small: 20,000 rows a table, 50
// deliveries a WAL measurement, 2 repeats. The part itself checks that the
// janitor purged exactly the inbox's copies and that every layout published
// every row; this checks that every relation was measured, that the numbers
// are in the range a row of these tables can have, that a first delivery
// writes more WAL than a duplicate, that every outbox layout wrote WAL in
// each phase, that the runtime's layout publishes with less WAL than the one
// it replaced, that the outbox it replaced was filled with published rows,
// that the partitioned inbox (examples/telemetry) was filled, delivered to
// and dropped, for less WAL a row than the plain inbox's purge, and that the
// report writes its sections and its targets.
func TestSizingPartTiny(t *testing.T) {
	ctx, url := testDB(t, 5*time.Minute)
	cfg := &config{db: url, accounts: 100, sizeRows: 20000, walMsgs: 50, walRepeats: 2}
	res, err := runSizing(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	in := res.inboxes[0]
	write, relay := res.walOutgoing()
	t.Logf("inbox %.1f B/row over %d rows, outbox %.1f B/row over %d; WAL: bare %.0f, first %.0f, duplicate %.0f, outgoing %.0f + relay %.0f; purged %d in %s",
		in.size.perRow(), in.size.rows, res.outbox.perRow(), res.outbox.rows, res.walPer(walBare), res.walPer(walFirst), res.walPer(walDuplicate), write, relay, in.purged, in.took)
	if in.size.rows != 20000 || res.outbox.rows != 20000 {
		t.Fatalf("filled to %d inbox and %d outbox rows, want 20000", in.size.rows, res.outbox.rows)
	}
	// An inbox row holds a key, a 33-byte fingerprint, a JSON result and
	// three timestamps, in the heap and two B-trees: more than 100 bytes,
	// less than a kilobyte. An outbox row is wider, and its pages are half
	// empty.
	if r := in.size.perRow(); r < 100 || r > 1000 {
		t.Errorf("inbox: %.1f bytes a row", r)
	}
	if r := res.outbox.perRow(); r < 150 || r > 3000 {
		t.Errorf("outbox: %.1f bytes a row", r)
	}
	var indexes int
	for _, rel := range in.size.rels {
		if rel.kind == "index" && rel.bytes > 0 {
			indexes++
		}
	}
	if indexes != 2 {
		t.Errorf("inbox: %d non-empty indexes measured, want 2 (the key, created_at): %+v", indexes, in.size.rels)
	}
	if res.walPer(walFirst) <= res.walPer(walBare) || res.walPer(walFirst) <= res.walPer(walDuplicate) || write <= 0 || relay <= 0 {
		t.Errorf("WAL: first delivery %.0f, bare %.0f, duplicate %.0f, outgoing %.0f, relay %.0f", res.walPer(walFirst), res.walPer(walBare), res.walPer(walDuplicate), write, relay)
	}
	for i, l := range outboxLayouts {
		m := res.layouts[i]
		t.Logf("%s: write %.0f, publish %.0f, cleanup %.0f B/row", l.name, m.walPer("write"), m.walPer("publish"), m.walPer("cleanup"))
		if len(m.wal["write"]) != cfg.walRepeats || m.walPer("write") <= 0 || m.walPer("publish") <= 0 {
			t.Errorf("%s: WAL per phase %v", l.name, m.wal)
		}
	}
	if len(res.inboxes) != 2 {
		t.Fatalf("%d inbox layouts measured, want 2 (plain, partitioned)", len(res.inboxes))
	}
	part := res.inboxes[1]
	t.Logf("partitioned inbox %.1f B/row over %d rows; WAL: first %.0f, the INSERT alone %.0f; dropped %d rows in %s, %d B of WAL",
		part.size.perRow(), part.size.rows, part.walFirst, part.walBare, part.purged, part.took, part.purgeWAL)
	if !part.dropped || part.size.rows != 20000 || part.size.perRow() < 50 || part.size.perRow() > 2000 {
		t.Errorf("the partitioned inbox: %d rows, %.1f B a row", part.size.rows, part.size.perRow())
	}
	if part.walFirst <= part.walBare || part.walBare <= 0 || part.inboxWAL() <= 0 {
		t.Errorf("the partitioned inbox's WAL: first delivery %.0f, the INSERT alone %.0f", part.walFirst, part.walBare)
	}
	// Dropping a partition writes catalog changes, not a record a row: less
	// WAL a row than the DELETE of the plain inbox's purge.
	if part.purged != part.size.rows-int64(cfg.walRepeats*cfg.walMsgs) || part.purgeWAL <= 0 || part.purgeWALPer() >= in.purgeWALPer() {
		t.Errorf("the partitioned inbox's drop: %d rows, %d B of WAL (%.1f B a row; the plain purge %.1f)", part.purged, part.purgeWAL, part.purgeWALPer(), in.purgeWALPer())
	}
	now, before := res.runtimeLayout()
	if now.walPer("publish") >= before.walPer("publish") {
		t.Errorf("publish: %.0f B a row now, %.0f before", now.walPer("publish"), before.walPer("publish"))
	}
	if res.oldOutbox.rows != 20000 || res.oldOutbox.perRow() < 150 || res.oldOutbox.perRow() > 2000 {
		t.Errorf("the outbox of 00001: %d rows, %.1f B a row", res.oldOutbox.rows, res.oldOutbox.perRow())
	}
	r := &report{cfg: cfg, sizing: res}
	md := reportHas(t, []string{"## Sizing", "### Outbox layouts", "### A consumer at 10,000 messages per second", "| idem_bench_ledger | **total**", "| inbox: " + partitionedInboxName + " | idem_telemetry_reading | **total**", "**The inbox layouts side by side.**",
		"WAL per first delivery, duplicate and outgoing message, reported", "WAL per outgoing message, write + publish", "### Behind the targets: Sizing"},
		r.writeTargets, r.writeSizing)
	t.Log(md)
	checkTargets(t, md)
}
