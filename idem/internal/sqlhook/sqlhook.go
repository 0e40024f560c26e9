// Package sqlhook lets idem's own tests replace a statement that the runtime
// builds for a consumer's table, to prove that a test suite
// (idem/idemtest) catches a wrapper whose SQL is wrong. Nothing outside
// idem's tests sets an edit: without one, Apply returns the statement as it
// is. The runtime consults it once per statement, when an inbox is
// constructed, never per delivery.
package sqlhook

import "sync"

var edits sync.Map // consumer name → func(name, sql string) string

// Set makes Apply edit the statements of the consumer's inboxes
// constructed from now on: edit gets each statement's name (claim, lookup,
// complete, ...) and SQL and returns the SQL to run. The returned function
// removes the edit.
func Set(consumer string, edit func(name, sql string) string) (remove func()) {
	edits.Store(consumer, edit)
	return func() { edits.Delete(consumer) }
}

// Apply returns the statement name of consumer's table as the runtime is
// to run it: sql, or what an edit Set for consumer makes of it.
func Apply(consumer, name, sql string) string {
	if edit, ok := edits.Load(consumer); ok {
		return edit.(func(name, sql string) string)(name, sql)
	}
	return sql
}
