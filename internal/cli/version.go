package cli

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/idemgen/idemgen/internal/emit/gocode"
)

// version prints idemgen's version as the Go build info records it, the
// runtime contract the generated code is written for, and the Go version.
// A go install or go tool build has a module version; a build from a
// checkout has "(devel)" and, where Go stamped it, the commit.
func version(info *debug.BuildInfo, stdout io.Writer) int {
	v := "(unknown)"
	var rev, modified string
	if info != nil {
		v = info.Main.Version
		if v == "" {
			v = "(devel)"
		}
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value
			}
		}
	}
	line := "idemgen " + v
	if rev != "" {
		line += " (commit " + rev[:min(len(rev), 12)]
		if modified == "true" {
			line += ", modified"
		}
		line += ")"
	}
	fmt.Fprintln(stdout, line)
	fmt.Fprintf(stdout, "runtime contract: idemimpl.%s\n", gocode.RuntimeContract)
	fmt.Fprintf(stdout, "built with %s %s/%s\n", strings.TrimSpace(runtime.Version()), runtime.GOOS, runtime.GOARCH)
	return ExitOK
}
