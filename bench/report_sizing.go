package main

import (
	"fmt"
	"time"

	"github.com/idemgen/idemgen/bench/internal/mdtable"
	"github.com/idemgen/idemgen/idem"
)

// scaleRate is the consumer of the "at scale" arithmetic: messages per
// second, every one a first delivery.
const scaleRate = 10000

// perRow is a table's bytes per row: everything (heap, indexes, TOAST, the
// free space and visibility maps) over its rows.
func (t tableSize) perRow() float64 { return float64(t.total) / float64(max(t.rows, 1)) }

// walOutgoing is the WAL one outgoing message adds to its first delivery:
// the slope from 0 to 10 messages, plus the relay's marking it published.
func (s *sizingResults) walOutgoing() (write, relay float64) {
	return (s.walPer(walPub10) - s.walPer(walFirst)) / 10, s.walPer(walRelay)
}

func (r *report) sizingTargets(t *targetTable) {
	s := r.sizing
	t.line(reported, "bytes per inbox row and per outbox row reported",
		fmt.Sprintf("inbox %s B a row, outbox %s B a row, heap and indexes, over %s rows each ([below](#sizing))",
			mdtable.Thousands(s.inbox.perRow()), mdtable.Thousands(s.outbox.perRow()), mdtable.Thousands(float64(s.inbox.rows))))
	write, relay := s.walOutgoing()
	t.line(reported, "WAL per first delivery, per duplicate and per outgoing message reported",
		fmt.Sprintf("first delivery %s B (the bare UPDATE alone %s B), duplicate %s B, outgoing message %s B written + %s B when the relay marks it",
			mdtable.Thousands(s.walPer(walFirst)), mdtable.Thousands(s.walPer(walBare)), mdtable.Thousands(s.walPer(walDuplicate)), mdtable.Thousands(write), mdtable.Thousands(relay)))
	t.line(reported, "the cost of purging a million rows reported",
		fmt.Sprintf("%s inbox and %s outbox rows in one janitor round: %s, %s of WAL (%s B a row)",
			mdtable.Thousands(float64(s.purged["idem_bench_ledger"])), mdtable.Thousands(float64(s.purged["idem_outbox"])), s.took.Round(time.Millisecond), mdtable.IEC(float64(s.purgeWA)),
			mdtable.Thousands(s.purgeWALPerRow())))
}

// purgeWALPerRow is the WAL of the purge over the rows it purged.
func (s *sizingResults) purgeWALPerRow() float64 {
	return float64(s.purgeWA) / float64(max(s.purged["idem_bench_ledger"]+s.purged["idem_outbox"], 1))
}

func (r *report) writeSizing(w writer) {
	s := r.sizing
	w("## Sizing\n\n")
	w("What the inbox of [`bench/ledger`](bench/ledger/) (`idem_bench_ledger`: text key, fingerprint, JSON result, the retention B-tree) and the outbox (`idem_outbox`) cost in disk and in WAL, measured on one connection in a fresh schema.\n\n")
	w("**Bytes per row.** The rows that the WAL measurements below wrote through the wrapper (first deliveries publishing 0, 1 and 10 messages, the outgoing rows published by the relay) were copied, with new keys of the same shape (`m-<worker>-<seq>`) and new outgoing ids, until each table held %s rows (`INSERT … SELECT generate_series`, %s for both, then `VACUUM ANALYZE`); then `pg_relation_size` of the heap, of each index and of the TOAST table, and `pg_total_relation_size` (all of them with the free space and visibility maps) over the rows. ", mdtable.Thousands(float64(s.inbox.rows)), s.fill.Round(time.Millisecond))
	w("Rows inserted in one go pack the heap and the indexes tighter than rows arriving one delivery at a time among updates and purges; a table that has been purged for a while also holds the free space its purged rows left, which new rows reuse (the file does not shrink without `VACUUM FULL`).\n\n")
	sizes := mdtable.New(mdtable.L("table"), mdtable.L("relation"), mdtable.L("kind"), mdtable.R("bytes"), mdtable.R("bytes/row"))
	for _, t := range []tableSize{s.inbox, s.outbox} {
		for _, rel := range t.rels {
			sizes.Row(t.table, rel.name, rel.kind, mdtable.IEC(float64(rel.bytes)), fmt.Sprintf("%.1f", float64(rel.bytes)/float64(max(t.rows, 1))))
		}
		sizes.Row(t.table, fmt.Sprintf("**total** (`pg_total_relation_size`), %s rows", mdtable.Thousands(float64(t.rows))), "", mdtable.IEC(float64(t.total)), fmt.Sprintf("**%.1f**", t.perRow()))
	}
	w("%s", sizes)
	w("\n**WAL per message.** On one connection, %s messages of each kind one after another; the WAL between the server's flushed position before and after, read with `pg_walinspect` (`pg_get_wal_records_info`, the extension created in the run's schema): the records that touch a relation of the schema (its tables, indexes, TOAST) and every record of the same transactions (their commits), so that what the other users of the shared server wrote meanwhile is left out. %d repeats, interleaved; the median counts. `full_page_writes` is on: the first change of a page after a checkpoint writes the whole 8 KiB page into the WAL, counted in the column of full-page images (a busy table pays them once per page per checkpoint). The outgoing messages are written without `NOTIFY` (a `NOTIFY` writes no WAL of its own).\n\n", mdtable.Thousands(float64(s.msgs)), len(s.wal[walFirst]))
	wal := mdtable.New(mdtable.L("kind"), mdtable.L("bytes per message, each repeat"), mdtable.R("median"), mdtable.R("of it full-page images"), mdtable.R("beyond the bare UPDATE"))
	for _, k := range walKinds {
		reps := ""
		for i, v := range s.wal[k] {
			if i > 0 {
				reps += " / "
			}
			reps += mdtable.Thousands(v)
		}
		beyond := "–"
		if k != walBare && k != walRelay && k != walDuplicate {
			beyond = mdtable.Thousands(s.walPer(k) - s.walPer(walBare))
		}
		unit := ""
		if k == walRelay {
			unit = " (per outgoing row)"
		}
		wal.Row(k+unit, reps, mdtable.Thousands(s.walPer(k)), mdtable.Thousands(s.fpiPer(k)), beyond)
	}
	w("%s", wal)
	write, relay := s.walOutgoing()
	w("\nAn outgoing message adds %s B at its first delivery ((publishing 10 − publishing 0) / 10) and %s B when the relay marks it published.\n\n", mdtable.Thousands(write), mdtable.Thousands(relay))

	total := s.purged["idem_bench_ledger"] + s.purged["idem_outbox"]
	w("**Purging.** The copies were dated past the retention (inbox rows 31 days old, outbox rows published 8 days ago) and one `RunOnce` of `idem.Janitor` (the inbox's `retain=` %s, `WithJanitorOutbox` %s, batches of %d rows, no other load) purged %s inbox and %s outbox rows in %s (%s rows/s) with %d statements, the longest %s, and %s of WAL (%s B a purged row, counted as above, once). ",
		days(s.inboxRetain), days(s.outboxRetain), idem.DefaultJanitorBatchSize, mdtable.Thousands(float64(s.purged["idem_bench_ledger"])), mdtable.Thousands(float64(s.purged["idem_outbox"])),
		s.took.Round(time.Millisecond), mdtable.Thousands(float64(total)/s.took.Seconds()), s.purge.Statements, mdtable.Dur(s.purge.Longest), mdtable.IEC(float64(s.purgeWA)), mdtable.Thousands(float64(s.purgeWA)/float64(max(total, 1))))
	if r.purge != nil {
		w("Under load, see [Purge under load](#purge-under-load).")
	}
	w("\n\n")
	r.writeScale(w)
}

// writeScale is the arithmetic of docs/scale.md, from the numbers above.
func (r *report) writeScale(w writer) {
	s := r.sizing
	perDay := float64(scaleRate) * 86400
	inboxRows := perDay * s.inboxRetain.Hours() / 24
	write, relay := s.walOutgoing()
	idemWAL := s.walPer(walFirst) - s.walPer(walBare)
	w("### A consumer at %s messages per second\n\n", mdtable.Thousands(scaleRate))
	w("Arithmetic on the numbers above (measured: bytes per row, WAL per message; reasoning: that they hold at that rate, which this machine cannot deliver). %s messages/s is %s first deliveries a day.\n\n", mdtable.Thousands(scaleRate), mdtable.Thousands(perDay))
	t := mdtable.New(mdtable.L(""), mdtable.L("arithmetic"), mdtable.R(""))
	t.Row(fmt.Sprintf("inbox rows kept (retain= %s, the default)", days(s.inboxRetain)), fmt.Sprintf("%s a day × %.0f days", mdtable.Thousands(perDay), s.inboxRetain.Hours()/24), mdtable.Thousands(inboxRows)+" rows")
	t.Row("inbox on disk", fmt.Sprintf("%s rows × %.1f B", mdtable.Thousands(inboxRows), s.inbox.perRow()), mdtable.IEC(inboxRows*s.inbox.perRow()))
	t.Row("WAL a day, the inbox's share", fmt.Sprintf("%s × %s B (first delivery − bare UPDATE)", mdtable.Thousands(perDay), mdtable.Thousands(idemWAL)), mdtable.IEC(perDay*idemWAL))
	t.Row("WAL a day, with the business UPDATE", fmt.Sprintf("%s × %s B", mdtable.Thousands(perDay), mdtable.Thousands(s.walPer(walFirst))), mdtable.IEC(perDay*s.walPer(walFirst)))
	t.Row("WAL a day, purging a day's inbox rows", fmt.Sprintf("%s × %s B", mdtable.Thousands(perDay), mdtable.Thousands(s.purgeWALPerRow())), mdtable.IEC(perDay*s.purgeWALPerRow()))
	outRows := perDay * s.outboxRetain.Hours() / 24
	t.Row(fmt.Sprintf("with one outgoing message each: outbox rows kept (published, %s as in docs/janitor.md)", days(s.outboxRetain)),
		fmt.Sprintf("%s a day × %.0f days", mdtable.Thousands(perDay), s.outboxRetain.Hours()/24), mdtable.Thousands(outRows)+" rows")
	t.Row("outbox on disk", fmt.Sprintf("%s rows × %.1f B", mdtable.Thousands(outRows), s.outbox.perRow()), mdtable.IEC(outRows*s.outbox.perRow()))
	t.Row("WAL a day, the outgoing messages", fmt.Sprintf("%s × (%s + %s) B", mdtable.Thousands(perDay), mdtable.Thousands(write), mdtable.Thousands(relay)), mdtable.IEC(perDay*(write+relay)))
	purgeRate := float64(s.purged["idem_bench_ledger"]+s.purged["idem_outbox"]) / s.took.Seconds()
	t.Row("one janitor purging a day's inbox rows", fmt.Sprintf("%s rows ÷ %s rows/s", mdtable.Thousands(perDay), mdtable.Thousands(purgeRate)),
		(time.Duration(perDay / purgeRate * float64(time.Second))).Round(time.Minute).String())
	w("%s\n", t)
}

// days writes a retention in days.
func days(d time.Duration) string {
	if d%(24*time.Hour) == 0 {
		if d == 24*time.Hour {
			return "1 day"
		}
		return mdtable.Thousands(d.Hours()/24) + " days"
	}
	return d.String()
}
