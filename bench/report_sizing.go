package main

import (
	"fmt"
	"strconv"
	"time"

	"github.com/idemgen/idemgen/bench/internal/mdtable"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/relay"
)

// scaleRate is the consumer of the "at scale" arithmetic: messages per
// second, every one a first delivery.
const scaleRate = 10000

// walTarget is the WAL an outgoing message may cost, from its write to its
// publish.
const walTarget = 600

// perRow is a table's bytes per row: everything (heap, indexes, TOAST, the
// free space and visibility maps) over its rows.
func (t tableSize) perRow() float64 { return float64(t.total) / float64(max(t.rows, 1)) }

// walOutgoing is the WAL one outgoing message adds to its first delivery
// through the generated wrapper (the slope from 0 to 10 messages), and what
// the relay writes when it publishes it (claim and delete).
func (s *sizingResults) walOutgoing() (write, relay float64) {
	return (s.walPer(walPub10) - s.walPer(walFirst)) / 10, s.walPer(walRelay)
}

func (r *report) sizingTargets(t *targetTable) {
	s := r.sizing
	in := s.inboxes[0]
	rows := target{doc: "sizing-and-wal", what: "bytes per inbox row and per outbox row, reported", status: reported,
		measured: fmt.Sprintf("inbox %s B, outbox %s B a row", mdtable.Thousands(in.size.perRow()), mdtable.Thousands(s.outbox.perRow()))}
	rows.why.add("rows a table, the heap and the indexes over them (the outbox's waiting for the relay)", "%s", mdtable.Thousands(float64(in.size.rows)))
	t.add(rows)
	write, relay := s.walOutgoing()
	kinds := target{doc: "sizing-and-wal", what: "WAL per first delivery, duplicate and outgoing message, reported", status: reported,
		measured: fmt.Sprintf("%s B, %s B, %s + %s B", mdtable.Thousands(s.walPer(walFirst)), mdtable.Thousands(s.walPer(walDuplicate)), mdtable.Thousands(write), mdtable.Thousands(relay))}
	kinds.why.add("a first delivery", "%s B", mdtable.Thousands(s.walPer(walFirst)))
	kinds.why.add("the bare UPDATE alone", "%s B", mdtable.Thousands(s.walPer(walBare)))
	kinds.why.add("a duplicate", "%s B", mdtable.Thousands(s.walPer(walDuplicate)))
	kinds.why.add("an outgoing message, written", "%s B", mdtable.Thousands(write))
	kinds.why.add("an outgoing message, when the relay publishes it", "%s B", mdtable.Thousands(relay))
	t.add(kinds)
	claimWAL, optWAL := s.walPer(walClaimFirst), s.walPer(walFirst)
	protocols := target{doc: "sizing-and-wal", what: "WAL per first delivery, claim-first → optimistic, reported", status: reported,
		measured: fmt.Sprintf("%s B → %s B", mdtable.Thousands(claimWAL), mdtable.Thousands(optWAL))}
	protocols.why.add("claim-first (WithPessimisticClaim): the claim's INSERT, then the result's UPDATE", "%s B", mdtable.Thousands(claimWAL))
	protocols.why.add("optimistic: one INSERT with the result", "%s B", mdtable.Thousands(optWAL))
	protocols.why.add("of it full-page images, claim-first / optimistic", "%s B / %s B", mdtable.Thousands(s.fpiPer(walClaimFirst)), mdtable.Thousands(s.fpiPer(walFirst)))
	protocols.why.add("the inbox's share, beyond the bare UPDATE, claim-first / optimistic", "%s B / %s B", mdtable.Thousands(claimWAL-s.walPer(walBare)), mdtable.Thousands(optWAL-s.walPer(walBare)))
	t.add(protocols)
	now, before := s.runtimeLayout()
	fpi := (s.fpiPer(walPub10)-s.fpiPer(walFirst))/10 + s.fpiPer(walRelay)
	// The target is what an outgoing message costs where it is written, in
	// a delivery's transaction, whose commit record the inbox pays anyway:
	// the wrapper's slope. The layouts' comparison writes each batch of rows
	// in a transaction of its own, and so carries a share of a commit record
	// a row (a tenth of one, some 3 to 4 bytes): it ranks the layouts.
	out := target{doc: "sizing-and-wal", what: fmt.Sprintf("WAL per outgoing message, write + publish, ≤ %d B", walTarget), status: verdict(write+relay <= walTarget),
		measured: fmt.Sprintf("%s + %s = %s B", mdtable.Thousands(write), mdtable.Thousands(relay), mdtable.Thousands(write+relay))}
	out.why.add("of it full-page images", "%s B", mdtable.Thousands(fpi))
	out.why.add("the layouts side by side (each write with its own commit record), now", "%s B", mdtable.Thousands(now.writePublish()))
	out.why.add("the same, before", "%s B", mdtable.Thousands(before.writePublish()))
	out.why.add("now ÷ before", "%.2f×", now.writePublish()/before.writePublish())
	if out.status == missed {
		least := 0
		for i := range outboxLayouts {
			if s.layouts[i].writePublish() < s.layouts[least].writePublish() {
				least = i
			}
		}
		out.why.add("the least of the layouts measured ("+outboxLayouts[least].name+")", "%s B", mdtable.Thousands(s.layouts[least].writePublish()))
		out.bound = bound{mdtable.Thousands(s.layouts[least].writePublish()) + " B", "least of the layouts"}
	}
	t.add(out)
	purge := target{doc: "sizing-and-wal", what: "the cost of purging a million rows, reported", status: reported,
		measured: fmt.Sprintf("plain %s (%s B a row)", in.took.Round(time.Millisecond), mdtable.Thousands(in.purgeWALPer()))}
	purge.why.add("the plain inbox, rows purged in one janitor round", "%s", mdtable.Thousands(float64(in.purged)))
	purge.why.add("the plain inbox, time and WAL", "%s, %s (%s B a row)", in.took.Round(time.Millisecond), mdtable.IEC(float64(in.purgeWAL)), mdtable.Thousands(in.purgeWALPer()))
	for _, in := range s.inboxes[1:] {
		purge.measured += fmt.Sprintf(", %s %s", layoutShort(in), in.took.Round(time.Millisecond))
		purge.why.add("the "+layoutShort(in)+" inbox, rows dropped", "%s", mdtable.Thousands(float64(in.purged)))
		purge.why.add("the "+layoutShort(in)+" inbox, time and WAL", "%s, %s (%s B a row)", in.took.Round(time.Millisecond), mdtable.IEC(float64(in.purgeWAL)), mdtable.Thousands(in.purgeWALPer()))
	}
	purge.why.add("the outbox's rows to purge (the relay deletes a row once published)", "0")
	t.add(purge)
}

// layoutShort names an inbox layout in a sentence.
func layoutShort(in inboxSizing) string {
	if in.dropped {
		return "partitioned"
	}
	return "plain"
}

func (r *report) writeSizing(w writer) {
	s := r.sizing
	w("## %s\n\n", secSizing)
	w("What the inbox of [`bench/ledger`](bench/ledger/) (`idem_bench_ledger`: text key, fingerprint, JSON result, the retention B-tree) and the outbox (`idem_outbox`) cost in disk and in WAL, measured on one connection in a fresh schema.\n\n")
	in := s.inboxes[0]
	w("**Bytes per row.** The inbox rows that the WAL measurements below wrote through the wrapper were copied, with new keys of the same shape (`m-<worker>-<seq>`), until the inbox held %s rows; the outbox, which keeps no published row, was filled with as many rows waiting for the relay, of the shape the publishing deposit writes, and the outbox of the layout it replaced (the migration 00001, in a schema of its own) with as many published rows, what it kept for the retention (`INSERT … SELECT generate_series`, %s for the three, then `VACUUM ANALYZE`); then `pg_relation_size` of the heap, of each index and of the TOAST table, and `pg_total_relation_size` (all of them with the free space and visibility maps) over the rows. ", mdtable.Thousands(float64(in.size.rows)), s.fill.Round(time.Millisecond))
	w("Rows inserted in one go pack the heap and the indexes tighter than rows arriving one delivery at a time among updates and purges; a table that has been purged for a while also holds the free space its purged rows left, which new rows reuse (the file does not shrink without `VACUUM FULL`). The outbox leaves most of each page free (fillfactor 40, for the claim's HOT update), so a backlog takes about two and a half times the heap full pages would.\n\n")
	w("| layout | table | relation | kind | bytes | bytes/row |\n| --- | --- | --- | --- | ---: | ---: |\n")
	tables := func(layout string, t tableSize) {
		for _, rel := range t.rels {
			w("| %s | %s | %s | %s | %s | %.1f |\n", layout, t.table, rel.name, rel.kind, mdtable.IEC(float64(rel.bytes)), float64(rel.bytes)/float64(max(t.rows, 1)))
		}
		w("| %s | %s | **total** (`pg_total_relation_size`), %s rows | | %s | **%.1f** |\n", layout, t.table, mdtable.Thousands(float64(t.rows)), mdtable.IEC(float64(t.total)), t.perRow())
	}
	for _, in := range s.inboxes {
		tables("inbox: "+in.name, in.size)
	}
	tables("outbox: "+runtimeLayoutName()+", rows waiting for the relay", s.outbox)
	tables("outbox: "+outboxLayouts[0].name+", published rows kept", s.oldOutbox)
	w("\n**WAL per message.** On one connection, %s messages of each kind one after another; the WAL between the server's flushed position before and after, read with `pg_walinspect` (`pg_get_wal_records_info`, the extension created in the run's schema): the records that touch a relation of the schema (its tables, indexes, TOAST) and every record of the same transactions (their commits), so that what the other users of the shared server wrote meanwhile is left out. %d repeats, interleaved; the median counts. `full_page_writes` is on: the first change of a page after a checkpoint writes the whole 8 KiB page into the WAL, counted in the column of full-page images (a busy table pays them once per page per checkpoint). The outgoing messages are written without `NOTIFY` (a `NOTIFY` writes no WAL of its own).\n\n", mdtable.Thousands(float64(s.msgs)), len(s.wal[walFirst]))
	w("| kind | bytes per message, each repeat | median | of it full-page images | beyond the bare UPDATE |\n| --- | --- | ---: | ---: | ---: |\n")
	for _, k := range walKinds {
		beyond := "–"
		if k != walBare && k != walRelay && k != walDuplicate {
			beyond = mdtable.Thousands(s.walPer(k) - s.walPer(walBare))
		}
		unit := ""
		if k == walRelay {
			unit = " (per outgoing row)"
		}
		w("| %s%s | %s | %s | %s | %s |\n", k, unit, repeats(s.wal[k]), mdtable.Thousands(s.walPer(k)), mdtable.Thousands(s.fpiPer(k)), beyond)
	}
	write, relay := s.walOutgoing()
	w("\nAn outgoing message adds %s B at its first delivery ((publishing 10 − publishing 0) / 10) and %s B when the relay publishes it (its claim, a HOT update of the row, and the delete once the broker confirmed): %s B in all.\n\n", mdtable.Thousands(write), mdtable.Thousands(relay), mdtable.Thousands(write+relay))
	r.writeLayouts(w)

	w("**The inbox layouts side by side.** The plain inbox is the one above (`bench/ledger`, its WAL the kinds above). The partitioned one is the inbox of [`examples/telemetry`](examples/telemetry/) (`partition=day time=TakenAt retain=336h`), in a schema of its own: %s readings of today delivered through the generated wrapper, and as many stored by the handler's `INSERT` alone, WAL counted as above, %d repeats, the median; then the day that has just passed the retention was given its partition (named as the janitor names it) and copies of the delivered rows (new keys of the same shape) until the inbox held %s rows, `VACUUM ANALYZE`, and the sizes of every partition's heap, indexes and TOAST (the kept window's empty partitions included) over the rows. The handlers differ (an `UPDATE` of an account, an `INSERT` of a reading): the inbox's share is the delivery's WAL less the handler's own.\n\n",
		mdtable.Thousands(float64(s.msgs)), len(s.wal[walFirst]), mdtable.Thousands(float64(s.inboxes[0].size.rows)))
	w("| inbox layout | retain= | bytes/row | WAL per first delivery | the handler's write alone | the inbox's share |\n| --- | ---: | ---: | ---: | ---: | ---: |\n")
	for _, in := range s.inboxes {
		w("| %s | %s | %.1f | %s B | %s B | %s B |\n", in.name, days(in.retain), in.size.perRow(), mdtable.Thousands(in.walFirst), mdtable.Thousands(in.walBare), mdtable.Thousands(in.inboxWAL()))
	}
	w("\n**Purging.** The plain inbox's copies were dated past the retention (31 days old) and one `RunOnce` of `idem.Janitor` (the inbox's `retain=` %s, batches of %d rows, no other load) purged them; the partitioned inbox's expired day went in one `RunOnce` too, which dropped its partition. The WAL is counted as above, once; for the drop, the records of the transactions whose commit removes the partition's files count too (they touch the catalog, not the inbox's relations). The outbox has nothing to purge: the relay deleted each row as it published it (for the layouts that keep published rows, their purge is in the cleanup column above).\n\n", days(s.inboxRetain), idem.DefaultJanitorBatchSize)
	w("| inbox layout | rows purged | time | rows/s | statements | longest | WAL | WAL per row |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, in := range s.inboxes {
		statements, longest := strconv.Itoa(in.purge.Statements), mdtable.Dur(in.purge.Longest)
		if in.dropped {
			statements, longest = fmt.Sprintf("%d partition dropped", len(in.purge.Dropped[telemetryInbox])), "–"
		}
		w("| %s | %s | %s | %s | %s | %s | %s | %s B |\n", in.name, mdtable.Thousands(float64(in.purged)), in.took.Round(time.Millisecond), mdtable.Thousands(in.purgeRate()),
			statements, longest, mdtable.IEC(float64(in.purgeWAL)), mdtable.Thousands(in.purgeWALPer()))
	}
	if r.purge != nil {
		w("\nUnder load, see [Purge under load](#purge-under-load).")
	}
	w("\n\n")
	r.writeScale(w)
	r.writeBehind(w, secSizing)
}

// writeLayouts is the table of the outbox layouts, side by side.
func (r *report) writeLayouts(w writer) {
	s := r.sizing
	w("### Outbox layouts\n\n")
	w("Ways to keep the outbox, each in a fresh schema of its own, measured in the same repeats as the kinds above, interleaved: %s transactions of 10 outgoing rows (those of a deposit that publishes 10 messages) written by the layout's `INSERT`; published by its claim and its record of the broker's confirmation, in batches of %d on one connection (the relay's statements, without a broker); then cleared away as the layout does it (its purge), with a `VACUUM` (autovacuum is off on these tables so that it writes into no phase; the cleanup's `VACUUM` stands for it). WAL per outgoing row, counted as above; the write includes its transaction's commit record, which the wrapper's slope above leaves out. A `VACUUM` removes only the rows no open transaction may still see: on a shared server another session's snapshot can hold them, and the cleanup column then shows only the purge's own statements.\n\n",
		mdtable.Thousands(float64(s.msgs)), relay.DefaultBatchSize)
	w("| layout | write | publish | **write + publish** | of it full-page images | cleanup |\n| --- | ---: | ---: | ---: | ---: | ---: |\n")
	for i, l := range outboxLayouts {
		m := s.layouts[i]
		name := l.name
		if l.runtime {
			name = "**" + name + "**"
		}
		w("| %s | %s | %s | **%s** | %s | %s |\n", name, mdtable.Thousands(m.walPer("write")), mdtable.Thousands(m.walPer("publish")), mdtable.Thousands(m.writePublish()),
			mdtable.Thousands(m.fpiPer("write")+m.fpiPer("publish")), mdtable.Thousands(m.walPer("cleanup")))
	}
	w("\n")
	for _, l := range outboxLayouts {
		w("- **%s**: %s.\n", l.name, l.what)
	}
	w("\nEach repeat, write + publish:\n\n| layout | each repeat |\n| --- | --- |\n")
	for i, l := range outboxLayouts {
		m := s.layouts[i]
		sums := make([]float64, len(m.wal["write"]))
		for j := range sums {
			sums[j] = m.wal["write"][j] + m.wal["publish"][j]
		}
		w("| %s | %s |\n", l.name, repeats(sums))
	}
	w("\n")
}

// runtimeLayoutName is the name of this release's outbox layout.
func runtimeLayoutName() string {
	for _, l := range outboxLayouts {
		if l.runtime {
			return l.name
		}
	}
	return ""
}

// repeats writes the values of each repeat.
func repeats(xs []float64) string {
	out := ""
	for i, v := range xs {
		if i > 0 {
			out += " / "
		}
		out += mdtable.Thousands(v)
	}
	return out
}

// writeScale is the arithmetic of docs/scale.md, from the numbers above.
func (r *report) writeScale(w writer) {
	s := r.sizing
	perDay := float64(scaleRate) * 86400
	w("### A consumer at %s messages per second\n\n", mdtable.Thousands(scaleRate))
	w("Arithmetic on the numbers above (measured: bytes per row, WAL per message; reasoning: that they hold at that rate, which this machine cannot deliver). %s messages/s is %s first deliveries a day.\n\n", mdtable.Thousands(scaleRate), mdtable.Thousands(perDay))
	w("| | arithmetic | |\n| --- | --- | ---: |\n")
	for _, in := range s.inboxes {
		rows := perDay * in.retain.Hours() / 24
		w("| inbox: %s | | |\n", in.name)
		w("| inbox rows kept (retain= %s) | %s a day × %.0f days | %s rows |\n", days(in.retain), mdtable.Thousands(perDay), in.retain.Hours()/24, mdtable.Thousands(rows))
		w("| inbox on disk | %s rows × %.1f B | %s |\n", mdtable.Thousands(rows), in.size.perRow(), mdtable.IEC(rows*in.size.perRow()))
		w("| WAL a day, the inbox's share | %s × %s B (first delivery − the handler's write alone) | %s |\n", mdtable.Thousands(perDay), mdtable.Thousands(in.inboxWAL()), mdtable.IEC(perDay*in.inboxWAL()))
		w("| WAL a day, with the handler's write | %s × %s B | %s |\n", mdtable.Thousands(perDay), mdtable.Thousands(in.walFirst), mdtable.IEC(perDay*in.walFirst))
		if in.dropped {
			// A day goes in one drop, whatever its rows: its WAL and its
			// time are those of the drop measured (of a day of fewer rows).
			w("| WAL a day, dropping a day's partition | one drop, as measured (%s rows) | %s |\n", mdtable.Thousands(float64(in.purged)), mdtable.IEC(float64(in.purgeWAL)))
			w("| one janitor dropping a day's partition | one drop, as measured | %s |\n", in.took.Round(time.Millisecond))
			continue
		}
		w("| WAL a day, purging a day's inbox rows | %s × %s B | %s |\n", mdtable.Thousands(perDay), mdtable.Thousands(in.purgeWALPer()), mdtable.IEC(perDay*in.purgeWALPer()))
		w("| one janitor purging a day's inbox rows | %s rows ÷ %s rows/s | %s |\n", mdtable.Thousands(perDay), mdtable.Thousands(in.purgeRate()),
			(time.Duration(perDay / in.purgeRate() * float64(time.Second))).Round(time.Minute).String())
	}
	now, before := s.runtimeLayout()
	outRows := perDay * s.outboxRetain.Hours() / 24
	write, relay := s.walOutgoing()
	w("| with one outgoing message each, now (%s) | | |\n", runtimeLayoutName())
	w("| outbox rows kept | none: a row is deleted once published; what waits is the backlog, an hour of it %s rows | %s rows |\n", mdtable.Thousands(float64(scaleRate)*3600), mdtable.Thousands(0))
	w("| outbox on disk | an hour of backlog: %s rows × %.1f B | %s |\n", mdtable.Thousands(float64(scaleRate)*3600), s.outbox.perRow(), mdtable.IEC(float64(scaleRate)*3600*s.outbox.perRow()))
	w("| WAL a day, the outgoing messages | %s × (%s + %s) B (through the wrapper and the relay) | %s |\n", mdtable.Thousands(perDay), mdtable.Thousands(write), mdtable.Thousands(relay), mdtable.IEC(perDay*(write+relay)))
	w("| WAL a day, their cleanup (VACUUM of the deleted rows) | %s × %s B | %s |\n", mdtable.Thousands(perDay), mdtable.Thousands(now.walPer("cleanup")), mdtable.IEC(perDay*now.walPer("cleanup")))
	w("| with one outgoing message each, before (%s) | | |\n", outboxLayouts[0].name)
	w("| outbox rows kept (published, %s as docs/janitor.md advised) | %s a day × %.0f days | %s rows |\n", days(s.outboxRetain), mdtable.Thousands(perDay), s.outboxRetain.Hours()/24, mdtable.Thousands(outRows))
	w("| outbox on disk | %s rows × %.1f B | %s |\n", mdtable.Thousands(outRows), s.oldOutbox.perRow(), mdtable.IEC(outRows*s.oldOutbox.perRow()))
	w("| WAL a day, the outgoing messages | %s × (%s + %s) B ([layouts](#outbox-layouts)) | %s |\n", mdtable.Thousands(perDay), mdtable.Thousands(before.walPer("write")), mdtable.Thousands(before.walPer("publish")), mdtable.IEC(perDay*before.writePublish()))
	w("| WAL a day, their purge (the janitor's DELETE and VACUUM) | %s × %s B | %s |\n", mdtable.Thousands(perDay), mdtable.Thousands(before.walPer("cleanup")), mdtable.IEC(perDay*before.walPer("cleanup")))
	w("\n")
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
