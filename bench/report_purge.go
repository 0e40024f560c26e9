package main

import (
	"fmt"
	"time"

	"github.com/idemgen/idemgen/bench/internal/mdtable"
	"github.com/idemgen/idemgen/bench/internal/stats"
)

// purgeMaxLockWait is the target's bound on a lock wait between the purge
// and a delivery, either way.
const purgeMaxLockWait = 100 * time.Millisecond

// purgeTargets writes the purge part's lines of the Targets table.
func (r *report) purgeTargets(t *targetTable) {
	p := r.purge
	during := target{doc: "the-purge-under-load", what: fmt.Sprintf("p99 while purging %s rows under %d workers, reported", mdtable.Int(p.rows), p.workers), status: reported,
		measured: fmt.Sprintf("%s during, %s without", mdtable.Dur(stats.Percentile(p.during, 99)), mdtable.Dur(stats.Percentile(p.without, 99)))}
	during.why.add("p50 during the purge / without", "%s / %s", mdtable.Dur(stats.Percentile(p.during, 50)), mdtable.Dur(stats.Percentile(p.without, 50)))
	t.add(during)
	if q := p.partitioned; q != nil {
		dropWAL := mdtable.IEC(float64(netPurgeWAL(q.walDuring, q.deliveredDuring, q.walWithout, q.deliveredWithout)))
		deleteWAL := mdtable.IEC(float64(netPurgeWAL(p.walDuring, p.deliveredDuring, p.walWithout, p.deliveredWithout)))
		l := target{doc: "the-purge-under-load", section: secDrop, status: reported,
			what:     fmt.Sprintf("dropping a day's partition of %s rows against the DELETE purge", mdtable.Int(q.rows)),
			measured: fmt.Sprintf("%s, %s WAL; DELETE %s, %s", q.took.Round(time.Millisecond), dropWAL, p.purgeTook.Round(time.Millisecond), deleteWAL)}
		l.why.add("the drop, its time and WAL net of the workers' share", "%s, %s", q.took.Round(time.Millisecond), dropWAL)
		l.why.add("the DELETE-based purge, its time and WAL net of the workers' share", "%s, %s", p.purgeTook.Round(time.Millisecond), deleteWAL)
		l.why.add("p99 during the drop / without", "%s / %s", mdtable.Dur(stats.Percentile(q.during, 99)), mdtable.Dur(stats.Percentile(q.without, 99)))
		t.add(l)
	}
	ok := p.keptLeft == int64(p.keep) && p.left == int64(p.keep)+p.delivered
	t.add(target{doc: "the-purge-under-load", what: "no unexpired row deleted", status: verdict(ok),
		measured: fmt.Sprintf("%s of %s unexpired left, all %s new ones", mdtable.Thousands(float64(p.keptLeft)), mdtable.Int(p.keep), mdtable.Thousands(float64(p.delivered)))})
	worst := max(p.janitorBlocks, p.janitorWaits)
	waits := target{doc: "the-purge-under-load", what: "no purge statement waits on or blocks a delivery > 100 ms", status: verdict(worst <= purgeMaxLockWait),
		measured: fmt.Sprintf("longest waits %s (delivery), %s (janitor)", mdtable.Dur(p.janitorBlocks), mdtable.Dur(p.janitorWaits))}
	waits.why.add("samples of pg_stat_activity", "%d", p.samples)
	waits.why.add("a delivery waiting on the janitor, times seen / longest", "%d / %s", p.blockSeen, mdtable.Dur(p.janitorBlocks))
	waits.why.add("the janitor waiting on a delivery, times seen / longest", "%d / %s", p.waitSeen, mdtable.Dur(p.janitorWaits))
	waits.why.add("purge statements, p99 / longest", "%s / %s", mdtable.Dur(stats.Percentile(p.statements, 99)), mdtable.Dur(p.report.Longest))
	t.add(waits)
}

func (r *report) writePurge(w writer) {
	p := r.purge
	w("## %s\n\n", secPurge)
	w("`idem.Janitor` ([docs/janitor.md](docs/janitor.md)) purges the inbox of [`bench/ledger`](bench/ledger/) (`idem_bench_ledger`, retention 30 days) while %d workers deliver new messages through the generated wrapper (`ledger.PostIdem`, one UPDATE each), on a pool of %d connections; the janitor has a pool of its own (one connection). ", p.workers, p.workers)
	w("Before, the table was seeded with %s rows 31 days old and %s rows 29 days old (`INSERT … SELECT generate_series`, %s, then `VACUUM ANALYZE`). ", mdtable.Thousands(float64(p.rows)), mdtable.Thousands(float64(p.keep)), p.seed.Round(time.Millisecond))
	w("The workers first delivered for %s without the purge, then, in the same schema and the same run, while one `RunOnce` of the janitor purged (batches of %d rows, each one statement: `DELETE … WHERE ctid = ANY (ARRAY(SELECT ctid … ORDER BY created_at LIMIT $2 FOR UPDATE SKIP LOCKED))` on the B-tree of created_at). ", r.cfg.purgeBaseline, p.batch)
	w("During the purge one delivery in %d re-sends the key of an expired row just ahead of the purge (in the batch being deleted or the next; with another payload than the seeded row's), so that deliveries touch the rows the purge locks: it comes back `ErrKeyReused` while its row is there, or is processed anew once the row is gone. ", purgeRedeliverEvery)
	w("A sampler read `pg_stat_activity` with `pg_blocking_pids` every %s during the purge and recorded each backend waiting on a lock, with who held it; a wait seen in consecutive samples counts from the first to the last sample plus one period.\n\n", purgeSampleEvery)
	t := mdtable.New(mdtable.L(""), mdtable.R("deliveries"), mdtable.R("p50"), mdtable.R("p99"), mdtable.R("max"))
	for _, row := range []struct {
		name string
		lat  []time.Duration
	}{{"without the purge", p.without}, {"during the purge", p.during}} {
		t.Row(row.name, mdtable.Int(len(row.lat)), mdtable.Dur(stats.Percentile(row.lat, 50)), mdtable.Dur(stats.Percentile(row.lat, 99)), mdtable.Dur(stats.Percentile(row.lat, 100)))
	}
	w("%s\n", t)
	rate := 0.0
	if p.purgeTook > 0 {
		rate = float64(p.purged) / p.purgeTook.Seconds()
	}
	w("The purge deleted %s rows in %s (%s rows/s) with %d statements, timed on the janitor's connection: p50 %s, p99 %s, the longest %s. ",
		mdtable.Thousands(float64(p.purged)), p.purgeTook.Round(time.Millisecond), mdtable.Thousands(rate), p.report.Statements,
		mdtable.Dur(stats.Percentile(p.statements, 50)), mdtable.Dur(stats.Percentile(p.statements, 99)), mdtable.Dur(p.report.Longest))
	w("A statement's duration bounds how long it can hold a delivery that needs one of its rows; the lock waits below say how long any delivery did wait. ")
	w("%s deliveries re-sent a key at the purge's front: %s found their row (`ErrKeyReused`), %s came after it was purged and were processed anew. ",
		mdtable.Thousands(float64(p.redelivered)), mdtable.Thousands(float64(p.reused)), mdtable.Thousands(float64(p.redelivered-p.reused)))
	w("%s times a redelivery's claim met its row and the purge deleted the row before the read back: a retryable error (`idem.ErrRetryable`), tried again at once as a broker's redelivery would (its latency counts both tries). ", mdtable.Thousands(float64(p.retried)))
	w("Afterwards the table held %s rows: the %s rows a day from expiry and the %s the workers wrote. ", mdtable.Thousands(float64(p.left)), mdtable.Thousands(float64(p.keptLeft)), mdtable.Thousands(float64(p.delivered)))
	w("Lock waits in %d samples: a delivery waiting on the janitor %d times (longest %s), the janitor waiting on a delivery %d times (longest %s), deliveries waiting on each other %d times.\n\n",
		p.samples, p.blockSeen, mdtable.Dur(p.janitorBlocks), p.waitSeen, mdtable.Dur(p.janitorWaits), p.otherWaits)
	r.writeBehind(w, secPurge)
	r.writePurgePartitioned(w)
}

// netPurgeWAL is the WAL a purge wrote: the WAL written while it ran less
// what the deliveries meanwhile wrote, at the WAL per delivery measured
// without the purge. The WAL position is the server's, so other sessions
// add to both measurements.
func netPurgeWAL(during, deliveredDuring, without, deliveredWithout int64) int64 {
	if deliveredWithout == 0 {
		return during
	}
	return max(during-deliveredDuring*without/deliveredWithout, 0)
}

// writePurgePartitioned writes the partitioned layout's section, beside the
// DELETE-based purge of the same run.
func (r *report) writePurgePartitioned(w writer) {
	p, q := r.purge, r.purge.partitioned
	if q == nil {
		return
	}
	w("## %s\n\n", secDrop)
	w("The inbox of [`examples/telemetry`](examples/telemetry/) is partitioned by the day of each reading's own time (`partition=day time=TakenAt retain=336h`, [docs/scale.md](docs/scale.md#partitioned-inboxes)). ")
	w("The day that has just passed the retention was given its partition, as the janitor creates it, with %s rows, and the oldest kept day %s (%s, then `VACUUM ANALYZE`). ",
		mdtable.Thousands(float64(q.rows)), mdtable.Thousands(float64(q.keep)), q.seed.Round(time.Millisecond))
	w("%d workers delivered new readings through the generated wrapper (`telemetry.RecordReadingIdem`, one INSERT each) for %s without the purge, then while one `RunOnce` of `idem.Janitor` dropped the expired day's partition (`DROP TABLE`, in a transaction of its own under a lock timeout), half a second after they started; they went on half a second after it. ",
		p.workers, r.cfg.purgeBaseline)
	w("**WAL** is `pg_current_wal_lsn()` after the purge minus before: the position is the server's, so the deliveries meanwhile (and any other session) add to it; **net** subtracts the deliveries' share at the WAL per delivery measured without the purge.\n\n")
	t := mdtable.New(mdtable.L("layout"), mdtable.L("purge"), mdtable.R("rows"), mdtable.R("time"), mdtable.R("WAL"), mdtable.R("WAL net"),
		mdtable.R("deliveries meanwhile"), mdtable.R("p99 without"), mdtable.R("p99 during"), mdtable.R("max during"))
	t.Row("plain inbox (`bench/ledger`)", fmt.Sprintf("DELETE, %d-row batches", p.batch),
		mdtable.Thousands(float64(p.purged)), p.purgeTook.Round(time.Millisecond).String(), mdtable.IEC(float64(p.walDuring)),
		mdtable.IEC(float64(netPurgeWAL(p.walDuring, p.deliveredDuring, p.walWithout, p.deliveredWithout))), mdtable.Thousands(float64(p.deliveredDuring)),
		mdtable.Dur(stats.Percentile(p.without, 99)), mdtable.Dur(stats.Percentile(p.during, 99)), mdtable.Dur(stats.Percentile(p.during, 100)))
	t.Row("partitioned by day (`examples/telemetry`)", "DROP of the day's partition",
		mdtable.Thousands(float64(q.rows)), q.took.Round(time.Millisecond).String(), mdtable.IEC(float64(q.walDuring)),
		mdtable.IEC(float64(netPurgeWAL(q.walDuring, q.deliveredDuring, q.walWithout, q.deliveredWithout))), mdtable.Thousands(float64(q.deliveredDuring)),
		mdtable.Dur(stats.Percentile(q.without, 99)), mdtable.Dur(stats.Percentile(q.during, 99)), mdtable.Dur(stats.Percentile(q.during, 100)))
	w("%s\n", t)
	w("The two consumers do different business work (an UPDATE of an account, an INSERT of a reading), so compare each layout's p99 during the purge with its own p99 without. ")
	w("The janitor dropped %v; afterwards the inbox held %s rows: the %s of the oldest kept day and the %s the workers wrote.\n\n",
		q.report.Dropped[telemetryInbox], mdtable.Thousands(float64(q.left)), mdtable.Thousands(float64(q.keptLeft)), mdtable.Thousands(float64(q.delivered)))
	r.writeBehind(w, secDrop)
}
