package load

import (
	"fmt"
	"regexp"
	"strings"
	"unicode"
)

// The names idemgen derives from a directive: the inbox table from the
// consumer, the key columns from the field paths. Each must fit PostgreSQL's
// identifiers unquoted; the check functions return what is wrong, or "".

// maxIdentifier is PostgreSQL's limit on the length of a name, in bytes;
// longer names are silently cut short.
const maxIdentifier = 63

var (
	consumerRE = regexp.MustCompile(`^[a-z][a-z0-9_.-]*$`)
	tableRE    = regexp.MustCompile(`^[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)?$`)
	columnRE   = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)
)

// consumerProblem says what is wrong with a consumer= name.
func consumerProblem(consumer string) string {
	switch {
	case !consumerRE.MatchString(consumer):
		return fmt.Sprintf("consumer %q is not a safe name: want lower-case letters, digits, '_', '.' and '-', starting with a letter, at most %d bytes", consumer, MaxConsumer)
	case len(consumer) > MaxConsumer:
		return fmt.Sprintf("consumer %q is %d bytes long, more than %d: the inbox table and its indexes are named after it, within PostgreSQL's 63-byte identifiers; use a shorter name", consumer, len(consumer), MaxConsumer)
	}
	return ""
}

// defaultTable is the inbox table of a consumer without table=: idem_ and
// the consumer with '.' and '-' turned into '_'.
func defaultTable(consumer string) string {
	return "idem_" + strings.NewReplacer(".", "_", "-", "_").Replace(consumer)
}

// tableProblem says what is wrong with a table= name.
func tableProblem(table string) string {
	switch {
	case !tableRE.MatchString(table):
		return fmt.Sprintf("table %q is not a plain PostgreSQL name: want lower-case letters, digits and '_' (optionally schema.table), at most 63 bytes each", table)
	case longestPart(table) > maxIdentifier:
		return fmt.Sprintf("table %q has a name of %d bytes, more than PostgreSQL's 63-byte identifiers (which would cut it short); use a shorter name", table, longestPart(table))
	}
	return ""
}

// keyColumn returns the column a key field path is stored in, key_ and the
// path's elements in snake case joined by '_' (Meta.OrderID → key_meta_order_id),
// and what is wrong with it as a column name.
func keyColumn(path string) (column, problem string) {
	column = "key_" + snake(strings.ReplaceAll(path, ".", "_"))
	switch {
	case !columnRE.MatchString(column):
		return column, fmt.Sprintf("key field %s cannot be named as a column (%q): idemgen names key columns after the field path in lower-case ASCII letters, digits and '_'; use ASCII field names", path, column)
	case len(column) > maxIdentifier:
		return column, fmt.Sprintf("key field %s would be stored in column %s, %d bytes long, more than PostgreSQL's 63-byte identifiers; key on a field with a shorter name (or path)", path, column, len(column))
	}
	return column, ""
}

// snake turns a Go field path into a column name: OrderID → order_id,
// HTTPServer → http_server.
func snake(s string) string {
	var b strings.Builder
	r := []rune(s)
	for i, c := range r {
		if unicode.IsUpper(c) {
			if i > 0 && r[i-1] != '_' && (unicode.IsLower(r[i-1]) || unicode.IsDigit(r[i-1]) ||
				(i+1 < len(r) && unicode.IsLower(r[i+1]))) {
				b.WriteByte('_')
			}
			b.WriteRune(unicode.ToLower(c))
			continue
		}
		b.WriteRune(c)
	}
	return b.String()
}

// fieldWords splits the last element of a field path into its lower-case
// words: Meta.DeliveryCount → delivery, count.
func fieldWords(path string) []string {
	return strings.Split(snake(path[strings.LastIndexByte(path, '.')+1:]), "_")
}

// longestPart is the length of the longest of the dot-separated parts of a
// name.
func longestPart(name string) int {
	n := 0
	for _, p := range strings.Split(name, ".") {
		n = max(n, len(p))
	}
	return n
}
