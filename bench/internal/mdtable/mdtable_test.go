package mdtable

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestTable(t *testing.T) {
	tb := New(R("workers"), L("scenario"), R("msgs/s"), L(""))
	tb.Row("1", "bare", Thousands(12345.6), "")
	tb.Row("16", "a | b", "7", "x")
	want := "| workers | scenario | msgs/s | |\n" +
		"| ---: | --- | ---: | --- |\n" +
		"| 1 | bare | 12,346 | |\n" +
		"| 16 | a \\| b | 7 | x |\n"
	if got := tb.String(); got != want {
		t.Fatalf("table:\n%s\nwant:\n%s", got, want)
	}
	if tb.Rows() != 2 {
		t.Fatalf("%d rows, want 2", tb.Rows())
	}
	if got := New(L("a")).String(); got != "| a |\n| --- |\n" {
		t.Fatalf("a table without rows: %q", got)
	}
}

func TestRowOfTheWrongLength(t *testing.T) {
	defer func() {
		r := recover()
		if r == nil || !strings.Contains(r.(string), "a row of 1 cells in a table of 2 columns (| a | b |") {
			t.Fatalf("recovered %v, want the lengths and the header", r)
		}
	}()
	New(L("a"), L("b")).Row("only")
}

func TestFormats(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{Dur(0), "0"},
		{Dur(812 * time.Microsecond), "812 µs"},
		{Dur(1120 * time.Microsecond), "1.12 ms"},
		{Dur(2500 * time.Millisecond), "2.5 s"},
		{Dur(-3 * time.Millisecond), "−3 ms"},
		{Dur(1500 * time.Nanosecond), "1.5 µs"},
		{Ratio(0.5712), "0.57×"},
		{Ratio(0.0301), "0.030×"},
		{Ratio(1.954), "1.95×"},
		{Ratio(2241.25), "2241×"},
		{Ratio(0), "0.00×"},
		{Ratio(math.NaN()), "–"},
		{Ratio(math.Inf(1)), "–"},
		{Thousands(0), "0"},
		{Thousands(999), "999"},
		{Thousands(1000), "1,000"},
		{Thousands(1234567.4), "1,234,567"},
		{Thousands(-1234), "-1,234"},
		{Int(50000), "50,000"},
		{IEC(512), "512 B"},
		{IEC(3 * 1024), "3 KiB"},
		{IEC(1.9 * (1 << 20)), "1.9 MiB"},
		{IEC(528.9 * (1 << 20)), "528.9 MiB"},
		{IEC(2 * (1 << 30)), "2.0 GiB"},
		{IEC(1 << 40), "1.0 TiB"},
		{Percent(0.834), "83%"},
		{Percent(1), "100%"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

// TestAnchor pins the anchors GitHub gives headings, which the report's
// links name.
func TestAnchor(t *testing.T) {
	for heading, want := range map[string]string{
		"Behind the targets: mode=entity":                 "behind-the-targets-modeentity",
		"Publishing: relay.Relay against a raw publisher": "publishing-relayrelay-against-a-raw-publisher",
		"Against Watermill's outbox":                      "against-watermills-outbox",
		"See [it](x.md) work":                             "see-it-work",
		"snake_case and dash-case":                        "snake_case-and-dash-case",
	} {
		if got := Anchor(heading); got != want {
			t.Errorf("Anchor(%q) = %q, want %q", heading, got, want)
		}
	}
}

func TestWords(t *testing.T) {
	for cell, want := range map[string]int{
		"":                  0,
		"0.96× [0.90–1.02]": 2,
		"[generated ≥ 1.3× hand-written](x.md#a-b-c)": 3,
		"consume → wrapper → ack":                     3,
		"382 + 219 = 601 B":                           4,
	} {
		if got := Words(cell); got != want {
			t.Errorf("Words(%q) = %d, want %d", cell, got, want)
		}
	}
}
