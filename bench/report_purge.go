package main

import "time"

// purgeMaxLockWait is the target's bound on a lock wait between the purge
// and a delivery, either way.
const purgeMaxLockWait = 100 * time.Millisecond

// purgeTargets writes the purge part's lines of the Targets table.
func (r *report) purgeTargets(w writer) {
	p := r.purge
	w("| purging %s expired inbox rows while %d workers deliver: p99 with and without, same run | p99 %s during the purge, %s without; p50 %s / %s ([below](#purge-under-load)) | reported |\n",
		thousands(float64(p.rows)), p.workers, dur(percentile(p.during, 99)), dur(percentile(p.without, 99)), dur(percentile(p.during, 50)), dur(percentile(p.without, 50)))
	if q := p.partitioned; q != nil {
		w("| dropping a day's partition of %s rows while %d workers deliver, beside the DELETE-based purge, same run | drop %s, WAL %s (net of the workers' share) against %s and %s; p99 %s during, %s without ([below](#purging-by-dropping-partitions)) | reported |\n",
			thousands(float64(q.rows)), p.workers, q.took.Round(time.Millisecond), bytesIEC(float64(netPurgeWAL(q.walDuring, q.deliveredDuring, q.walWithout, q.deliveredWithout))),
			p.purgeTook.Round(time.Millisecond), bytesIEC(float64(netPurgeWAL(p.walDuring, p.deliveredDuring, p.walWithout, p.deliveredWithout))),
			dur(percentile(q.during, 99)), dur(percentile(q.without, 99)))
	}
	ok := p.keptLeft == int64(p.keep) && p.left == int64(p.keep)+p.delivered
	w("| no unexpired row deleted | %s of %s rows a day from expiry left, and all %s rows the workers wrote | %s |\n",
		thousands(float64(p.keptLeft)), thousands(float64(p.keep)), thousands(float64(p.delivered)), verdict(ok))
	worst := max(p.janitorBlocks, p.janitorWaits)
	w("| no purge statement waits on or blocks a delivery > 100 ms | lock waits in %d samples of pg_stat_activity: a delivery on the janitor %d (longest %s), the janitor on a delivery %d (longest %s); purge statements p99 %s, longest %s | %s |\n",
		p.samples, p.blockSeen, dur(p.janitorBlocks), p.waitSeen, dur(p.janitorWaits), dur(percentile(p.statements, 99)), dur(p.report.Longest), verdict(worst <= purgeMaxLockWait))
}

func (r *report) writePurge(w writer) {
	p := r.purge
	w("## Purge under load\n\n")
	w("`idem.Janitor` ([docs/janitor.md](docs/janitor.md)) purges the inbox of [`bench/ledger`](bench/ledger/) (`idem_bench_ledger`, retention 30 days) while %d workers deliver new messages through the generated wrapper (`ledger.PostIdem`, one UPDATE each), on a pool of %d connections; the janitor has a pool of its own (one connection). ", p.workers, p.workers)
	w("Before, the table was seeded with %s rows 31 days old and %s rows 29 days old (`INSERT … SELECT generate_series`, %s, then `VACUUM ANALYZE`). ", thousands(float64(p.rows)), thousands(float64(p.keep)), p.seed.Round(time.Millisecond))
	w("The workers first delivered for %s without the purge, then, in the same schema and the same run, while one `RunOnce` of the janitor purged (batches of %d rows, each one statement: `DELETE … WHERE ctid = ANY (ARRAY(SELECT ctid … ORDER BY created_at LIMIT $2 FOR UPDATE SKIP LOCKED))` on the B-tree of created_at). ", r.cfg.purgeBaseline, p.batch)
	w("During the purge one delivery in %d re-sends the key of an expired row just ahead of the purge (in the batch being deleted or the next; with another payload than the seeded row's), so that deliveries touch the rows the purge locks: it comes back `ErrKeyReused` while its row is there, or is processed anew once the row is gone. ", purgeRedeliverEvery)
	w("A sampler read `pg_stat_activity` with `pg_blocking_pids` every %s during the purge and recorded each backend waiting on a lock, with who held it; a wait seen in consecutive samples counts from the first to the last sample plus one period.\n\n", purgeSampleEvery)
	w("| | deliveries | p50 | p99 | max |\n| --- | ---: | ---: | ---: | ---: |\n")
	for _, row := range []struct {
		name string
		lat  []time.Duration
	}{{"without the purge", p.without}, {"during the purge", p.during}} {
		w("| %s | %s | %s | %s | %s |\n", row.name, thousands(float64(len(row.lat))), dur(percentile(row.lat, 50)), dur(percentile(row.lat, 99)), dur(percentile(row.lat, 100)))
	}
	w("\n")
	rate := 0.0
	if p.purgeTook > 0 {
		rate = float64(p.purged) / p.purgeTook.Seconds()
	}
	w("The purge deleted %s rows in %s (%s rows/s) with %d statements, timed on the janitor's connection: p50 %s, p99 %s, the longest %s. ",
		thousands(float64(p.purged)), p.purgeTook.Round(time.Millisecond), thousands(rate), p.report.Statements,
		dur(percentile(p.statements, 50)), dur(percentile(p.statements, 99)), dur(p.report.Longest))
	w("A statement's duration bounds how long it can hold a delivery that needs one of its rows; the lock waits below say how long any delivery did wait. ")
	w("%s deliveries re-sent a key at the purge's front: %s found their row (`ErrKeyReused`), %s came after it was purged and were processed anew. ",
		thousands(float64(p.redelivered)), thousands(float64(p.reused)), thousands(float64(p.redelivered-p.reused)))
	w("%s times a redelivery's claim met its row and the purge deleted the row before the read back: a retryable error (`idem.ErrRetryable`), tried again at once as a broker's redelivery would (its latency counts both tries). ", thousands(float64(p.retried)))
	w("Afterwards the table held %s rows: the %s rows a day from expiry and the %s the workers wrote. ", thousands(float64(p.left)), thousands(float64(p.keptLeft)), thousands(float64(p.delivered)))
	w("Lock waits in %d samples: a delivery waiting on the janitor %d times (longest %s), the janitor waiting on a delivery %d times (longest %s), deliveries waiting on each other %d times.\n\n",
		p.samples, p.blockSeen, dur(p.janitorBlocks), p.waitSeen, dur(p.janitorWaits), p.otherWaits)
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
	w("## Purging by dropping partitions\n\n")
	w("The inbox of [`examples/telemetry`](examples/telemetry/) is partitioned by the day of each reading's own time (`partition=day time=TakenAt retain=336h`, [docs/scale.md](docs/scale.md#partitioned-inboxes)). ")
	w("The day that has just passed the retention was given its partition, as the janitor creates it, with %s rows, and the oldest kept day %s (%s, then `VACUUM ANALYZE`). ",
		thousands(float64(q.rows)), thousands(float64(q.keep)), q.seed.Round(time.Millisecond))
	w("%d workers delivered new readings through the generated wrapper (`telemetry.RecordReadingIdem`, one INSERT each) for %s without the purge, then while one `RunOnce` of `idem.Janitor` dropped the expired day's partition (`DROP TABLE`, in a transaction of its own under a lock timeout), half a second after they started; they went on half a second after it. ",
		p.workers, r.cfg.purgeBaseline)
	w("**WAL** is `pg_current_wal_lsn()` after the purge minus before: the position is the server's, so the deliveries meanwhile (and any other session) add to it; **net** subtracts the deliveries' share at the WAL per delivery measured without the purge.\n\n")
	w("| layout | purge | rows | time | WAL | WAL net | deliveries meanwhile | p99 without | p99 during | max during |\n| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	w("| plain inbox (`bench/ledger`) | DELETE, %d-row batches | %s | %s | %s | %s | %s | %s | %s | %s |\n", p.batch,
		thousands(float64(p.purged)), p.purgeTook.Round(time.Millisecond), bytesIEC(float64(p.walDuring)),
		bytesIEC(float64(netPurgeWAL(p.walDuring, p.deliveredDuring, p.walWithout, p.deliveredWithout))), thousands(float64(p.deliveredDuring)),
		dur(percentile(p.without, 99)), dur(percentile(p.during, 99)), dur(percentile(p.during, 100)))
	w("| partitioned by day (`examples/telemetry`) | DROP of the day's partition | %s | %s | %s | %s | %s | %s | %s | %s |\n\n",
		thousands(float64(q.rows)), q.took.Round(time.Millisecond), bytesIEC(float64(q.walDuring)),
		bytesIEC(float64(netPurgeWAL(q.walDuring, q.deliveredDuring, q.walWithout, q.deliveredWithout))), thousands(float64(q.deliveredDuring)),
		dur(percentile(q.without, 99)), dur(percentile(q.during, 99)), dur(percentile(q.during, 100)))
	w("The two consumers do different business work (an UPDATE of an account, an INSERT of a reading), so compare each layout's p99 during the purge with its own p99 without. ")
	w("The janitor dropped %v; afterwards the inbox held %s rows: the %s of the oldest kept day and the %s the workers wrote.\n\n",
		q.report.Dropped[telemetryInbox], thousands(float64(q.left)), thousands(float64(q.keptLeft)), thousands(float64(q.delivered)))
}
