package directive

import (
	"fmt"
	"strings"

	"github.com/idemgen/idemgen/internal/diag"
)

// AllowPrefix starts a comment that allows one finding of a check on its
// line or the line below: //idem:allow outside-tx <reason>.
const AllowPrefix = Prefix + "allow"

// Checks are the checks an //idem:allow comment can name.
var Checks = []string{"outside-tx", "external-call"}

// Allow is one parsed //idem:allow comment.
type Allow struct {
	Check  string
	Reason string
	Pos    diag.Pos
}

// IsAllow reports whether a comment's text is an //idem:allow comment.
func IsAllow(text string) bool {
	rest, ok := strings.CutPrefix(text, AllowPrefix)
	return ok && (rest == "" || rest[0] == ' ' || rest[0] == '\t')
}

// ParseAllow parses an //idem:allow comment found at pos. A comment that
// names no known check, or gives no reason, is refused with an error that
// says what to write; a refused comment allows nothing.
func ParseAllow(text string, pos diag.Pos, diags *diag.List) (Allow, bool) {
	rest := strings.TrimPrefix(text, AllowPrefix)
	// A trailing comment is the reader's, as after a directive's options.
	if i := strings.Index(rest, " //"); i >= 0 {
		rest = rest[:i]
	}
	if i := strings.Index(rest, "\t//"); i >= 0 {
		rest = rest[:i]
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 {
		diags.Errorf(pos, "%s needs the name of a check and a reason: %s outside-tx <reason> or %s external-call <reason>",
			AllowPrefix, AllowPrefix, AllowPrefix)
		return Allow{}, false
	}
	check := fields[0]
	at := pos
	at.Col += len(AllowPrefix) + strings.Index(rest, check)
	known := false
	for _, c := range Checks {
		known = known || c == check
	}
	if !known {
		msg := fmt.Sprintf("%s %s: there is no check %s", AllowPrefix, check, check)
		if s := Suggest(check, Checks); s != "" {
			msg += fmt.Sprintf(" (did you mean %s?)", s)
		}
		diags.Errorf(at, "%s; the checks are %s", msg, strings.Join(Checks, " and "))
		return Allow{}, false
	}
	reason := strings.Join(fields[1:], " ")
	if reason == "" {
		diags.Errorf(at, "%s %s needs a reason after the check's name, such as %s %s %s: the next reader must learn why this is deliberate; without one the comment allows nothing",
			AllowPrefix, check, AllowPrefix, check, reasonExample[check])
		return Allow{}, false
	}
	return Allow{Check: check, Reason: reason, Pos: pos}, true
}

// reasonExample is a reason of the kind an //idem:allow comment needs.
var reasonExample = map[string]string{
	"outside-tx":    "the audit row must outlive a rollback",
	"external-call": "the cache purge is harmless to repeat",
}
