package main

import (
	"time"

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

func (r *report) sizingTargets(w writer) {
	s := r.sizing
	w("| bytes per inbox row and per outbox row reported | inbox %s B a row, outbox %s B a row, heap and indexes, over %s rows each ([below](#sizing)) | reported |\n",
		thousands(s.inbox.perRow()), thousands(s.outbox.perRow()), thousands(float64(s.inbox.rows)))
	write, relay := s.walOutgoing()
	w("| WAL per first delivery, per duplicate and per outgoing message reported | first delivery %s B (the bare UPDATE alone %s B), duplicate %s B, outgoing message %s B written + %s B when the relay marks it | reported |\n",
		thousands(s.walPer(walFirst)), thousands(s.walPer(walBare)), thousands(s.walPer(walDuplicate)), thousands(write), thousands(relay))
	w("| the cost of purging a million rows reported | %s inbox and %s outbox rows in one janitor round: %s, %s of WAL (%s B a row) | reported |\n",
		thousands(float64(s.purged["idem_bench_ledger"])), thousands(float64(s.purged["idem_outbox"])), s.took.Round(time.Millisecond), bytesIEC(float64(s.purgeWA)),
		thousands(float64(s.purgeWA)/float64(max(s.purged["idem_bench_ledger"]+s.purged["idem_outbox"], 1))))
}

func (r *report) writeSizing(w writer) {
	s := r.sizing
	w("## Sizing\n\n")
	w("What the inbox of [`bench/ledger`](bench/ledger/) (`idem_bench_ledger`: text key, fingerprint, JSON result, the retention B-tree) and the outbox (`idem_outbox`) cost in disk and in WAL, measured on one connection in a fresh schema.\n\n")
	w("**Bytes per row.** The rows that the WAL measurements below wrote through the wrapper (first deliveries publishing 0, 1 and 10 messages, the outgoing rows published by the relay) were copied, with new keys of the same shape (`m-<worker>-<seq>`) and new outgoing ids, until each table held %s rows (`INSERT … SELECT generate_series`, %s for both, then `VACUUM ANALYZE`); then `pg_relation_size` of the heap, of each index and of the TOAST table, and `pg_total_relation_size` (all of them with the free space and visibility maps) over the rows. ", thousands(float64(s.inbox.rows)), s.fill.Round(time.Millisecond))
	w("Rows inserted in one go pack the heap and the indexes tighter than rows arriving one delivery at a time among updates and purges; a table that has been purged for a while also holds the free space its purged rows left, which new rows reuse (the file does not shrink without `VACUUM FULL`).\n\n")
	w("| table | relation | kind | bytes | bytes/row |\n| --- | --- | --- | ---: | ---: |\n")
	for _, t := range []tableSize{s.inbox, s.outbox} {
		for _, rel := range t.rels {
			w("| %s | %s | %s | %s | %.1f |\n", t.table, rel.name, rel.kind, bytesIEC(float64(rel.bytes)), float64(rel.bytes)/float64(max(t.rows, 1)))
		}
		w("| %s | **total** (`pg_total_relation_size`), %s rows | | %s | **%.1f** |\n", t.table, thousands(float64(t.rows)), bytesIEC(float64(t.total)), t.perRow())
	}
	w("\n**WAL per message.** On one connection, %s messages of each kind one after another; the WAL between the server's flushed position before and after, read with `pg_walinspect` (`pg_get_wal_records_info`, the extension created in the run's schema): the records that touch a relation of the schema (its tables, indexes, TOAST) and every record of the same transactions (their commits), so that what the other users of the shared server wrote meanwhile is left out. %d repeats, interleaved; the median counts. `full_page_writes` is on: the first change of a page after a checkpoint writes the whole 8 KiB page into the WAL, counted in the column of full-page images (a busy table pays them once per page per checkpoint). The outgoing messages are written without `NOTIFY` (a `NOTIFY` writes no WAL of its own).\n\n", thousands(float64(s.msgs)), len(s.wal[walFirst]))
	w("| kind | bytes per message, each repeat | median | of it full-page images | beyond the bare UPDATE |\n| --- | --- | ---: | ---: | ---: |\n")
	for _, k := range walKinds {
		reps := ""
		for i, v := range s.wal[k] {
			if i > 0 {
				reps += " / "
			}
			reps += thousands(v)
		}
		beyond := "–"
		if k != walBare && k != walRelay && k != walDuplicate {
			beyond = thousands(s.walPer(k) - s.walPer(walBare))
		}
		unit := ""
		if k == walRelay {
			unit = " (per outgoing row)"
		}
		w("| %s%s | %s | %s | %s | %s |\n", k, unit, reps, thousands(s.walPer(k)), thousands(s.fpiPer(k)), beyond)
	}
	write, relay := s.walOutgoing()
	w("\nAn outgoing message adds %s B at its first delivery ((publishing 10 − publishing 0) / 10) and %s B when the relay marks it published.\n\n", thousands(write), thousands(relay))

	total := s.purged["idem_bench_ledger"] + s.purged["idem_outbox"]
	w("**Purging.** The copies were dated past the retention (inbox rows 31 days old, outbox rows published 8 days ago) and one `RunOnce` of `idem.Janitor` (the inbox's `retain=` %s, `WithJanitorOutbox` %s, batches of %d rows, no other load) purged %s inbox and %s outbox rows in %s (%s rows/s) with %d statements, the longest %s, and %s of WAL (%s B a purged row, counted as above, once). ",
		days(s.inboxRetain), days(s.outboxRetain), idem.DefaultJanitorBatchSize, thousands(float64(s.purged["idem_bench_ledger"])), thousands(float64(s.purged["idem_outbox"])),
		s.took.Round(time.Millisecond), thousands(float64(total)/s.took.Seconds()), s.purge.Statements, dur(s.purge.Longest), bytesIEC(float64(s.purgeWA)), thousands(float64(s.purgeWA)/float64(max(total, 1))))
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
	w("### A consumer at %s messages per second\n\n", thousands(scaleRate))
	w("Arithmetic on the numbers above (measured: bytes per row, WAL per message; reasoning: that they hold at that rate, which this machine cannot deliver). %s messages/s is %s first deliveries a day.\n\n", thousands(scaleRate), thousands(perDay))
	w("| | arithmetic | |\n| --- | --- | ---: |\n")
	w("| inbox rows kept (retain= %s, the default) | %s a day × %.0f days | %s rows |\n", days(s.inboxRetain), thousands(perDay), s.inboxRetain.Hours()/24, thousands(inboxRows))
	w("| inbox on disk | %s rows × %.1f B | %s |\n", thousands(inboxRows), s.inbox.perRow(), bytesIEC(inboxRows*s.inbox.perRow()))
	w("| WAL a day, the inbox's share | %s × %s B (first delivery − bare UPDATE) | %s |\n", thousands(perDay), thousands(idemWAL), bytesIEC(perDay*idemWAL))
	w("| WAL a day, with the business UPDATE | %s × %s B | %s |\n", thousands(perDay), thousands(s.walPer(walFirst)), bytesIEC(perDay*s.walPer(walFirst)))
	w("| WAL a day, purging a day's inbox rows | %s × %s B | %s |\n", thousands(perDay), thousands(float64(s.purgeWA)/float64(max(s.purged["idem_bench_ledger"]+s.purged["idem_outbox"], 1))), bytesIEC(perDay*float64(s.purgeWA)/float64(max(s.purged["idem_bench_ledger"]+s.purged["idem_outbox"], 1))))
	outRows := perDay * s.outboxRetain.Hours() / 24
	w("| with one outgoing message each: outbox rows kept (published, %s as in docs/janitor.md) | %s a day × %.0f days | %s rows |\n", days(s.outboxRetain), thousands(perDay), s.outboxRetain.Hours()/24, thousands(outRows))
	w("| outbox on disk | %s rows × %.1f B | %s |\n", thousands(outRows), s.outbox.perRow(), bytesIEC(outRows*s.outbox.perRow()))
	w("| WAL a day, the outgoing messages | %s × (%s + %s) B | %s |\n", thousands(perDay), thousands(write), thousands(relay), bytesIEC(perDay*(write+relay)))
	purgeRate := float64(s.purged["idem_bench_ledger"]+s.purged["idem_outbox"]) / s.took.Seconds()
	w("| one janitor purging a day's inbox rows | %s rows ÷ %s rows/s | %s |\n", thousands(perDay), thousands(purgeRate), (time.Duration(perDay / purgeRate * float64(time.Second))).Round(time.Minute).String())
	w("\n")
}

// days writes a retention in days.
func days(d time.Duration) string {
	if d%(24*time.Hour) == 0 {
		if d == 24*time.Hour {
			return "1 day"
		}
		return thousands(d.Hours()/24) + " days"
	}
	return d.String()
}
