package load

import (
	"slices"
	"strings"

	"github.com/idemgen/idemgen/internal/directive"
)

// unstableWords are words of field names that name values which differ
// between deliveries of one message; a key on them defeats deduplication.
var unstableWords = []struct {
	match func(words []string) bool
	what  string
}{
	{hasAny("attempt", "attempts", "retry", "retries", "redelivered", "redelivery", "redeliveries"),
		"a delivery attempt counter or redelivery flag"},
	{hasPair([]string{"delivery", "deliveries", "num"}, []string{"count", "tag", "delivered", "number"}),
		"a delivery counter"},
	{hasPair([]string{"received", "receive", "processed", "processing", "handled", "consumed", "arrived", "delivered", "enqueued"},
		[]string{"at", "time", "ts", "on", "timestamp"}),
		"a receive or processing time"},
	{hasAny("correlation", "trace", "span"),
		"a correlation or trace id (shared by every message of a flow, or new on every hop)"},
	{hasAny("nonce", "random", "rand"),
		"a random value"},
}

// hasAny matches field names that have one of words as a word.
func hasAny(words ...string) func([]string) bool {
	return func(ws []string) bool {
		for _, w := range ws {
			if slices.Contains(words, w) {
				return true
			}
		}
		return false
	}
}

// hasPair matches field names with a word of first followed by a word of
// second.
func hasPair(first, second []string) func([]string) bool {
	return func(ws []string) bool {
		for i := 0; i+1 < len(ws); i++ {
			if slices.Contains(first, ws[i]) && slices.Contains(second, ws[i+1]) {
				return true
			}
		}
		return false
	}
}

// hygiene warns about key fields whose names say they are not stable, unless
// the directive vouches for them with stable=.
//
// For an idem.Message (envelope set) the paths that keyPart refuses, Attempt
// and Headers, get that error and no warning.
func (c *checker) hygiene(d directive.Directive, keyOpt directive.Option, envelope bool) {
	vouched := map[string]bool{}
	stable, hasStable := d.Lookup("stable")
	if hasStable {
		for _, path := range stable.Texts() {
			vouched[path] = false
		}
	}
	for _, item := range keyOpt.List() {
		path, pos := item.Text, item.Pos
		if envelope && envelopeFieldProblem(strings.Split(path, ".")[0]) != "" {
			continue
		}
		words := fieldWords(path)
		for _, u := range unstableWords {
			if !u.match(words) {
				continue
			}
			if _, ok := vouched[path]; ok {
				vouched[path] = true
				break
			}
			c.diags.Warnf(pos, "key field %s looks like %s: it differs between deliveries of one message, so a redelivery would not be recognised as a duplicate; key on the message's own id (if %s really is stable, say so with stable=%s)",
				path, u.what, path, path)
			break
		}
	}
	if !hasStable {
		return
	}
	for _, path := range stable.Texts() {
		inKey := slices.Contains(keyOpt.Texts(), path)
		switch {
		case !inKey:
			c.errorf(stable.ValuePos, "stable=%s names no key field; stable= lists key fields whose names look unstable but are not", path)
		case !vouched[path]:
			c.diags.Warnf(stable.ValuePos, "stable=%s silences nothing: idemgen has no doubt about key field %s", path, path)
		}
	}
}
