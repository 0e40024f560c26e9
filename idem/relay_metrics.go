package idem

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/idemgen/idemgen/idem/internal/obs"
)

// outboxTable is the outbox table, as idem.purged names it.
const outboxTable = "idem_outbox"

// gaugeTimeout bounds the query behind the outbox gauges at each
// collection: a database that does not answer in time leaves the gauges
// out of that collection rather than holding the reader.
const gaugeTimeout = 2 * time.Second

// outboxGaugeQuery reads the outbox gauges in one statement, each part
// through a partial index of the outbox migration: the pending rows and the
// oldest of them through idem_outbox_due (published_at IS NULL AND dead_at IS
// NULL), the dead rows through idem_outbox_dead (an index-only count). It
// reads only unpublished rows, never the published ones that wait for the
// purge, so its cost is the backlog's size, not the table's.
const outboxGaugeQuery = `SELECT p.pending, coalesce(extract(epoch FROM now() - p.oldest), 0)::float8, d.dead
FROM (SELECT count(*)::bigint AS pending, min(created_at) AS oldest FROM idem_outbox WHERE published_at IS NULL AND dead_at IS NULL) AS p,
     (SELECT count(*)::bigint AS dead FROM idem_outbox WHERE dead_at IS NOT NULL) AS d`

// registerGauges registers the outbox's observable gauges with the relay's
// meter: one query (outboxGaugeQuery) per collection of the reader, for the
// three of them, while Run runs.
func (r *Relay) registerGauges() (metric.Registration, error) {
	m := r.ins.Meter()
	backlog, err := m.Int64ObservableGauge(obs.NameOutboxBacklog, metric.WithUnit("{message}"),
		metric.WithDescription("Outbox rows neither published nor dead."))
	if err != nil {
		return nil, err
	}
	oldest, err := m.Float64ObservableGauge(obs.NameOutboxOldestAge, metric.WithUnit("s"),
		metric.WithDescription("Age of the oldest outbox row neither published nor dead; 0 when there is none."))
	if err != nil {
		return nil, err
	}
	dead, err := m.Int64ObservableGauge(obs.NameOutboxDead, metric.WithUnit("{message}"),
		metric.WithDescription("Dead-lettered outbox rows (kept, never published)."))
	if err != nil {
		return nil, err
	}
	return m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		ctx, cancel := context.WithTimeout(ctx, gaugeTimeout)
		defer cancel()
		var (
			pending, deadRows int64
			age               float64
		)
		if err := queryRow(ctx, r.db, outboxGaugeQuery, nil, &pending, &age, &deadRows); err != nil {
			return err
		}
		o.ObserveInt64(backlog, pending)
		o.ObserveFloat64(oldest, age)
		o.ObserveInt64(dead, deadRows)
		return nil
	}, backlog, oldest, dead)
}

// countByDestination calls add once per destination of rows with the number
// of rows that have it.
func countByDestination(rows []claimedRow, add func(dest string, n int64)) {
	if len(rows) == 0 {
		return
	}
	counts := make(map[string]int64, 1)
	order := make([]string, 0, 1)
	for _, row := range rows {
		if _, seen := counts[row.Destination]; !seen {
			order = append(order, row.Destination)
		}
		counts[row.Destination]++
	}
	for _, d := range order {
		add(d, counts[d])
	}
}
