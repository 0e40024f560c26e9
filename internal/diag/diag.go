// Package diag holds positioned diagnostics: what is wrong and where, collected
// across a whole run, sorted and printed as file:line:col: message.
package diag

import (
	"cmp"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
)

// Pos is a position in a source file: an absolute path and 1-based line and
// byte column. The zero Pos means "no position".
type Pos struct {
	File      string
	Line, Col int
}

// IsValid reports whether p names a file.
func (p Pos) IsValid() bool { return p.File != "" }

// Severity says whether a diagnostic stops generation.
type Severity int

const (
	Error Severity = iota
	Warning
)

// Diagnostic is one finding.
type Diagnostic struct {
	Pos      Pos
	Severity Severity
	Msg      string
}

// List collects diagnostics. The zero List is ready to use.
type List struct {
	items []Diagnostic
}

// Errorf records an error at pos.
func (l *List) Errorf(pos Pos, format string, args ...any) {
	l.items = append(l.items, Diagnostic{Pos: pos, Severity: Error, Msg: fmt.Sprintf(format, args...)})
}

// Warnf records a warning at pos.
func (l *List) Warnf(pos Pos, format string, args ...any) {
	l.items = append(l.items, Diagnostic{Pos: pos, Severity: Warning, Msg: fmt.Sprintf(format, args...)})
}

// Add records diagnostics found elsewhere.
func (l *List) Add(ds ...Diagnostic) { l.items = append(l.items, ds...) }

// HasErrors reports whether any diagnostic is an error.
func (l *List) HasErrors() bool {
	return slices.ContainsFunc(l.items, func(d Diagnostic) bool { return d.Severity == Error })
}

// Errors is the number of errors recorded.
func (l *List) Errors() int {
	n := 0
	for _, d := range l.items {
		if d.Severity == Error {
			n++
		}
	}
	return n
}

// Len is the number of diagnostics.
func (l *List) Len() int { return len(l.items) }

// Sorted returns the diagnostics by file, line, column and message, without
// exact repeats.
func (l *List) Sorted() []Diagnostic {
	ds := slices.Clone(l.items)
	slices.SortStableFunc(ds, func(a, b Diagnostic) int {
		return cmp.Or(
			// Findings with a position first; summaries without one last.
			-cmp.Compare(btoi(a.Pos.IsValid()), btoi(b.Pos.IsValid())),
			cmp.Compare(a.Pos.File, b.Pos.File),
			cmp.Compare(a.Pos.Line, b.Pos.Line),
			cmp.Compare(a.Pos.Col, b.Pos.Col),
			cmp.Compare(a.Msg, b.Msg),
		)
	})
	return slices.Compact(ds)
}

// Print writes the sorted diagnostics, one a line, with file names relative to
// dir when they lie below it.
func (l *List) Print(w io.Writer, dir string) {
	for _, d := range l.Sorted() {
		fmt.Fprintln(w, d.Format(dir))
	}
}

// Format renders d as "file:line:col: message" ("warning: " before the
// message of a warning; "idemgen: message" without a position).
func (d Diagnostic) Format(dir string) string {
	msg := d.Msg
	if d.Severity == Warning {
		msg = "warning: " + msg
	}
	if !d.Pos.IsValid() {
		return "idemgen: " + msg
	}
	return fmt.Sprintf("%s:%d:%d: %s", Rel(dir, d.Pos.File), d.Pos.Line, d.Pos.Col, msg)
}

// Rel returns path relative to dir when it lies below dir, else path itself.
func Rel(dir, path string) string {
	if dir == "" {
		return path
	}
	rel, err := filepath.Rel(dir, path)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return path
	}
	return rel
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
