package main

import (
	"testing"
	"time"
)

// TestSizingPartTiny runs the sizing part small: 20,000 rows a table, 50
// deliveries a WAL measurement, 2 repeats. The part itself checks that the
// janitor purged exactly the copies; this checks that every relation was
// measured, that the numbers are in the range a row of these tables can
// have, that a first delivery writes more WAL than a duplicate, and that
// the report writes its section and its targets.
func TestSizingPartTiny(t *testing.T) {
	ctx, url := testDB(t, 3*time.Minute)
	cfg := &config{db: url, accounts: 100, sizeRows: 20000, walMsgs: 50, walRepeats: 2}
	res, err := runSizing(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	write, relay := res.walOutgoing()
	t.Logf("inbox %.1f B/row over %d rows, outbox %.1f B/row over %d; WAL: bare %.0f, first %.0f, duplicate %.0f, outgoing %.0f + relay %.0f; purged %v in %s",
		res.inbox.perRow(), res.inbox.rows, res.outbox.perRow(), res.outbox.rows, res.walPer(walBare), res.walPer(walFirst), res.walPer(walDuplicate), write, relay, res.purged, res.took)
	if res.inbox.rows != 20000 || res.outbox.rows != 20000 {
		t.Fatalf("filled to %d inbox and %d outbox rows, want 20000", res.inbox.rows, res.outbox.rows)
	}
	// An inbox row holds a key, a 33-byte fingerprint, a JSON result and
	// three timestamps, in the heap and two B-trees: more than 100 bytes,
	// less than a kilobyte. An outbox row is wider.
	if r := res.inbox.perRow(); r < 100 || r > 1000 {
		t.Errorf("inbox: %.1f bytes a row", r)
	}
	if r := res.outbox.perRow(); r < 150 || r > 2000 {
		t.Errorf("outbox: %.1f bytes a row", r)
	}
	var indexes int
	for _, rel := range res.inbox.rels {
		if rel.kind == "index" && rel.bytes > 0 {
			indexes++
		}
	}
	if indexes != 2 {
		t.Errorf("inbox: %d non-empty indexes measured, want 2 (the key, created_at): %+v", indexes, res.inbox.rels)
	}
	if res.walPer(walFirst) <= res.walPer(walBare) || res.walPer(walFirst) <= res.walPer(walDuplicate) || write <= 0 || relay <= 0 {
		t.Errorf("WAL: first delivery %.0f, bare %.0f, duplicate %.0f, outgoing %.0f, relay %.0f", res.walPer(walFirst), res.walPer(walBare), res.walPer(walDuplicate), write, relay)
	}
	r := &report{cfg: cfg, sizing: res}
	t.Log(reportHas(t, []string{"## Sizing", "### A consumer at 10,000 messages per second", "| idem_bench_ledger | **total**", "WAL per first delivery, per duplicate and per outgoing message reported"},
		r.writeTargets, r.writeSizing))
}
