package load

import (
	"flag"
	"io"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
)

// Layout is where a package's migrations go and which PostgreSQL they are
// written for: what the -migrations and -postgres flags say.
type Layout struct {
	// MigrationsDir is absolute; empty means a migrations folder in the
	// package's directory.
	MigrationsDir string
	// Postgres is the -postgres version, 0 when not given.
	Postgres int
	// Source is where the layout comes from, "file.go:line" of a go:generate
	// line, or "" for the command line or the default.
	Source string
}

// generateLine is an idemgen command of a //go:generate line: the flags
// that give the layout, and the directories its package patterns name.
type generateLine struct {
	layout Layout
	// dir is the directory of the file that holds the line, where go
	// generate runs the command.
	dir string
	// patterns are the relative directory patterns of the command line
	// ("." when it names none).
	patterns []string
}

// appliesTo reports whether the line's patterns name the package in pkgDir.
func (g generateLine) appliesTo(pkgDir string) bool {
	for _, p := range g.patterns {
		tree := strings.HasSuffix(p, "/...") || p == "..."
		base := filepath.Join(g.dir, filepath.FromSlash(strings.TrimSuffix(strings.TrimSuffix(p, "..."), "/")))
		if p == "..." {
			base = g.dir
		}
		rel, err := filepath.Rel(base, pkgDir)
		switch {
		case err != nil:
		case rel == ".":
			return true
		case tree && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)):
			return true
		}
	}
	return false
}

// layoutFor returns the layout the //go:generate lines give the package in
// dir: a line in its own directory, else in the nearest parent directory up
// to the module root whose patterns name it (ent's generate.go, one line for
// a tree of packages). ok is false when no line names it.
func layoutFor(dir, moduleRoot string) (Layout, bool) {
	for d := dir; ; {
		for _, g := range generateLines(d) {
			if g.appliesTo(dir) {
				return g.layout, true
			}
		}
		if d == moduleRoot || moduleRoot == "" {
			return Layout{}, false
		}
		parent := filepath.Dir(d)
		if parent == d || !strings.HasPrefix(d, moduleRoot) {
			return Layout{}, false
		}
		d = parent
	}
}

// generateLines returns the idemgen commands of the //go:generate lines of
// the Go files (not tests) in dir, in file and line order.
func generateLines(dir string) []generateLine {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []generateLine
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || !strings.Contains(string(data), "//go:generate") {
			continue
		}
		for i, line := range strings.Split(string(data), "\n") {
			rest, ok := strings.CutPrefix(strings.TrimRight(line, "\r"), "//go:generate ")
			if !ok {
				continue
			}
			if g, ok := parseGenerateLine(rest, dir); ok {
				g.layout.Source = name + ":" + strconv.Itoa(i+1)
				out = append(out, g)
			}
		}
	}
	return out
}

// parseGenerateLine reads the idemgen command in the words of a go:generate
// line run in dir: go tool idemgen, go run .../cmd/idemgen[@version], or an
// idemgen binary, then an optional subcommand, flags and patterns.
func parseGenerateLine(line, dir string) (generateLine, bool) {
	words := splitWords(line)
	start := -1
	for i, w := range words {
		name, _, _ := strings.Cut(w, "@")
		if path.Base(filepath.ToSlash(name)) == "idemgen" {
			start = i + 1
			break
		}
	}
	if start < 0 {
		return generateLine{}, false
	}
	args := words[start:]
	if len(args) > 0 && (args[0] == "generate" || args[0] == "check" || args[0] == "vet") {
		args = args[1:]
	}
	flags := flag.NewFlagSet("idemgen", flag.ContinueOnError)
	flags.SetOutput(io.Discard)
	migrations := flags.String("migrations", "", "")
	postgres := flags.Int("postgres", 0, "")
	flags.Bool("v", false, "")
	flags.Bool("rehash", false, "")
	flags.String("accept-result-change", "", "")
	if flags.Parse(args) != nil {
		return generateLine{}, false
	}
	g := generateLine{dir: dir, layout: Layout{Postgres: *postgres}}
	if *migrations != "" {
		m := os.ExpandEnv(*migrations)
		if !filepath.IsAbs(m) {
			m = filepath.Join(dir, m)
		}
		g.layout.MigrationsDir = filepath.Clean(m)
	}
	for _, p := range flags.Args() {
		if p == "." || p == "..." || strings.HasPrefix(p, "./") || strings.HasPrefix(p, "../") {
			g.patterns = append(g.patterns, p)
		}
	}
	if len(flags.Args()) == 0 {
		g.patterns = []string{"."}
	}
	return g, true
}

// splitWords splits a go:generate line into words as go generate does:
// spaces separate them, double quotes group them.
func splitWords(line string) []string {
	var words []string
	for line = strings.TrimSpace(line); line != ""; line = strings.TrimSpace(line) {
		if line[0] == '"' {
			if w, err := strconv.QuotedPrefix(line); err == nil {
				s, _ := strconv.Unquote(w)
				words = append(words, s)
				line = line[len(w):]
				continue
			}
		}
		i := strings.IndexAny(line, " \t")
		if i < 0 {
			i = len(line)
		}
		words = append(words, line[:i])
		line = line[i:]
	}
	return words
}
