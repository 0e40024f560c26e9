package partition

import (
	"strings"
	"testing"
	"time"
)

func TestBucketStartAndNext(t *testing.T) {
	at := time.Date(2026, 12, 3, 14, 25, 7, 123, time.FixedZone("CET", 3600)) // Thursday, 13:25 UTC
	for _, c := range []struct {
		b           Bucket
		start, next string
	}{
		{Hour, "2026-12-03T13:00:00Z", "2026-12-03T14:00:00Z"},
		{Day, "2026-12-03T00:00:00Z", "2026-12-04T00:00:00Z"},
		{Week, "2026-11-30T00:00:00Z", "2026-12-07T00:00:00Z"}, // the Monday before
		{Month, "2026-12-01T00:00:00Z", "2027-01-01T00:00:00Z"},
	} {
		start := c.b.Start(at)
		if got := start.Format(time.RFC3339); got != c.start {
			t.Errorf("%s: Start(%v) = %s; want %s (UTC)", c.b, at, got, c.start)
		}
		if got := c.b.Next(start).Format(time.RFC3339); got != c.next {
			t.Errorf("%s: Next(%s) = %s; want %s", c.b, c.start, got, c.next)
		}
		if !c.b.Start(start).Equal(start) || !c.b.Start(c.b.Next(start).Add(-time.Nanosecond)).Equal(start) {
			t.Errorf("%s: the bucket of %s runs from its start to just before the next", c.b, c.start)
		}
		if d := c.b.Next(start).Sub(start); d > c.b.Longest() {
			t.Errorf("%s: a bucket of %v, longer than Longest %v", c.b, d, c.b.Longest())
		}
	}
	// A Monday is the start of its own week; a Sunday belongs to the week
	// that began six days before.
	monday := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	if got := Week.Start(monday.Add(6*24*time.Hour + 23*time.Hour)); !got.Equal(monday) {
		t.Errorf("Week.Start(Sunday 23:00) = %v; want %v", got, monday)
	}
}

func TestNameRoundTrip(t *testing.T) {
	start := time.Date(2026, 12, 1, 14, 0, 0, 0, time.UTC)
	long := strings.Repeat("x", 60)
	for _, c := range []struct {
		parent string
		b      Bucket
		want   string
	}{
		{"idem_telemetry_reading", Day, "idem_telemetry_reading_p20261201"},
		{"idem_telemetry_reading", Hour, "idem_telemetry_reading_p2026120114"},
		{long, Day, ""},
		{strings.Repeat("é", 30), Hour, ""},
	} {
		name := Name(c.parent, c.b, c.b.Start(start))
		if c.want != "" && name != c.want {
			t.Errorf("Name(%q, %s) = %q; want %q", c.parent, c.b, name, c.want)
		}
		if len(name) > maxIdentifier {
			t.Errorf("Name(%q, %s) = %q: %d bytes, more than %d", c.parent, c.b, name, len(name), maxIdentifier)
		}
		got, ok := parseName(c.parent, name, c.b)
		if !ok || !got.Equal(c.b.Start(start)) {
			t.Errorf("parseName(%q, %q) = %v, %v; want %v", c.parent, name, got, ok, c.b.Start(start))
		}
	}
	if Name(long+"a", Day, start) == Name(long+"b", Day, start) {
		t.Error("two long parents cut to the same partition name")
	}
	for _, other := range []string{"idem_telemetry_reading_old", "idem_telemetry_reading_p2026", "idem_telemetry_reading_p20261301",
		"idem_telemetry_reading_p2026120114", "other_p20261201"} {
		if _, ok := parseName("idem_telemetry_reading", other, Day); ok {
			t.Errorf("parseName took %q for a day partition of idem_telemetry_reading", other)
		}
	}
}
