package relay

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/idemgen/idemgen/idem/internal/obs"
)

// outboxTable is the outbox table, as the relay's outage records name the
// database.
const outboxTable = "idem_outbox"

// gaugeTimeout bounds the query behind the outbox gauges at each
// collection: a database that does not answer in time leaves the gauges
// out of that collection rather than holding the reader.
const gaugeTimeout = 2 * time.Second

// registerGauges registers the outbox's observable gauges with the relay's
// meter: one query (Backlog, in sql/outbox.sql) per collection of the
// reader, for the three of them, while Run runs.
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
		b, err := r.q.Backlog(ctx)
		if err != nil {
			return err
		}
		o.ObserveInt64(backlog, b.Pending)
		o.ObserveFloat64(oldest, b.OldestSeconds)
		o.ObserveInt64(dead, b.Dead)
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
