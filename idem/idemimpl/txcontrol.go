package idemimpl

import (
	"strings"
)

// A handler's statements are looked at before they are sent: one that would
// end the inbox's transaction (COMMIT, END, ROLLBACK, ABORT), begin another
// (BEGIN, START TRANSACTION) or prepare it for a two-phase commit is refused
// without reaching the server, so that nothing of the delivery is committed
// apart from the inbox's own commit. A string of several statements (the
// simple protocol runs them all) is looked at statement by statement. What
// cannot be seen here, a statement sent around the Tx (through tx.Conn()),
// is caught after the fact (handlerTx.after, stillInTransaction, the checks
// of the commit round trip).

// transactionControl returns the leading words of the first statement of
// sql that controls the transaction ("COMMIT", "ROLLBACK", "START
// TRANSACTION", ...), upper-cased, and what it would do to the inbox's
// transaction; "" when there is none. Savepoint statements (SAVEPOINT,
// RELEASE, ROLLBACK TO) are not among them: they stay inside it.
func transactionControl(sql string) (words, effect string) {
	for start := 0; start <= len(sql); {
		end := statementEnd(sql, start)
		if w, e := controlStatement(sql[start:end]); w != "" {
			return w, e
		}
		start = end + 1
	}
	return "", ""
}

// The effects of a transaction-control statement on the inbox's transaction.
const (
	effectCommit   = "would commit the inbox's transaction"
	effectRollback = "would roll the inbox's transaction back"
	effectBegin    = "would begin a transaction inside the inbox's"
	effectPrepare  = "would prepare the inbox's transaction for a two-phase commit"
)

// controlStatement classifies one statement (without its ';') by its leading
// words.
func controlStatement(stmt string) (words, effect string) {
	w := leadingWords(stmt, 4)
	if len(w) == 0 {
		return "", ""
	}
	second := func() string {
		if len(w) > 1 {
			return w[1]
		}
		return ""
	}
	switch w[0] {
	case "COMMIT", "END":
		return w[0], effectCommit
	case "ABORT":
		return w[0], effectRollback
	case "ROLLBACK":
		// ROLLBACK [WORK | TRANSACTION] TO [SAVEPOINT] name stays inside.
		rest := w[1:]
		if len(rest) > 0 && (rest[0] == "WORK" || rest[0] == "TRANSACTION") {
			rest = rest[1:]
		}
		if len(rest) > 0 && rest[0] == "TO" {
			return "", ""
		}
		return w[0], effectRollback
	case "BEGIN":
		return w[0], effectBegin
	case "START":
		if second() == "TRANSACTION" {
			return "START TRANSACTION", effectBegin
		}
	case "PREPARE":
		if second() == "TRANSACTION" {
			return "PREPARE TRANSACTION", effectPrepare
		}
	}
	return "", ""
}

// leadingWords returns up to n leading keywords of stmt, upper-cased,
// skipping white space and comments before and between them. It stops at
// the first character that is not part of a keyword.
func leadingWords(stmt string, n int) []string {
	var words []string
	i := 0
	for len(words) < n {
		i = skipSpaceAndComments(stmt, i)
		j := i
		for j < len(stmt) && isLetter(stmt[j]) {
			j++
		}
		if j == i || (j < len(stmt) && isIdentChar(stmt[j])) {
			return words
		}
		words = append(words, strings.ToUpper(stmt[i:j]))
		i = j
	}
	return words
}

// skipSpaceAndComments returns the position of the first character at or
// after i that is neither white space nor part of a comment.
func skipSpaceAndComments(s string, i int) int {
	for i < len(s) {
		switch {
		case s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r' || s[i] == '\f' || s[i] == '\v':
			i++
		case strings.HasPrefix(s[i:], "--"):
			i = lineCommentEnd(s, i)
		case strings.HasPrefix(s[i:], "/*"):
			i = blockCommentEnd(s, i)
		default:
			return i
		}
	}
	return i
}

// statementEnd returns the position of the ';' that ends the statement
// starting at start, or len(sql) for the last one: semicolons inside
// string constants, quoted identifiers, dollar-quoted strings and comments
// do not end a statement.
func statementEnd(sql string, start int) int {
	for i := start; i < len(sql); {
		c := sql[i]
		switch {
		case c == ';':
			return i
		case c == '\'':
			escapes := i > 0 && (sql[i-1] == 'E' || sql[i-1] == 'e') && (i < 2 || !isIdentChar(sql[i-2]))
			i = quotedEnd(sql, i, '\'', escapes)
		case c == '"':
			i = quotedEnd(sql, i, '"', false)
		case strings.HasPrefix(sql[i:], "--"):
			i = lineCommentEnd(sql, i)
		case strings.HasPrefix(sql[i:], "/*"):
			i = blockCommentEnd(sql, i)
		case c == '$' && (i == 0 || !isIdentChar(sql[i-1])):
			i = dollarQuotedEnd(sql, i)
		default:
			i++
		}
	}
	return len(sql)
}

// quotedEnd returns the position after the quoted text that opens at i with
// quote (doubled inside it); with escapes, a backslash escapes the next
// character (an E'...' string).
func quotedEnd(s string, i int, quote byte, escapes bool) int {
	for j := i + 1; j < len(s); j++ {
		switch {
		case escapes && s[j] == '\\':
			j++
		case s[j] == quote && j+1 < len(s) && s[j+1] == quote:
			j++
		case s[j] == quote:
			return j + 1
		}
	}
	return len(s)
}

// lineCommentEnd returns the position after the -- comment at i.
func lineCommentEnd(s string, i int) int {
	if nl := strings.IndexByte(s[i:], '\n'); nl >= 0 {
		return i + nl + 1
	}
	return len(s)
}

// blockCommentEnd returns the position after the /* comment */ at i, which
// may nest.
func blockCommentEnd(s string, i int) int {
	depth := 0
	for j := i; j < len(s); {
		switch {
		case strings.HasPrefix(s[j:], "/*"):
			depth++
			j += 2
		case strings.HasPrefix(s[j:], "*/"):
			depth--
			j += 2
			if depth == 0 {
				return j
			}
		default:
			j++
		}
	}
	return len(s)
}

// dollarQuotedEnd returns the position after the dollar-quoted string
// ($$...$$ or $tag$...$tag$) that opens at i, or i+1 when the '$' opens
// none (a parameter such as $1).
func dollarQuotedEnd(s string, i int) int {
	j := i + 1
	if j < len(s) && isLetter(s[j]) {
		for j < len(s) && isIdentChar(s[j]) && s[j] != '$' {
			j++
		}
	}
	if j >= len(s) || s[j] != '$' {
		return i + 1
	}
	tag := s[i : j+1]
	if end := strings.Index(s[j+1:], tag); end >= 0 {
		return j + 1 + end + len(tag)
	}
	return len(s)
}

// isLetter reports whether c can begin a keyword or an identifier.
func isLetter(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c >= 0x80
}

// isIdentChar reports whether c can be part of an identifier.
func isIdentChar(c byte) bool {
	return isLetter(c) || c >= '0' && c <= '9' || c == '$'
}
