package cli

import (
	"bytes"
	"runtime/debug"
	"strings"
	"testing"
)

func TestVersion(t *testing.T) {
	for _, tc := range []struct {
		name string
		info *debug.BuildInfo
		want string
	}{
		{"module version", &debug.BuildInfo{Main: debug.Module{Version: "v0.4.0"}}, "idemgen v0.4.0\n"},
		{"checkout", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "true"},
		}}, "idemgen (devel) (commit 0123456789ab, modified)\n"},
		{"no build info", nil, "idemgen (unknown)\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			if code := version(tc.info, &out); code != ExitOK {
				t.Fatalf("exit %d", code)
			}
			got := out.String()
			if !strings.HasPrefix(got, tc.want) || !strings.Contains(got, "runtime contract: idemimpl.SupportPackageIsVersion") {
				t.Errorf("got %q, want it to start with %q and name the runtime contract", got, tc.want)
			}
		})
	}
}

func TestVersionCommand(t *testing.T) {
	var out, errb bytes.Buffer
	if code := Run([]string{"version"}, &out, &errb); code != ExitOK || !strings.HasPrefix(out.String(), "idemgen ") {
		t.Fatalf("idemgen version: exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
	if code := Run([]string{"version", "extra"}, &out, &errb); code != ExitUsage {
		t.Fatalf("idemgen version extra: exit %d, want %d", code, ExitUsage)
	}
}
