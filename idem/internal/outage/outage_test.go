package outage

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestLogBoundsRecords: a failure that lasts writes its first record, then
// one summary per interval; its end one record; a flap within an interval
// of the last record writes nothing, and its count goes into the next
// record.
func TestLogBoundsRecords(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(slog.NewTextHandler(&buf, nil))
	clock := time.Unix(0, 0)
	o := New(10 * time.Second)
	o.now = func() time.Time { return clock }
	ctx := context.Background()
	err := errors.New("refused")
	records := func() int { return strings.Count(buf.String(), "\n") }

	for range 1000 { // 1000 failures over 25s
		o.Fail(ctx, l, slog.LevelWarn, "q", 1, err, "failed")
		clock = clock.Add(25 * time.Millisecond)
	}
	if n := records(); n != 3 { // at 0s, 10s, 20s
		t.Fatalf("%d records for a 25s failure; want 3:\n%s", n, buf.String())
	}
	o.OK(ctx, l, "q", "recovered")
	if n := records(); n != 4 || !strings.Contains(buf.String(), "recovered") {
		t.Fatalf("%d records after the recovery; want 4 with the recovery:\n%s", n, buf.String())
	}
	// Flapping within the interval of the recovery record: nothing.
	for range 50 {
		o.Fail(ctx, l, slog.LevelWarn, "q", 1, err, "failed")
		o.OK(ctx, l, "q", "recovered")
		clock = clock.Add(100 * time.Millisecond)
	}
	if n := records(); n != 4 {
		t.Fatalf("%d records after 50 flaps within the interval; want still 4:\n%s", n, buf.String())
	}
	// The next failure after the interval carries the flaps' count.
	clock = clock.Add(10 * time.Second)
	o.Fail(ctx, l, slog.LevelWarn, "q", 1, err, "failed")
	if n := records(); n != 5 || !strings.Contains(buf.String(), "failed=51") {
		t.Fatalf("%d records; want 5, the last counting the 50 flaps and itself (failed=51):\n%s", n, buf.String())
	}
	// Another destination has records of its own.
	o.Fail(ctx, l, slog.LevelWarn, "other", 1, err, "failed")
	if n := records(); n != 6 {
		t.Fatalf("%d records; want 6", n)
	}
}
