package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemgen/idemgen/internal/audit/audittest"
)

// auditRun runs idemgen audit in the repository's root with the seed's clock
// on the example packages the seeded schema holds.
func auditRun(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	code = runner{now: audittest.Now}.run(root, append(append([]string{"audit"}, args...), audittest.Packages...), &out, &errOut)
	return out.String(), errOut.String(), code
}

// window is the duplicate query of the seeded business table over the last
// 24 hours.
var window = []string{"-table", audittest.Business, "-columns", "external_event_id", "-time-column", "created_at", "-since", "24h"}

// TestAuditGolden pins the human report of the seeded schema, with and
// without a doubled row in the window, and the exit status: 1 with it, 0
// without. The test schema's random name is written SCHEMA.
func TestAuditGolden(t *testing.T) {
	for _, tc := range []struct {
		name    string
		doubled bool
		code    int
		stderr  string
	}{
		{"doubled", true, ExitFail, "idemgen audit: doubled work: 1 value(s) of external_event_id in notifications found in more than one row\n"},
		{"clean", false, ExitOK, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := audittest.Seed(t, tc.doubled)
			stdout, stderr, code := auditRun(t, append([]string{"-db", db.URL}, window...)...)
			if code != tc.code || stderr != tc.stderr {
				t.Errorf("exit %d, stderr %q; want %d, %q", code, stderr, tc.code, tc.stderr)
			}
			got := strings.ReplaceAll(stdout, db.Schema, "SCHEMA")
			golden := filepath.Join("testdata", "audit", tc.name+".golden")
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to write it)", err)
			}
			if got != string(want) {
				t.Errorf("report differs from %s (-update rewrites it):\n--- got\n%s\n--- want\n%s", golden, got, want)
			}
			t.Logf("exit %d, %d lines of report", code, strings.Count(stdout, "\n"))
		})
	}
}

// TestAuditJSON decodes -json's report of the seeded schema, named with
// -schema on a connection whose search_path does not lead there.
func TestAuditJSON(t *testing.T) {
	db := audittest.Seed(t, true)
	base := strings.Split(db.URL, "search_path=")[0] // idemtest puts it last
	stdout, stderr, code := auditRun(t, append([]string{"-db", strings.TrimRight(base, "&?"), "-schema", db.Schema, "-json"}, window...)...)
	if code != ExitFail {
		t.Fatalf("exit %d, want %d; stderr:\n%s", code, ExitFail, stderr)
	}
	var rep struct {
		Schema    string
		Now       time.Time
		Doubled   bool
		Consumers []struct {
			Consumer, Package, Handler, Mode, Table, Schema string
			RetainSeconds                                   float64 `json:"retain_seconds"`
			LeaseSeconds                                    float64 `json:"lease_seconds"`
			Rows, Running, Released                         int64
			PastRetention                                   int64   `json:"past_retention"`
			PastLease                                       int64   `json:"past_lease"`
			Retried                                         int64   `json:"attempts_over_1"`
			MaxAttempts                                     int64   `json:"max_attempts"`
			OldestAge                                       float64 `json:"oldest_age_seconds"`
			Oldest                                          *time.Time
			OldestExpired                                   *time.Time `json:"oldest_expired_lease"`
			Outbox                                          *struct {
				Pending, Dead int64
				OldestPending *time.Time `json:"oldest_pending"`
				OldestAge     float64    `json:"oldest_pending_age_seconds"`
			}
		}
		Outbox *struct {
			Table, Schema string
			Pending, Dead int64
			OldestPending *time.Time `json:"oldest_pending"`
			OldestAge     float64    `json:"oldest_pending_age_seconds"`
		}
		Doubles *struct {
			Table, Schema string
			TimeColumn    string `json:"time_column"`
			Columns       []string
			SinceSeconds  float64 `json:"since_seconds"`
			From          time.Time
			Groups, Rows  int64
			Extra         int64 `json:"extra_rows"`
			Top           []struct {
				Values []*string
				Rows   int64
			}
		}
	}
	dec := json.NewDecoder(strings.NewReader(stdout))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rep); err != nil {
		t.Fatalf("decode: %v\n%s", err, stdout)
	}
	if rep.Schema != db.Schema || !rep.Now.Equal(audittest.Now) || !rep.Doubled || len(rep.Consumers) != 4 {
		t.Fatalf("report: %+v", rep)
	}
	byName := map[string]int{}
	for i, c := range rep.Consumers {
		byName[c.Consumer] = i
	}
	bc := rep.Consumers[byName["billing.charge"]]
	if bc.Package != "github.com/idemgen/idemgen/examples/billing" || bc.Handler != "Charge" || bc.Outbox.OldestAge != 3*3600 {
		t.Errorf("billing.charge: %+v", bc)
	}
	if bc.Mode != "tx" || bc.Rows != 3 || bc.PastRetention != 1 || bc.RetainSeconds != 720*3600 || bc.OldestAge != 40*86400 ||
		bc.Outbox == nil || bc.Outbox.Pending != 2 || bc.Outbox.Dead != 1 || bc.OldestExpired != nil || bc.Schema != db.Schema {
		t.Errorf("billing.charge: %+v", bc)
	}
	oa := rep.Consumers[byName["billing.open-account"]]
	if oa.Rows != 0 || oa.Oldest != nil || oa.OldestAge != 0 {
		t.Errorf("billing.open-account: %+v", oa)
	}
	pc := rep.Consumers[byName["payments.charge"]]
	if pc.Mode != "external" || pc.Rows != 5 || pc.Running != 2 || pc.PastLease != 1 || pc.Released != 1 || pc.Retried != 2 ||
		pc.MaxAttempts != 3 || pc.LeaseSeconds != 30 || pc.OldestExpired == nil || !pc.OldestExpired.Equal(audittest.Now.Add(-5*time.Minute)) {
		t.Errorf("payments.charge: %+v", pc)
	}
	if o := rep.Outbox; o == nil || o.Table != "idem_outbox" || o.Pending != 3 || o.Dead != 1 || o.OldestAge != 5*3600 {
		t.Errorf("outbox: %+v", o)
	}
	d := rep.Doubles
	if d == nil || d.Table != audittest.Business || d.TimeColumn != "created_at" || d.SinceSeconds != 86400 ||
		!d.From.Equal(audittest.Now.Add(-24*time.Hour)) || d.Groups != 1 || d.Rows != 2 || d.Extra != 1 ||
		len(d.Top) != 1 || *d.Top[0].Values[0] != "evt_3" || d.Top[0].Rows != 2 {
		t.Errorf("doubles: %+v", d)
	}
	t.Logf("json: %d consumers, payments.charge past_lease=%d attempts_over_1=%d, outbox pending=%d dead=%d, doubles groups=%d extra=%d",
		len(rep.Consumers), pc.PastLease, pc.Retried, rep.Outbox.Pending, rep.Outbox.Dead, d.Groups, d.Extra)
}

// TestAuditBadInput: every input the audit cannot run with is a clear error
// naming it, with exit status 2, and a password in -db is never printed.
func TestAuditBadInput(t *testing.T) {
	db := audittest.Seed(t, false)
	const secret = "s3cr3t-h13"
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no db", []string{"-table", "t", "-columns", "a"}, "idemgen audit: -db URL is required"},
		{"unparsable url", []string{"-db", "postgres://root:" + secret + "@host:notaport/db"}, "idemgen audit: -db: cannot parse"},
		{"unreachable server", []string{"-db", "postgres://root:" + secret + "@/idemgen_test?host=/nonexistent-h13&connect_timeout=2"}, "idemgen audit: -db: connect:"},
		{"keyword url", []string{"-db", "host=/nonexistent-h13 user=root password=" + secret + " connect_timeout=2"}, "idemgen audit: -db: connect:"},
		{"missing table", []string{"-db", db.URL, "-table", "notifs", "-columns", "external_event_id"}, "idemgen audit: table " + db.Schema + ".notifs not found (-table)"},
		{"missing column", []string{"-db", db.URL, "-table", "notifications", "-columns", "external_event_id,event"}, `idemgen audit: table ` + db.Schema + `.notifications has no column "event" (not found); its columns are id, external_event_id, channel, sent_on, created_at (-columns)`},
		{"missing time column", []string{"-db", db.URL, "-table", "notifications", "-columns", "external_event_id", "-time-column", "sent", "-since", "1h"}, `has no column "sent" (not found)`},
		{"missing schema", []string{"-db", db.URL, "-schema", "no_schema_h13"}, `idemgen audit: schema "no_schema_h13" not found`},
		{"table without columns", []string{"-db", db.URL, "-table", "notifications"}, "idemgen audit: -table notifications needs -columns"},
		{"columns without table", []string{"-db", db.URL, "-columns", "a"}, "idemgen audit: -columns, -time-column and -since apply to a business table: name it with -table"},
		{"empty column", []string{"-db", db.URL, "-table", "notifications", "-columns", "a,,b"}, `idemgen audit: -columns "a,,b" names an empty column`},
		{"time column without since", []string{"-db", db.URL, "-table", "notifications", "-columns", "a", "-time-column", "created_at"}, "idemgen audit: -time-column created_at needs a positive -since"},
		{"since without time column", []string{"-db", db.URL, "-table", "notifications", "-columns", "a", "-since", "1h"}, "idemgen audit: -since needs -time-column"},
		{"bad limit", []string{"-db", db.URL, "-table", "notifications", "-columns", "a", "-limit", "0"}, "idemgen audit: -limit must be positive, not 0"},
		{"unknown flag", []string{"-db", db.URL, "-tabel", "notifications"}, "flag provided but not defined: -tabel"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, code := auditRun(t, tc.args...)
			if code != ExitUsage || !strings.Contains(stderr, tc.want) || stdout != "" {
				t.Errorf("exit %d, stdout %q, stderr:\n%s\nwant exit %d and stderr containing %q", code, stdout, stderr, ExitUsage, tc.want)
			}
			if strings.Contains(stderr, secret) {
				t.Errorf("the password is printed:\n%s", stderr)
			}
			t.Logf("exit %d: %s", code, strings.SplitN(stderr, "\n", 2)[0])
		})
	}

	// A package that does not load: nothing is audited, exit 2.
	var out, errOut bytes.Buffer
	root, _ := filepath.Abs("../..")
	code := runner{}.run(root, []string{"audit", "-db", db.URL, "./no/such/package"}, &out, &errOut)
	if code != ExitUsage || !strings.Contains(errOut.String(), "nothing was audited") {
		t.Errorf("missing package: exit %d, stderr:\n%s", code, errOut.String())
	}
	t.Logf("missing package: exit %d", code)
}

func TestAuditHelp(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(".", []string{"audit", "-h"}, &out, &errOut); code != ExitOK || !strings.Contains(errOut.String(), "Usage: idemgen audit -db URL") ||
		!strings.Contains(errOut.String(), "-time-column") {
		t.Errorf("audit -h: exit %d, stderr:\n%s", code, errOut.String())
	}
	out.Reset()
	if code := run(".", []string{"help"}, &out, &errOut); code != ExitOK || !strings.Contains(out.String(), "idemgen audit -db URL [flags] [packages]") {
		t.Errorf("help does not list audit:\n%s", out.String())
	}
}
