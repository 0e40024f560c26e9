// Package mdtable writes the Markdown tables of the benchmark's report and
// formats the numbers in their cells: durations to three significant
// digits, ratios, counts with thousands separators, bytes, percentages.
//
//	t := mdtable.New(mdtable.R("workers"), mdtable.L("scenario"), mdtable.R("msgs/s"))
//	t.Row("16", "generated", mdtable.Thousands(2091))
//	fmt.Print(t) // | workers | scenario | msgs/s |\n| ---: | --- | ---: |\n| 16 | generated | 2,091 |\n
package mdtable

import (
	"fmt"
	"math"
	"regexp"
	"strings"
	"time"
	"unicode"
)

// Column is a column's header and alignment.
type Column struct {
	Name  string
	Right bool // numbers: aligned right (---:)
}

// L is a left-aligned column (text).
func L(name string) Column { return Column{Name: name} }

// R is a right-aligned column (numbers).
func R(name string) Column { return Column{Name: name, Right: true} }

// Table is a Markdown table: a header, its alignment row, and rows.
type Table struct {
	cols []Column
	rows [][]string
}

// New starts a table with these columns.
func New(cols ...Column) *Table { return &Table{cols: cols} }

// Row adds a row of one cell per column. A row of another length is a
// mistake of the caller's, and Row panics with both lengths.
func (t *Table) Row(cells ...string) *Table {
	if len(cells) != len(t.cols) {
		panic(fmt.Sprintf("mdtable: a row of %d cells in a table of %d columns (%s)", len(cells), len(t.cols), t.header()))
	}
	t.rows = append(t.rows, cells)
	return t
}

// Rows is how many rows the table has.
func (t *Table) Rows() int { return len(t.rows) }

func (t *Table) header() string {
	names := make([]string, len(t.cols))
	for i, c := range t.cols {
		names[i] = c.Name
	}
	return line(names)
}

// String is the table in Markdown, every line ending in a newline.
func (t *Table) String() string {
	var b strings.Builder
	b.WriteString(t.header())
	align := make([]string, len(t.cols))
	for i, c := range t.cols {
		align[i] = "---"
		if c.Right {
			align[i] = "---:"
		}
	}
	b.WriteString(line(align))
	for _, r := range t.rows {
		b.WriteString(line(r))
	}
	return b.String()
}

// line is one row: "| a | b |\n"; an empty cell is "| |". A "|" inside a
// cell is escaped, so that it does not split the cell.
func line(cells []string) string {
	var b strings.Builder
	b.WriteString("|")
	for _, c := range cells {
		if c != "" {
			b.WriteString(" ")
			b.WriteString(strings.ReplaceAll(c, "|", `\|`))
		}
		b.WriteString(" |")
	}
	b.WriteString("\n")
	return b.String()
}

// Dur writes a duration with three significant digits: "812 µs", "1.12 ms",
// "2.5 s"; 0 is "0".
func Dur(d time.Duration) string {
	switch {
	case d < 0:
		return "−" + Dur(-d)
	case d == 0:
		return "0"
	case d < time.Millisecond:
		return fmt.Sprintf("%.3g µs", float64(d)/float64(time.Microsecond))
	case d < time.Second:
		return fmt.Sprintf("%.3g ms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.3g s", d.Seconds())
	}
}

// Ratio writes a ratio: "0.57×", "0.030×" below 0.1, "2241×" from 100; "–"
// when it is not a number (a cell that did not run, a division by zero).
func Ratio(x float64) string {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return "–"
	}
	if math.Abs(x) >= 100 {
		return fmt.Sprintf("%.0f×", x)
	}
	if x != 0 && math.Abs(x) < 0.1 {
		return fmt.Sprintf("%.3f×", x)
	}
	return fmt.Sprintf("%.2f×", x)
}

// Thousands writes x rounded to an integer with thousands separators:
// "12,345".
func Thousands(x float64) string {
	s := fmt.Sprintf("%.0f", x)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var out []byte
	for i, c := range []byte(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, c)
	}
	if neg {
		return "-" + string(out)
	}
	return string(out)
}

// Int is Thousands of an integer.
func Int(n int) string { return Thousands(float64(n)) }

// IEC writes a number of bytes in binary units: "512 B", "3 KiB", "1.9 MiB".
func IEC(x float64) string {
	switch {
	case x >= 1<<40:
		return fmt.Sprintf("%.1f TiB", x/(1<<40))
	case x >= 1<<30:
		return fmt.Sprintf("%.1f GiB", x/(1<<30))
	case x >= 1<<20:
		return fmt.Sprintf("%.1f MiB", x/(1<<20))
	case x >= 1<<10:
		return fmt.Sprintf("%.0f KiB", x/(1<<10))
	default:
		return fmt.Sprintf("%.0f B", x)
	}
}

// Percent writes a fraction as a whole percentage: 0.834 is "83%".
func Percent(f float64) string { return fmt.Sprintf("%.0f%%", 100*f) }

// linkRE is a Markdown link, its text in the first group.
var linkRE = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)

// Anchor is the anchor GitHub gives a heading, for a link to it: the text as
// rendered (link targets dropped), lower-cased, with everything but letters,
// digits, '_', '-' and spaces dropped and the spaces turned into '-'.
// "Behind the targets: mode=entity" is "behind-the-targets-modeentity".
func Anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(linkRE.ReplaceAllString(heading, "$1")) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-', r == '_', unicode.IsLetter(r), unicode.IsDigit(r), unicode.IsMark(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// Words is how many words a cell shows: its link targets dropped, the fields
// that hold a letter or a digit ("≥", "/" and "→" are not words).
func Words(cell string) int {
	n := 0
	for _, f := range strings.Fields(linkRE.ReplaceAllString(cell, "$1")) {
		if strings.IndexFunc(f, func(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }) >= 0 {
			n++
		}
	}
	return n
}
