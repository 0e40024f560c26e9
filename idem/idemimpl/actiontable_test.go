package idemimpl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgerrcode"

	"github.com/idemgen/idemgen/idem"
)

// actionTableMarker precedes the documentation's table of what the consumer
// does with each outcome, in README.md or in a page of docs/.
const actionTableMarker = "<!-- ActionFor table: checked by TestActionTable"

// actionTableColumn heads the table's column that TestActionTable compares
// with ActionFor.
const actionTableColumn = "`idem.ActionFor`"

// documentedErrors are the errors each row of the table stands for, by the
// text of its first cell: every sentinel (as Handle returns it, in an
// *Error), and samples of the other kinds.
func documentedErrors() map[string][]error {
	rows := map[string][]error{
		"`idem.Processed`, nil": {nil},
		"`idem.Duplicate`, nil": {nil},
		"the handler's error": {
			actionInbox.fail(actionKey, fmt.Errorf("idem: handler: %w", errors.New("billing: insufficient funds"))),
			actionInbox.fail(actionKey, fmt.Errorf("idem: handler: %w", pgError(pgerrcode.UniqueViolation))),
		},
		"a database or network error": {
			actionInbox.fail(actionKey, fmt.Errorf("idem: claim: %w", pgError(pgerrcode.AdminShutdown))),
			actionInbox.fail(actionKey, fmt.Errorf("idem: acquire a connection: %w", pgError(pgerrcode.TooManyConnections))),
			actionInbox.fail(actionKey, fmt.Errorf("idem: claim: %w", pgError(pgerrcode.UndefinedTable))),
			actionInbox.fail(actionKey, fmt.Errorf("idem: claim: %w", io.ErrUnexpectedEOF)),
			actionInbox.fail(actionKey, fmt.Errorf("idem: acquire a connection: %w", context.Canceled)),
			actionInbox.fail(actionKey, fmt.Errorf("idem: handler: %w", context.DeadlineExceeded)),
		},
		"an error from COMMIT": {
			actionInbox.fail(actionKey, fmt.Errorf("idem: store the result and commit: %w", io.ErrUnexpectedEOF)),
		},
	}
	for _, s := range sentinels {
		rows["`idem."+s.name+"`"] = []error{actionInbox.fail(actionKey, s.err)}
	}
	return rows
}

// findActionTable returns the file that holds the marked table (README.md or
// a page of docs/, wherever the section lives) and the table's lines.
func findActionTable(t *testing.T) (string, []string) {
	t.Helper()
	pages, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	var table []string
	for _, path := range append([]string{"../../README.md"}, pages...) {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		text := strings.ReplaceAll(string(data), "\r\n", "\n")
		for n := strings.Count(text, actionTableMarker); n > 0; n-- {
			found = append(found, path)
		}
		_, after, ok := strings.Cut(text, actionTableMarker)
		if !ok {
			continue
		}
		lines := strings.Split(after, "\n")[1:] // the rest of the marker's line
		table = nil
		for _, line := range lines {
			if !strings.HasPrefix(line, "|") {
				break
			}
			table = append(table, line)
		}
	}
	switch {
	case len(found) == 0:
		t.Fatalf("neither README.md nor docs/*.md has the line %q... above the table of what the consumer does with each error", actionTableMarker)
	case len(found) > 1:
		t.Fatalf("the marker %q... appears %d times (%s); want it once, above the one table", actionTableMarker, len(found), strings.Join(found, ", "))
	}
	if len(table) < 3 {
		t.Fatalf("%s: the line after %q... does not start a table with a header and rows", found[0], actionTableMarker)
	}
	return found[0], table
}

// actionNames are the actions as the table writes them.
var actionNames = map[idem.Action]string{idem.Ack: "`idem.Ack`", idem.Retry: "`idem.Retry`", idem.DeadLetter: "`idem.DeadLetter`"}

func tableCells(line string) []string {
	cells := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
	for i := range cells {
		cells[i] = strings.TrimSpace(cells[i])
	}
	return cells
}

// TestActionTable checks the documentation's table of outcomes against
// ActionFor: each row's idem.ActionFor cell must be what ActionFor returns
// for the errors the row stands for, every row must stand for errors the
// test knows, and every sentinel must have a row.
func TestActionTable(t *testing.T) {
	path, table := findActionTable(t)
	header := tableCells(table[0])
	column := -1
	for i, h := range header {
		if h == actionTableColumn {
			column = i
		}
	}
	if column < 0 {
		t.Fatalf("%s: the table's header %q has no column %s", path, table[0], actionTableColumn)
	}
	known := documentedErrors()
	seen := map[string]bool{}
	for _, line := range table[2:] {
		cells := tableCells(line)
		if len(cells) != len(header) {
			t.Errorf("%s: row %q has %d cells; the header has %d", path, line, len(cells), len(header))
			continue
		}
		errs, ok := known[cells[0]]
		if !ok {
			t.Errorf("%s: the row %q stands for no error TestActionTable knows; add samples of it to documentedErrors", path, cells[0])
			continue
		}
		seen[cells[0]] = true
		for _, err := range errs {
			if want := actionNames[idem.ActionFor(err)]; cells[column] != want {
				t.Errorf("%s: the row %s says %s, but ActionFor(%v) = %s", path, cells[0], cells[column], err, want)
			}
		}
	}
	for _, s := range sentinels {
		if name := "`idem." + s.name + "`"; !seen[name] {
			t.Errorf("%s: the table has no row for %s (ActionFor: %v)", path, name, s.want)
		}
	}
}
