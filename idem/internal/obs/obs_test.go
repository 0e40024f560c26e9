package obs_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/idemgen/idemgen/idem/internal/obs"
)

func collect(t *testing.T, r *sdkmetric.ManualReader) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != obs.MeterName {
			t.Errorf("scope %q, want %q", sm.Scope.Name, obs.MeterName)
		}
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

func sum(t *testing.T, m metricdata.Metrics, kv ...attribute.KeyValue) int64 {
	t.Helper()
	want := attribute.NewSet(kv...)
	s, ok := m.Data.(metricdata.Sum[int64])
	if !ok {
		t.Fatalf("%s is %T, not an int64 sum", m.Name, m.Data)
	}
	for _, dp := range s.DataPoints {
		if dp.Attributes.Equals(&want) {
			return dp.Value
		}
	}
	return 0
}

func TestInstrumentsRecordUnderTheirNames(t *testing.T) {
	ctx := context.Background()
	r := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	in := obs.New(mp)
	if obs.New(mp) != in {
		t.Fatal("New made the instruments of one provider twice")
	}
	c := in.Consumer("billing.Charge")
	if in.Consumer("billing.Charge") != c {
		t.Fatal("Consumer made the attribute sets of one consumer twice")
	}
	for _, o := range obs.Outcomes() {
		for range int(o) + 1 {
			c.Outcome(ctx, o, 3*time.Millisecond)
		}
	}
	c.LeaseTakeover(ctx)
	c.SweeperResets(ctx, 4)
	c.SweeperResets(ctx, 0)
	in.Purged(ctx, "inbox_a", obs.KindInbox, 7)
	in.Published(ctx, "orders", 2)
	in.PublishFailures(ctx, "orders", 1)
	in.DeadLetter(ctx, obs.SystemRabbitMQ, "orders.q")
	in.Retry(ctx, obs.SystemKafka, "orders")
	in.Retry(ctx, obs.SystemKafka, "orders")

	ms := collect(t, r)
	cons := obs.AttrConsumer.String("billing.Charge")
	for _, o := range obs.Outcomes() {
		if got := sum(t, ms[obs.NameDeliveries], cons, obs.AttrOutcome.String(o.String())); got != int64(o)+1 {
			t.Errorf("%s{%s} = %d, want %d", obs.NameDeliveries, o, got, int64(o)+1)
		}
	}
	h := ms[obs.NameHandlerDuration].Data.(metricdata.Histogram[float64])
	if len(h.DataPoints) != len(obs.Outcomes()) {
		t.Errorf("%d histogram points, want one per outcome", len(h.DataPoints))
	}
	for name, want := range map[string]int64{obs.NameLeaseTakeovers: 1, obs.NameSweeperResets: 4} {
		if got := sum(t, ms[name], cons); got != want {
			t.Errorf("%s = %d, want %d", name, got, want)
		}
	}
	if got := sum(t, ms[obs.NamePurged], obs.AttrTable.String("inbox_a"), obs.AttrKind.String(obs.KindInbox)); got != 7 {
		t.Errorf("purged = %d, want 7", got)
	}
	if got := sum(t, ms[obs.NameRelayPublished], obs.AttrDestination.String("orders")); got != 2 {
		t.Errorf("published = %d, want 2", got)
	}
	if got := sum(t, ms[obs.NameRelayFailures], obs.AttrDestination.String("orders")); got != 1 {
		t.Errorf("failures = %d, want 1", got)
	}
	if got := sum(t, ms[obs.NameDeadLetters], obs.AttrSystem.String("rabbitmq"), obs.AttrDestination.String("orders.q")); got != 1 {
		t.Errorf("dead letters = %d, want 1", got)
	}
	if got := sum(t, ms[obs.NameRetries], obs.AttrSystem.String("kafka"), obs.AttrDestination.String("orders")); got != 2 {
		t.Errorf("retries = %d, want 2", got)
	}
	units := map[string]string{obs.NameDeliveries: "{delivery}", obs.NameHandlerDuration: "s", obs.NamePurged: "{row}"}
	for name, unit := range units {
		if ms[name].Unit != unit {
			t.Errorf("%s has unit %q, want %q", name, ms[name].Unit, unit)
		}
	}
}

func TestLogRecord(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx := context.Background()
	obs.Log(ctx, l, obs.Delivery{Consumer: "c", Key: "ID=k1", Outcome: obs.KeyReused, Attempt: 2,
		Duration: time.Millisecond, Err: errors.New("boom")})
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"msg": obs.DeliveryMsg, "level": "ERROR", "consumer": "c", "key": "ID=k1",
		"outcome": "key_reused", "attempt": 2.0, "duration": 1e6, "err": "boom"}
	for k, v := range want {
		if rec[k] != v {
			t.Errorf("%s = %v, want %v (record %s)", k, rec[k], v, buf.String())
		}
	}
	if obs.Enabled(ctx, slog.New(slog.NewTextHandler(&buf, nil)), obs.Processed) {
		t.Error("a processed record is logged at Info")
	}
}
