package migrate

import (
	"strings"

	"github.com/idemgen/idemgen/migrations"
)

// sqlOf is a migration without what does not change what it does or what
// idemgen reads of it: its comment lines, blank lines and trailing spaces go,
// but goose's annotations, idemgen's header lines (Header, the "-- idemgen:"
// lines) and the outbox marker stay. Two migrations with the same sqlOf differ
// in their comments only, so idemgen can reword its comments without making
// the migrations it wrote before look edited. The folder's idemgen.sum
// still catches any edit of a recorded file, comments included.
func sqlOf(content []byte) string {
	var b strings.Builder
	for _, line := range strings.Split(string(content), "\n") {
		line = strings.TrimRight(line, " \t\r")
		trimmed := strings.TrimSpace(line)
		switch {
		case trimmed == "":
			continue
		case strings.HasPrefix(trimmed, "--") && !significantComment(trimmed):
			continue
		}
		b.WriteString(line)
		b.WriteByte('\n')
	}
	return b.String()
}

// significantComment reports whether a comment line is one that goose or
// idemgen reads.
func significantComment(line string) bool {
	return strings.HasPrefix(line, "-- +goose") || strings.HasPrefix(line, "-- idemgen:") ||
		line == Header || line == migrations.Marker
}
