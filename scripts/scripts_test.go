// Package scripts_test tests the repository's shell scripts: test.sh (the
// test command), pgenv.sh (which finds the test database) and provision.sh
// (which finds, builds or installs PgBouncer, NATS and RabbitMQ).
package scripts_test

import (
	"bytes"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemgen/idemgen/idem/idemtest"
)

// run runs a script of this directory from the repository root, with env
// replacing (or, for "NAME=" with an empty value, removing) variables of the
// environment. It returns stdout and stderr and the error of the run.
func run(t *testing.T, env map[string]string, script string, args ...string) (string, string, error) {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", append([]string{filepath.Join("scripts", script)}, args...)...)
	cmd.Dir = root
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool {
		name, _, _ := strings.Cut(kv, "=")
		_, replaced := env[name]
		return replaced
	})
	for name, value := range env {
		if value != "" {
			cmd.Env = append(cmd.Env, name+"="+value)
		}
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	return stdout.String(), stderr.String(), err
}

// goTestLine matches go test's line for one package: "ok  \tpath\t0.01s"
// or "?   \tpath\t[no test files]".
var goTestLine = regexp.MustCompile(`(?m)^(?:ok|\?|FAIL)\s+(github\.com/idemgen/idemgen\S*)`)

// TestTestShTestsOnlyTheNamedPackages runs ./scripts/test.sh with package
// arguments (and flags whose values are separate words, which are not
// packages) and checks that go test ran exactly those packages, not ./...
func TestTestShTestsOnlyTheNamedPackages(t *testing.T) {
	const mod = "github.com/idemgen/idemgen/"
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"-count", "1", "-list", ".", "./internal/directive"}, []string{"internal/directive"}},
		{[]string{"-run", "TestA/b", "./internal/diag", "./internal/directive", "-list", "X"}, []string{"internal/diag", "internal/directive"}},
		{[]string{"-list=.", mod + "internal/directive"}, []string{"internal/directive"}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			stdout, stderr, err := run(t, nil, "test.sh", tc.args...)
			if err != nil {
				t.Fatalf("./scripts/test.sh %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(tc.args, " "), err, stdout, stderr)
			}
			var got []string
			for _, m := range goTestLine.FindAllStringSubmatch(stdout, -1) {
				got = append(got, strings.TrimPrefix(m[1], mod))
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("./scripts/test.sh %s tested %d package(s) %q; want %q\nstdout:\n%s",
					strings.Join(tc.args, " "), len(got), got, tc.want, stdout)
			}
		})
	}
}

// TestPgenvNeverUsesDATABASE_URL sets only DATABASE_URL, to a database that
// answers, and checks that scripts/pgenv.sh does not pick it: a developer's
// DATABASE_URL often points at a real database, and the tests create and drop
// schemas in theirs.
func TestPgenvNeverUsesDATABASE_URL(t *testing.T) {
	u, err := url.Parse(idemtest.DatabaseURL(t))
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		t.Fatalf("%s is not a postgres:// URL (%v); this test marks it with a query parameter", idemtest.EnvURL, err)
	}
	q := u.Query()
	q.Set("application_name", "pgenv_from_DATABASE_URL")
	u.RawQuery = q.Encode()
	databaseURL := u.String()

	stdout, stderr, err := run(t, map[string]string{
		idemtest.EnvURL:     "",
		idemtest.EnvRequire: "",
		"DATABASE_URL":      databaseURL,
	}, "pgenv.sh")
	// pgenv may find the local server, start a throwaway one or, on a
	// machine with neither, fail; what it must never do is take DATABASE_URL.
	if strings.Contains(stdout, "pgenv_from_DATABASE_URL") || strings.Contains(stderr, "pgenv: DATABASE_URL is set") {
		t.Fatalf("with only DATABASE_URL set, pgenv.sh used it (err %v):\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
	if err == nil && !strings.Contains(stdout, idemtest.EnvURL+"=postgres") {
		t.Fatalf("pgenv.sh succeeded but printed no %s:\nstdout:\n%s\nstderr:\n%s", idemtest.EnvURL, stdout, stderr)
	}
	t.Logf("pgenv.sh (err %v) chose:\n%s%s", err, stdout, stderr)
}

// TestProvisionReportsWhatIsMissing: on a machine without pgbouncer and
// rabbitmq-server (a PATH of only the tools the scripts use, nothing else
// searched, IDEMGEN_PGBOUNCER unset) that may not install packages,
// ./scripts/test.sh stops within seconds, before any test, with one message
// that names each missing program and how to install it.
func TestProvisionReportsWhatIsMissing(t *testing.T) {
	bin := t.TempDir()
	for _, tool := range []string{"bash", "cat", "tr", "mktemp", "dirname", "rm", "awk", "go", "env"} {
		p, err := exec.LookPath(tool)
		if err != nil {
			t.Fatalf("%s: %v", tool, err)
		}
		if err := os.Symlink(p, filepath.Join(bin, tool)); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	_, stderr, err := run(t, map[string]string{
		"PATH":                    bin,
		"IDEMGEN_PGBOUNCER":       "",
		"IDEMGEN_PROVISION_DIRS":  t.TempDir(),
		"IDEMGEN_TEST_NO_INSTALL": "1",
	}, "test.sh", "./idem/")
	took := time.Since(start)
	if err == nil || took > 10*time.Second {
		t.Fatalf("test.sh: %v after %v, want a failure within 10s\n%s", err, took, stderr)
	}
	for _, want := range []string{
		"provision: the tests need programs this machine lacks, and it cannot install them (IDEMGEN_TEST_NO_INSTALL=1):",
		"  pgbouncer (the PgBouncer tests start their own):",
		"sudo apt-get install pgbouncer",
		"or point IDEMGEN_PGBOUNCER at a pgbouncer binary",
		"  rabbitmq-server (the broker tests use the node on 127.0.0.1:5672 and start throwaway nodes):",
		"sudo apt-get install rabbitmq-server",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	if strings.Contains(stderr, "=== RUN") || strings.Contains(stderr, "pgenv:") {
		t.Errorf("tests or pgenv.sh ran:\n%s", stderr)
	}
	t.Logf("in %v:\n%s", took.Round(time.Millisecond), stderr)
}
