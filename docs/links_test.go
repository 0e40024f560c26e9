package docs_test

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"unicode"
)

// markdownFiles returns the pages whose links are checked: README.md and
// docs/*.md, as paths of the repository root fsys.
func markdownFiles(t *testing.T, fsys fs.FS) []string {
	t.Helper()
	pages, err := fs.Glob(fsys, "docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(pages) == 0 {
		t.Fatal("no docs/*.md found: the test must run in the docs directory of the repository")
	}
	return append([]string{"README.md"}, pages...)
}

// TestRelativeLinksResolve checks every relative link of README.md and
// docs/*.md: the file or directory it names exists in the repository, and an
// anchor (#...) names a heading of the Markdown page it points to.
func TestRelativeLinksResolve(t *testing.T) {
	root := os.DirFS("..")
	files := markdownFiles(t, root)
	c := newChecker(root)
	links := 0
	for _, file := range files {
		n, problems := c.check(file)
		links += n
		for _, p := range problems {
			t.Error(p)
		}
	}
	t.Logf("%d relative links in %d pages checked", links, len(files))
}

// TestEveryPageIsInTheREADME checks that the README's map of the docs links
// every page under docs/, so that no page is left where nobody finds it.
func TestEveryPageIsInTheREADME(t *testing.T) {
	root := os.DirFS("..")
	c := newChecker(root)
	readme, err := fs.ReadFile(root, "README.md")
	if err != nil {
		t.Fatal(err)
	}
	var linked []string
	for _, l := range c.links(string(readme)) {
		target, _, _ := strings.Cut(l.dest, "#")
		linked = append(linked, path.Clean(target))
	}
	for _, page := range markdownFiles(t, root)[1:] {
		if !slices.Contains(linked, page) {
			t.Errorf("README.md does not link %s; add it to the table under Documentation", page)
		}
	}
}

// TestCheckerFindsBrokenLinks proves that the checker fails on what it must
// fail on, and only on that: a missing file, a missing anchor in another
// page and in the same page, a link out of the repository, an anchor into a
// file that has no headings; and that links in code are not links.
func TestCheckerFindsBrokenLinks(t *testing.T) {
	fsys := fstest.MapFS{
		"README.md": {Data: []byte(strings.Join([]string{
			"# Title",
			"[ok](docs/a.md) [ok](docs/a.md#key-hygiene-idemgen-vet) [ok](#title) [ok](examples/)",
			"[ok](docs/a.md#key-hygiene-idemgen-vet-1) [ok](https://example.com/x) [ok](go.mod#L3)",
			"[gone](docs/missing.md)",
			"[no anchor](docs/a.md#no-such-heading)",
			"[no anchor here](#nothing)",
			"[outside](../elsewhere.md)",
			"[bad anchor](go.mod#section)",
			"`[in code](nowhere.md)`",
			"```",
			"[in a fence](nowhere.md)",
			"# not a heading",
			"```",
			"![image](docs/missing.png)",
			"[ref]: docs/gone-too.md",
		}, "\n") + "\n")},
		"docs/a.md":     {Data: []byte("# Key hygiene (`idemgen vet`)\n\n## Key hygiene (`idemgen vet`)\n\n[up](../README.md#title)\n")},
		"examples/x.go": {Data: []byte("package x\n")},
		"go.mod":        {Data: []byte("module x\n")},
	}
	c := newChecker(fsys)
	n, problems := c.check("README.md")
	want := []string{
		"README.md:4: link docs/missing.md: open docs/missing.md: file does not exist",
		"README.md:5: link docs/a.md#no-such-heading: docs/a.md has no heading with the anchor #no-such-heading",
		"README.md:6: link #nothing: README.md has no heading with the anchor #nothing",
		"README.md:7: link ../elsewhere.md: it leaves the repository",
		"README.md:8: link go.mod#section: go.mod is not a Markdown page; only #L<line> anchors work there",
		"README.md:14: link docs/missing.png: open docs/missing.png: file does not exist",
		"README.md:15: link docs/gone-too.md: open docs/gone-too.md: file does not exist",
	}
	if !slices.Equal(problems, want) {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(problems, "\n"), strings.Join(want, "\n"))
	}
	if n != 13 {
		t.Errorf("%d relative links checked, want 13 (the web link and the links in code are not)", n)
	}
	if _, problems := c.check("docs/a.md"); len(problems) != 0 {
		t.Errorf("docs/a.md: %v, want no problem", problems)
	}
}

// TestAnchor pins the anchors GitHub gives headings.
func TestAnchor(t *testing.T) {
	for heading, want := range map[string]string{
		"Key hygiene (`idemgen vet`)":              "key-hygiene-idemgen-vet",
		"Stale messages (`order=` and `version=`)": "stale-messages-order-and-version",
		"idemgen.sum":                      "idemgensum",
		"Poolers (PgBouncer, RDS Proxy)":   "poolers-pgbouncer-rds-proxy",
		"The directive: `//idem:handler`":  "the-directive-idemhandler",
		"Reading the outcome: when to ack": "reading-the-outcome-when-to-ack",
		"See [it](x.md) **work**":          "see-it-work",
		"snake_case and dash-case":         "snake_case-and-dash-case",
	} {
		if got := anchor(heading); got != want {
			t.Errorf("anchor(%q) = %q, want %q", heading, got, want)
		}
	}
}

// checker checks the links of Markdown pages of one file tree.
type checker struct {
	fsys    fs.FS
	anchors map[string]map[string]bool // page → its anchors
}

func newChecker(fsys fs.FS) *checker {
	return &checker{fsys: fsys, anchors: map[string]map[string]bool{}}
}

// link is a link destination and the line it is on.
type link struct {
	line int
	dest string
}

var (
	fenceRE      = regexp.MustCompile("^ {0,3}(```|~~~)")
	codeSpanRE   = regexp.MustCompile("(`+)[^`]*?(`+)")
	inlineLinkRE = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]*)>?(?:\s+"[^"]*")?\s*\)`)
	refDefRE     = regexp.MustCompile(`^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)`)
	hrefRE       = regexp.MustCompile(`<a\s[^>]*href="([^"]*)"`)
	idRE         = regexp.MustCompile(`<a\s[^>]*(?:id|name)="([^"]*)"`)
	headingRE    = regexp.MustCompile(`^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$`)
	schemeRE     = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
	lineAnchorRE = regexp.MustCompile(`^L[0-9]+(-L[0-9]+)?$`)
)

// lines calls f for each line of text outside fenced code blocks, with its
// number.
func lines(text string, f func(n int, line string)) {
	fence := ""
	for i, line := range strings.Split(text, "\n") {
		if m := fenceRE.FindStringSubmatch(line); m != nil {
			switch {
			case fence == "":
				fence = m[1]
			case m[1] == fence:
				fence = ""
			}
			continue
		}
		if fence == "" {
			f(i+1, line)
		}
	}
}

// links returns the links of a page that its reader follows: inline links
// and images, reference definitions and HTML hrefs, outside code.
func (c *checker) links(text string) []link {
	var out []link
	lines(text, func(n int, line string) {
		line = codeSpanRE.ReplaceAllString(line, "code")
		for _, re := range []*regexp.Regexp{inlineLinkRE, refDefRE, hrefRE} {
			for _, m := range re.FindAllStringSubmatch(line, -1) {
				out = append(out, link{line: n, dest: m[1]})
			}
		}
	})
	return out
}

// anchor returns the anchor GitHub gives a heading: its text as rendered
// (no code marks, emphasis or link targets), lower-cased, with everything
// but letters, digits, '_', '-' and spaces dropped and spaces turned into
// '-'.
func anchor(heading string) string {
	heading = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`).ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-', r == '_', unicode.IsLetter(r), unicode.IsDigit(r), unicode.IsMark(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchorsOf returns the anchors of a Markdown page: one per heading (a
// repeated heading gets -1, -2, ... as on GitHub) and the ids of HTML
// anchors.
func (c *checker) anchorsOf(page string) (map[string]bool, error) {
	if a, ok := c.anchors[page]; ok {
		return a, nil
	}
	text, err := fs.ReadFile(c.fsys, page)
	if err != nil {
		return nil, err
	}
	a := map[string]bool{}
	seen := map[string]int{}
	lines(string(text), func(_ int, line string) {
		if m := headingRE.FindStringSubmatch(line); m != nil {
			base := anchor(m[2])
			id := base
			if k := seen[base]; k > 0 {
				id = fmt.Sprintf("%s-%d", base, k)
			}
			seen[base]++
			a[id] = true
		}
		for _, m := range idRE.FindAllStringSubmatch(line, -1) {
			a[m[1]] = true
		}
	})
	c.anchors[page] = a
	return a, nil
}

// check checks the relative links of page and returns how many it checked
// and a problem per broken one, as "page:line: link dest: what is wrong".
func (c *checker) check(page string) (int, []string) {
	text, err := fs.ReadFile(c.fsys, page)
	if err != nil {
		return 0, []string{fmt.Sprintf("%s: %v", page, err)}
	}
	var problems []string
	checked := 0
	for _, l := range c.links(string(text)) {
		if l.dest == "" || schemeRE.MatchString(l.dest) || strings.HasPrefix(l.dest, "//") {
			continue
		}
		checked++
		if err := c.resolve(page, l.dest); err != nil {
			problems = append(problems, fmt.Sprintf("%s:%d: link %s: %v", page, l.line, l.dest, err))
		}
	}
	return checked, problems
}

// resolve reports why dest, a relative link on page, does not resolve.
func (c *checker) resolve(page, dest string) error {
	target, frag, _ := strings.Cut(dest, "#")
	if target == "" {
		target = page
	} else {
		target = path.Join(path.Dir(page), target)
		if !fs.ValidPath(target) {
			return fmt.Errorf("it leaves the repository")
		}
		if _, err := fs.Stat(c.fsys, target); err != nil {
			return err
		}
	}
	if frag == "" {
		return nil
	}
	if !strings.HasSuffix(target, ".md") {
		if lineAnchorRE.MatchString(frag) {
			return nil
		}
		return fmt.Errorf("%s is not a Markdown page; only #L<line> anchors work there", target)
	}
	anchors, err := c.anchorsOf(target)
	if err != nil {
		return err
	}
	if !anchors[frag] {
		return fmt.Errorf("%s has no heading with the anchor #%s", target, frag)
	}
	return nil
}
