// Package obstest reads what idem's instruments recorded, for the tests of
// the components: an OpenTelemetry SDK MeterProvider with a ManualReader, and
// the values of its counters, histograms and gauges by name and attributes.
package obstest

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/idemgen/idemgen/idem/internal/obs"
)

// Meter is an SDK MeterProvider whose ManualReader a test collects.
type Meter struct {
	*sdkmetric.MeterProvider
	Reader *sdkmetric.ManualReader
}

// New returns a Meter, shut down at the end of the test.
func New(t testing.TB) *Meter {
	r := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	return &Meter{MeterProvider: mp, Reader: r}
}

// Snapshot is one collection: the metrics of idem's meter by name.
type Snapshot map[string]metricdata.Metrics

// Collect collects the reader once.
func (m *Meter) Collect(t testing.TB) Snapshot {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := m.Reader.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("collect the metrics: %v", err)
	}
	out := Snapshot{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != obs.MeterName {
			continue
		}
		for _, x := range sm.Metrics {
			out[x.Name] = x
		}
	}
	return out
}

// Int returns the value of the int64 counter or gauge name at exactly the
// attributes kv (0 when it has no such point).
func (s Snapshot) Int(t testing.TB, name string, kv ...attribute.KeyValue) int64 {
	t.Helper()
	want := attribute.NewSet(kv...)
	switch d := s[name].Data.(type) {
	case nil:
		return 0
	case metricdata.Sum[int64]:
		for _, p := range d.DataPoints {
			if p.Attributes.Equals(&want) {
				return p.Value
			}
		}
	case metricdata.Gauge[int64]:
		for _, p := range d.DataPoints {
			if p.Attributes.Equals(&want) {
				return p.Value
			}
		}
	default:
		t.Fatalf("%s is a %T, not an int64 counter or gauge", name, d)
	}
	return 0
}

// Float returns the value of the float64 gauge name at exactly kv, and
// whether it has that point.
func (s Snapshot) Float(t testing.TB, name string, kv ...attribute.KeyValue) (float64, bool) {
	t.Helper()
	want := attribute.NewSet(kv...)
	d, ok := s[name].Data.(metricdata.Gauge[float64])
	if !ok {
		return 0, false
	}
	for _, p := range d.DataPoints {
		if p.Attributes.Equals(&want) {
			return p.Value, true
		}
	}
	return 0, false
}

// HistogramCount returns the count of the float64 histogram name at
// exactly kv.
func (s Snapshot) HistogramCount(t testing.TB, name string, kv ...attribute.KeyValue) uint64 {
	t.Helper()
	want := attribute.NewSet(kv...)
	switch d := s[name].Data.(type) {
	case nil:
		return 0
	case metricdata.Histogram[float64]:
		for _, p := range d.DataPoints {
			if p.Attributes.Equals(&want) {
				return p.Count
			}
		}
	default:
		t.Fatalf("%s is a %T, not a float64 histogram", name, d)
	}
	return 0
}

// Points returns how many points (attribute sets) the metric name has.
func (s Snapshot) Points(name string) int {
	switch d := s[name].Data.(type) {
	case metricdata.Sum[int64]:
		return len(d.DataPoints)
	case metricdata.Histogram[float64]:
		return len(d.DataPoints)
	case metricdata.Gauge[int64]:
		return len(d.DataPoints)
	case metricdata.Gauge[float64]:
		return len(d.DataPoints)
	}
	return 0
}
