// Package directive parses //idem: comment lines into positioned options.
//
// The syntax is Go's directive form, no space after the slashes:
//
//	//idem:handler consumer=billing.charge key=OrderID retain=2160h
//
// Options are name=value fields separated by spaces; values contain no
// spaces. Parse checks the syntax only; which options a directive accepts is
// the caller's business, helped by Suggest.
package directive

import (
	"regexp"
	"slices"
	"strings"

	"github.com/idemgen/idemgen/internal/diag"
)

// Prefix starts every idemgen directive.
const Prefix = "//idem:"

// Directive is one parsed //idem: line.
type Directive struct {
	// Name is the word after the prefix, such as "handler".
	Name    string
	Pos     diag.Pos
	Options []Option
}

// Option is one name=value field of a directive.
type Option struct {
	Name     string
	Value    string
	Pos      diag.Pos // of the name
	ValuePos diag.Pos // of the value
}

// Item is one element of a comma-separated option value, such as one field
// path of key=OrderID,Meta.ID.
type Item struct {
	Text string
	// Pos is where Text starts in the comment; for an empty item, where it
	// would start.
	Pos diag.Pos
}

// List splits the option's value at commas into its items, each with its
// position. Empty items (key=A,,B or key=A,) are kept, so that the caller
// can report them where they are.
func (o Option) List() []Item {
	var items []Item
	col := o.ValuePos.Col
	for _, text := range strings.Split(o.Value, ",") {
		pos := o.ValuePos
		pos.Col = col
		items = append(items, Item{Text: text, Pos: pos})
		col += len(text) + 1
	}
	return items
}

// Texts returns the texts of the option's items: List without positions.
func (o Option) Texts() []string { return strings.Split(o.Value, ",") }

// Lookup returns the option called name.
func (d Directive) Lookup(name string) (Option, bool) {
	for _, o := range d.Options {
		if o.Name == name {
			return o, true
		}
	}
	return Option{}, false
}

// Is reports whether a comment's text is an idemgen directive.
func Is(text string) bool { return strings.HasPrefix(text, Prefix) }

// Names are the directives idemgen knows.
var Names = []string{"handler", "retired", "allow"}

// nearMiss matches the text of a comment, after its // or /*, that was
// probably meant as a directive: spaces, a case or a prefix off, then a word
// and the options.
var nearMiss = regexp.MustCompile(`^([ \t]*)((?i:go:|\+)?)((?i:idem)(?i:gen)?)([ \t]*:[ \t]*)([A-Za-z_]+)(.*)$`)

// NearMiss reports whether a comment's text (// or /* */ included) that is
// not a directive (Is is false) looks like one gone wrong, such as
// "// idem:handler", "//IDEM:handler" or "/*idem:handler*/". It returns what
// is wrong and the directive as it should be written. Prose that merely
// mentions idem is not a near miss: the word after the colon must be a
// directive name or close to one.
func NearMiss(text string) (problem, fix string, ok bool) {
	var body string
	var block bool
	switch {
	case strings.HasPrefix(text, "//"):
		body = text[2:]
	case strings.HasPrefix(text, "/*"):
		body, block = strings.TrimSuffix(text[2:], "*/"), true
		if i := strings.IndexByte(body, '\n'); i >= 0 {
			body = body[:i]
		}
	default:
		return "", "", false
	}
	m := nearMiss.FindStringSubmatch(body)
	if m == nil {
		return "", "", false
	}
	space, before, idem, colon, word, rest := m[1], m[2], m[3], m[4], m[5], strings.TrimRight(m[6], " \t")
	name := strings.ToLower(word)
	if !slices.Contains(Names, name) {
		name = Suggest(name, Names)
		if name == "" {
			return "", "", false
		}
	}
	var problems []string
	if block {
		problems = append(problems, "a directive is a // line comment, not a /* */ block")
	}
	if space != "" {
		problems = append(problems, "a directive has no space after //")
	}
	if before != "" || len(idem) > len("idem") {
		problems = append(problems, "the prefix is "+Prefix+", not //"+before+idem+":")
	} else if idem != "idem" {
		problems = append(problems, "the prefix is lower case")
	}
	if colon != ":" {
		problems = append(problems, "a directive has no space around the colon")
	}
	if word != name {
		problems = append(problems, "the directive is "+Prefix+name+", not "+word)
	}
	return strings.Join(problems, "; "), corrected(name + rest), true
}

// corrected is the directive Prefix+s, its options separated by single
// spaces.
func corrected(s string) string { return Prefix + strings.Join(strings.Fields(s), " ") }

// Parse parses the comment text, which starts with Prefix, found at pos.
// Syntax errors are recorded in diags; the options that parsed are returned
// all the same, so that one run reports every problem of a directive. A
// directive whose name is malformed has the empty Name, and its error is
// recorded.
func Parse(text string, pos diag.Pos, diags *diag.List) Directive {
	at := func(offset int) diag.Pos {
		return diag.Pos{File: pos.File, Line: pos.Line, Col: pos.Col + offset}
	}
	rest := text[len(Prefix):]
	nameEnd := strings.IndexAny(rest, " \t")
	if nameEnd < 0 {
		nameEnd = len(rest)
	}
	d := Directive{Name: rest[:nameEnd], Pos: pos}
	if !isName(d.Name) {
		word, _, _ := strings.Cut(strings.TrimLeft(rest, " \t"), " ")
		switch {
		case d.Name == "" && isName(strings.ToLower(word)):
			diags.Errorf(at(len(Prefix)), "malformed directive %q: no space after %s; write %s", text, Prefix, corrected(strings.TrimLeft(rest, " \t")))
		case isName(strings.ToLower(d.Name)):
			diags.Errorf(at(len(Prefix)), "malformed directive %q: directive names are lower case; write %s", text, corrected(strings.ToLower(d.Name)+rest[nameEnd:]))
		default:
			diags.Errorf(at(len(Prefix)), "malformed directive %q: want %sname followed by name=value options", text, Prefix)
		}
		d.Name = ""
		return d
	}

	// A trailing comment after the options, as after //nolint:name, is
	// the reader's: "//idem:handler consumer=x key=ID // the order's id".
	opts := rest[nameEnd:]
	for i := 0; i+2 < len(opts); i++ {
		if (opts[i] == ' ' || opts[i] == '\t') && strings.HasPrefix(opts[i+1:], "//") {
			opts = opts[:i]
			break
		}
	}
	seen := map[string]bool{}
	for _, f := range fields(opts, len(Prefix)+nameEnd) {
		name, value, ok := strings.Cut(f.text, "=")
		switch {
		case !ok:
			diags.Errorf(at(f.offset), "option %q has no value: want name=value", f.text)
			continue
		case !isName(name):
			diags.Errorf(at(f.offset), "malformed option name %q", name)
			continue
		case value == "":
			diags.Errorf(at(f.offset), "option %s= has an empty value", name)
			continue
		case seen[name]:
			diags.Errorf(at(f.offset), "option %s= is given twice", name)
			continue
		}
		seen[name] = true
		d.Options = append(d.Options, Option{
			Name:     name,
			Value:    value,
			Pos:      at(f.offset),
			ValuePos: at(f.offset + len(name) + 1),
		})
	}
	return d
}

type field struct {
	text   string
	offset int // byte offset of text in the comment
}

// fields splits s at spaces and tabs; base is the offset of s in the comment.
func fields(s string, base int) []field {
	var fs []field
	for i := 0; i < len(s); {
		if s[i] == ' ' || s[i] == '\t' {
			i++
			continue
		}
		j := i
		for j < len(s) && s[j] != ' ' && s[j] != '\t' {
			j++
		}
		fs = append(fs, field{text: s[i:j], offset: base + i})
		i = j
	}
	return fs
}

func isName(s string) bool {
	if s == "" || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' {
			return false
		}
	}
	return true
}

// Suggest returns the candidate closest to name, if one is close enough to be
// a likely typo, else "".
func Suggest(name string, candidates []string) string {
	best, bestDist := "", 3
	for _, c := range candidates {
		if d := distance(name, c); d < bestDist || (d == bestDist && c < best) {
			best, bestDist = c, d
		}
	}
	if best == "" || bestDist > len(name)/2 {
		return ""
	}
	return best
}

// distance is the Levenshtein distance between a and b.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
