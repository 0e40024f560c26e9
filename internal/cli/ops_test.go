package cli

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemtest"
	"github.com/idemgen/idemgen/idem/relay"
	"github.com/idemgen/idemgen/internal/ops/opstest"
	"github.com/idemgen/idemgen/internal/pgcluster"
	"github.com/idemgen/idemgen/migrations"
)

// opsRun runs an operator command with the seed's clock.
func opsRun(args ...string) (stdout, stderr string, code int) {
	var out, errOut bytes.Buffer
	code = runner{now: opstest.Now}.run(".", args, &out, &errOut)
	return out.String(), errOut.String(), code
}

// transcript runs commands in order and writes what each printed, and its
// exit status, as a terminal session shows them. -db's URL is written URL,
// and the test's schema SCHEMA.
type transcript struct {
	db  *idemtest.DB
	buf strings.Builder
}

func (tr *transcript) run(args ...string) (stdout string, code int) {
	full := slices.Clone(args)
	for i, a := range full {
		if a == "URL" {
			full[i] = tr.db.URL
		}
	}
	stdout, stderr, code := opsRun(full...)
	fmt.Fprintf(&tr.buf, "$ idemgen %s\n%s%s[exit %d]\n\n", strings.Join(args, " "), stdout, stderr, code)
	return stdout, code
}

// check compares the transcript with testdata/ops/name.golden (-update
// rewrites it).
func (tr *transcript) check(t *testing.T, name string) {
	t.Helper()
	got := strings.ReplaceAll(tr.buf.String(), tr.db.Schema, "SCHEMA")
	golden := filepath.Join("testdata", "ops", name+".golden")
	if *update {
		if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update to write it)", err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s (-update rewrites it):\n--- got\n%s\n--- want\n%s", golden, got, want)
	}
}

// TestOutboxCommandsGolden pins what idemgen outbox dead and revive print,
// and their exit status, on the seeded outbox. It lists, then tries a
// revive that would publish a row before an earlier dead row of its key
// (refused, nothing changed), then revives by id and all the rest.
func TestOutboxCommandsGolden(t *testing.T) {
	tr := &transcript{db: opstest.Seed(t)}
	for _, step := range []struct {
		args []string
		code int
	}{
		{[]string{"outbox", "dead", "-db", "URL"}, ExitOK},
		{[]string{"outbox", "dead", "-db", "URL", "-consumer", "other.service"}, ExitOK},
		{[]string{"outbox", "revive", "-db", "URL", "-id", "3"}, ExitFail},
		{[]string{"outbox", "revive", "-db", "URL", "-id", "1,3", "-id", "99"}, ExitFail},
		{[]string{"outbox", "revive", "-db", "URL", "-id", "1", "-id", "3"}, ExitOK},
		{[]string{"outbox", "dead", "-db", "URL"}, ExitOK},
		{[]string{"outbox", "revive", "-db", "URL", "-all"}, ExitOK},
		{[]string{"outbox", "revive", "-db", "URL", "-all"}, ExitOK},
		{[]string{"outbox", "dead", "-db", "URL"}, ExitOK},
	} {
		if _, code := tr.run(step.args...); code != step.code {
			t.Errorf("idemgen %s: exit %d, want %d", strings.Join(step.args, " "), code, step.code)
		}
	}
	tr.check(t, "outbox")
}

// TestClaimsCommandsGolden pins what idemgen claims and claims release
// print, and their exit status, on the seeded claims tables.
func TestClaimsCommandsGolden(t *testing.T) {
	tr := &transcript{db: opstest.Seed(t)}
	for _, step := range []struct {
		args []string
		code int
	}{
		{[]string{"claims", "-db", "URL", "-schema", tr.db.Schema}, ExitOK},
		{[]string{"claims", "-db", "URL", "-schema", tr.db.Schema, "-consumer", "shipping.label"}, ExitOK},
		{[]string{"claims", "release", "-db", "URL", "-schema", tr.db.Schema, "-consumer", "payments.charge", "-key", "o-2"}, ExitOK},
		{[]string{"claims", "release", "-db", "URL", "-schema", tr.db.Schema, "-consumer", "payments.charge", "-key", "o-2"}, ExitFail},
		{[]string{"claims", "release", "-db", "URL", "-schema", tr.db.Schema, "-consumer", "shipping.label", "-key", "carrier=dhl,parcel_id=42"}, ExitOK},
		{[]string{"claims", "release", "-db", "URL", "-schema", tr.db.Schema, "-consumer", "payments.charge", "-key", opstest.IdemKey("o-3")}, ExitOK},
		{[]string{"claims", "-db", "URL", "-schema", tr.db.Schema}, ExitOK},
		{[]string{"claims", "-db", "URL", "-schema", tr.db.Schema, "-consumer", "payments.refund"}, ExitFail},
	} {
		if _, code := tr.run(step.args...); code != step.code {
			t.Errorf("idemgen %s: exit %d, want %d", strings.Join(step.args, " "), code, step.code)
		}
	}
	tr.check(t, "claims")
}

// TestOpsUsage: a bad command line is exit 2 with a message naming what is
// wrong; -h is exit 0.
func TestOpsUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"outbox"}, "idemgen: outbox: want a command: dead (list the dead rows) or revive"},
		{[]string{"outbox", "purge", "-db", "postgres:///x"}, "idemgen: outbox: want a command"},
		{[]string{"outbox", "dead"}, "idemgen: outbox dead: -db URL is required"},
		{[]string{"outbox", "revive", "-db", "postgres:///x"}, "idemgen: outbox revive: give -id ID... or -all (not both)"},
		{[]string{"outbox", "revive", "-db", "postgres:///x", "-id", "1", "-all"}, "give -id ID... or -all (not both)"},
		{[]string{"outbox", "revive", "-db", "postgres:///x", "-id", "1", "-consumer", "a"}, "-consumer selects rows with -all"},
		{[]string{"outbox", "revive", "-db", "postgres:///x", "-id", "1,x"}, `invalid value "1,x" for flag -id: "x" is not an outbox row id`},
		{[]string{"outbox", "revive", "-db", "postgres:///x", "-id", "0"}, `"0" is not an outbox row id`},
		{[]string{"outbox", "dead", "-db", "postgres:///x", "-id", "1"}, "flag provided but not defined: -id"},
		{[]string{"outbox", "dead", "-db", "postgres:///x", "extra"}, `idemgen: outbox dead: unexpected argument "extra"`},
		{[]string{"claims"}, "idemgen: claims: -db URL is required"},
		{[]string{"claims", "release", "-db", "postgres:///x", "-consumer", "a"}, "idemgen: claims release: -consumer and -key are required"},
		{[]string{"claims", "-db", "postgres:///x", "-key", "k"}, "flag provided but not defined: -key"},
		{[]string{"claim"}, `idemgen: unknown command "claim" (did you mean claims?)`},
	} {
		stdout, stderr, code := opsRun(tc.args...)
		if code != ExitUsage || !strings.Contains(stderr, tc.want) || stdout != "" {
			t.Errorf("idemgen %s: exit %d, stdout %q, stderr:\n%s\nwant exit 2 and stderr containing %q", strings.Join(tc.args, " "), code, stdout, stderr, tc.want)
		}
	}
	for _, args := range [][]string{{"outbox", "-h"}, {"outbox", "dead", "-h"}, {"outbox", "revive", "-h"}, {"claims", "-h"}, {"claims", "release", "-h"}} {
		stdout, stderr, code := opsRun(args...)
		if code != ExitOK || !strings.Contains(stdout+stderr, "Usage:\n  idemgen "+args[0]) {
			t.Errorf("idemgen %s: exit %d, output:\n%s%s", strings.Join(args, " "), code, stdout, stderr)
		}
	}
	if stdout, _, _ := opsRun("help"); !strings.Contains(stdout, "idemgen outbox dead|revive -db URL") || !strings.Contains(stdout, "idemgen claims [release] -db URL") {
		t.Errorf("help does not list outbox and claims:\n%s", stdout)
	}
}

// opsCommands are the four operator commands, with the flags each needs
// beside -db.
var opsCommands = [][]string{
	{"outbox", "dead"},
	{"outbox", "revive", "-all"},
	{"claims"},
	{"claims", "release", "-consumer", opstest.Payments, "-key", "o-1"},
}

// withDB returns cmd with -db dbURL after its command words.
func withDB(cmd []string, dbURL string) []string {
	i := slices.IndexFunc(cmd, func(a string) bool { return strings.HasPrefix(a, "-") })
	if i < 0 {
		i = len(cmd)
	}
	return slices.Concat(cmd[:i], []string{"-db", dbURL}, cmd[i:])
}

// TestOpsNeverPrintAPassword: no command prints a password of -db, in URL
// or keyword form. Not when the connection fails, not when the command
// fails later, not in what it prints on success.
func TestOpsNeverPrintAPassword(t *testing.T) {
	db := opstest.Seed(t)
	const secret = "s3cr3t-0ps"
	u, err := url.Parse(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	user := "postgres"
	if u.User != nil {
		user = u.User.Username()
	}
	u.User = url.UserPassword(user, secret) // trust authentication ignores it
	withPassword := u.String()
	urls := []struct {
		name, url string
		code      int
	}{
		{"unreachable URL", "postgres://root:" + secret + "@/idemgen_test?host=/nonexistent-0ps&connect_timeout=2", ExitFail},
		{"unreachable keyword form", "host=/nonexistent-0ps user=root password=" + secret + " connect_timeout=2", ExitFail},
		{"wrong database", "postgres://" + user + ":" + secret + "@/no_such_db_0ps?host=" + u.Query().Get("host"), ExitFail},
		{"unparsable", "postgres://root:" + secret + "@host:notaport/db", ExitUsage},
		{"working", withPassword, -1},
	}
	for _, tc := range urls {
		for _, cmd := range opsCommands {
			args := withDB(cmd, tc.url)
			if cmd[0] == "claims" {
				args = append(args, "-schema", db.Schema)
			}
			stdout, stderr, code := opsRun(args...)
			if tc.code >= 0 && code != tc.code {
				t.Errorf("%s: idemgen %s: exit %d, want %d; stderr:\n%s", tc.name, strings.Join(cmd, " "), code, tc.code, stderr)
			}
			if strings.Contains(stdout+stderr, secret) {
				t.Errorf("%s: idemgen %s printed the password:\n%s%s", tc.name, strings.Join(cmd, " "), stdout, stderr)
			}
			if tc.code >= 0 && !strings.HasPrefix(stderr, "idemgen: ") {
				t.Errorf("%s: idemgen %s: stderr does not start with \"idemgen: \":\n%s", tc.name, strings.Join(cmd, " "), stderr)
			}
			t.Logf("%s: idemgen %s: exit %d: %s", tc.name, strings.Join(cmd, " "), code, firstLine(stderr+stdout))
		}
	}
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// checkRefusesStandby runs each operator command against dbURL, a server
// that is not a primary, and checks that each refuses it: exit 1, the
// reason on stderr, nothing on stdout.
func checkRefusesStandby(t *testing.T, dbURL string) {
	t.Helper()
	for _, cmd := range opsCommands {
		stdout, stderr, code := opsRun(withDB(cmd, dbURL)...)
		if code != ExitFail || stdout != "" || !strings.HasPrefix(stderr, "idemgen: the server is not a primary: pg_is_in_recovery() is true") {
			t.Errorf("idemgen %s on a standby: exit %d, stdout %q, stderr:\n%s\nwant exit 1 and the refusal", strings.Join(cmd, " "), code, stdout, stderr)
		}
		t.Logf("idemgen %s on a standby: exit %d: %s", strings.Join(cmd, " "), code, firstLine(stderr))
	}
}

// TestOpsRefuseAStandby: every command refuses a server in recovery.
func TestOpsRefuseAStandby(t *testing.T) {
	checkRefusesStandby(t, opstest.Standby(t))
}

// TestOpsRefuseAStreamingStandby: every command refuses the standby of a
// primary and standby pair, which streams the primary's WAL, and works on
// the primary through the pair's multi-host URL. After a failover the same
// URL reaches the promoted standby, where the commands work again.
func TestOpsRefuseAStreamingStandby(t *testing.T) {
	p, err := pgcluster.StartPair(pgcluster.PairOptions{Prefix: "idemgen-ops-standby.", Settings: []string{"fsync=off"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Remove)
	db := idemtest.NewAt(t, p.URL("postgres"), migrations.FS) // the outbox, on the primary
	checkRefusesStandby(t, p.StandbyURL("postgres"))
	for _, when := range []string{"before the failover", "after the failover"} {
		stdout, stderr, code := opsRun(withDB([]string{"outbox", "dead"}, db.URL)...)
		if code != ExitOK {
			t.Errorf("idemgen outbox dead through the pair's URL %s: exit %d, stdout %q, stderr:\n%s", when, code, stdout, stderr)
		}
		t.Logf("idemgen outbox dead through the pair's URL %s: exit %d: %s", when, code, firstLine(stdout))
		if when == "before the failover" {
			if _, err := p.Failover(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// orderedPublisher records, per ordering key, the messages it confirmed, and
// refuses every message of the keys in broken.
type orderedPublisher struct {
	mu        sync.Mutex
	broken    map[string]bool
	published map[string][]string // ordering key -> "key@attempt"
}

func (p *orderedPublisher) Publish(_ context.Context, msgs []idem.OutgoingMessage) []error {
	p.mu.Lock()
	defer p.mu.Unlock()
	errs := make([]error, len(msgs))
	for i, m := range msgs {
		if p.broken[m.OrderingKey] {
			errs[i] = fmt.Errorf("refused: the broker has no route for %s", m.Destination)
			continue
		}
		p.published[m.OrderingKey] = append(p.published[m.OrderingKey], fmt.Sprintf("%s@%d", m.Headers["key"], m.Attempt))
	}
	return errs
}

func (p *orderedPublisher) get(key string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.published[key])
}

// runRelay runs an ordered relay over pub until cond holds (or a minute
// passes), then stops it.
func runRelay(t *testing.T, db *idemtest.DB, pub idem.Publisher, what string, cond func() bool) {
	t.Helper()
	r := relay.New(db.Pool, pub, relay.WithOrdered(), relay.WithMaxAttempts(2), relay.WithBackoff(10*time.Millisecond, 20*time.Millisecond),
		relay.WithPollInterval(20*time.Millisecond), relay.WithLogger(idemtest.Logger(t)))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	deadline := time.Now().Add(time.Minute)
	for !cond() && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("relay: %v", err)
	}
	if !cond() {
		t.Fatalf("relay: not within a minute: %s", what)
	}
}

// TestReviveKeepsTheOrder: a relay in ordered mode dead-letters the four
// rows of ordering key acc-1, which the broker refuses, while acc-2's go
// out. A fifth row of acc-1 is written afterwards. idemgen outbox revive
// refuses later dead rows without the earlier ones, then revives all four.
// The relay publishes acc-1's five rows in the order they were written,
// each as its first attempt.
func TestReviveKeepsTheOrder(t *testing.T) {
	db := opstest.Empty(t)
	ctx := context.Background()
	write := func(key, orderingKey string) {
		t.Helper()
		if _, err := db.Pool.Exec(ctx, `INSERT INTO idem_outbox (message_id, consumer, key, destination, ordering_key, headers, payload)
			VALUES (gen_random_uuid(), 'billing.charge', $1, 'charges', $2, jsonb_build_object('key', $1::text), '\x00')`, key, orderingKey); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range [][2]string{{"o-1", "acc-1"}, {"p-1", "acc-2"}, {"o-2", "acc-1"}, {"o-3", "acc-1"}, {"p-2", "acc-2"}, {"o-4", "acc-1"}} {
		write(r[0], r[1])
	}
	pub := &orderedPublisher{broken: map[string]bool{"acc-1": true}, published: map[string][]string{}}
	count := func(sql string) int {
		var n int
		if err := db.Pool.QueryRow(ctx, sql).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	runRelay(t, db, pub, "acc-1's rows dead, acc-2's published", func() bool {
		return count(`SELECT count(*) FROM idem_outbox WHERE dead_at IS NOT NULL`) == 4 && count(`SELECT count(*) FROM idem_outbox`) == 4
	})
	if got := pub.get("acc-2"); !slices.Equal(got, []string{"p-1@1", "p-2@1"}) {
		t.Fatalf("acc-2 published %v; want [p-1@1 p-2@1]", got)
	}
	write("o-5", "acc-1")

	stdout, stderr, code := opsRun("outbox", "dead", "-db", db.URL)
	if code != ExitOK || !strings.HasPrefix(stdout, "4 dead row(s) in "+db.Schema+".idem_outbox") || !strings.Contains(stdout, "refused: the broker has no route for charges") {
		t.Fatalf("outbox dead: exit %d\n%s%s", code, stdout, stderr)
	}
	t.Logf("idemgen outbox dead:\n%s", stdout)
	stdout, stderr, code = opsRun("outbox", "revive", "-db", db.URL, "-id", "4,6")
	if code != ExitFail || !strings.Contains(stderr, "add -id 1,3") {
		t.Fatalf("revive -id 4,6: exit %d\n%s%s; want the refusal naming 1 and 3", code, stdout, stderr)
	}
	t.Logf("idemgen outbox revive -id 4,6: exit %d: %s", code, firstLine(stderr))
	stdout, stderr, code = opsRun("outbox", "revive", "-db", db.URL, "-all")
	if code != ExitOK || !strings.HasPrefix(stdout, "revived 4 dead row(s)") {
		t.Fatalf("revive -all: exit %d\n%s%s", code, stdout, stderr)
	}
	t.Logf("idemgen outbox revive -all:\n%s", stdout)

	pub.broken = map[string]bool{}
	runRelay(t, db, pub, "every row published", func() bool { return count(`SELECT count(*) FROM idem_outbox`) == 0 })
	want := []string{"o-1@1", "o-2@1", "o-3@1", "o-4@1", "o-5@1"}
	if got := pub.get("acc-1"); !slices.Equal(got, want) {
		t.Errorf("acc-1 published %v; want %v", got, want)
	}
	t.Logf("after the revive, the ordered relay published acc-1 as %v", pub.get("acc-1"))
}
