package audit_test

import (
	"context"
	"errors"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/idem/idemtest"
	"github.com/idemgen/idemgen/internal/audit"
	"github.com/idemgen/idemgen/internal/audit/audittest"
	"github.com/idemgen/idemgen/internal/load"
	"github.com/idemgen/idemgen/internal/model"
	"github.com/idemgen/idemgen/migrations"
)

var (
	progOnce sync.Once
	prog     model.Program
	progErr  error
)

// program loads the example packages the seeded schema holds, as idemgen
// audit does.
func program(t *testing.T) model.Program {
	t.Helper()
	progOnce.Do(func() {
		root, err := filepath.Abs("../..")
		if err != nil {
			progErr = err
			return
		}
		p, diags, err := load.Load(load.Config{Dir: root, Patterns: audittest.Packages})
		if err == nil && diags.HasErrors() {
			var b strings.Builder
			diags.Print(&b, root)
			err = errors.New(b.String())
		}
		prog, progErr = p, err
	})
	if progErr != nil {
		t.Fatalf("load the example packages: %v", progErr)
	}
	return prog
}

// run audits the seeded schema in a read-only snapshot, with the seed's
// clock.
func run(t *testing.T, pool *pgxpool.Pool, cfg audit.Config) (audit.Report, error) {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if cfg.Now.IsZero() {
		cfg.Now = audittest.Now
	}
	return audit.Run(ctx, tx, program(t), cfg)
}

func TestRunReportsEachCondition(t *testing.T) {
	db := audittest.Seed(t, true)
	rep, err := run(t, db.Pool, audit.Config{Doubles: &audit.DoublesQuery{
		Table: audittest.Business, Columns: []string{"external_event_id"}, TimeColumn: "created_at", Since: 24 * time.Hour,
	}})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Schema != db.Schema || !rep.Now.Equal(audittest.Now) {
		t.Errorf("schema %s at %v, want %s at %v", rep.Schema, rep.Now, db.Schema, audittest.Now)
	}
	const day = 24 * time.Hour
	type want struct {
		mode                                                 model.Mode
		rows, past, running, expired, released, retried, max int64
		oldest                                               time.Duration
		retain, lease                                        time.Duration
		outPending, outDead                                  int64
	}
	wants := map[string]want{
		"billing.charge":       {mode: model.ModeTx, rows: 3, past: 1, max: 1, oldest: 40 * day, retain: 720 * time.Hour, outPending: 2, outDead: 1},
		"billing.open-account": {mode: model.ModeTx, retain: 720 * time.Hour},
		"billing.payment":      {mode: model.ModeTx, rows: 2, past: 1, max: 1, oldest: 100 * day, retain: 2160 * time.Hour},
		"payments.charge": {mode: model.ModeExternal, rows: 5, past: 1, running: 2, expired: 1, released: 1, retried: 2, max: 3,
			oldest: 31 * day, retain: 720 * time.Hour, lease: 30 * time.Second},
	}
	if len(rep.Consumers) != len(wants) {
		t.Fatalf("%d consumers, want %d: %+v", len(rep.Consumers), len(wants), rep.Consumers)
	}
	for i, c := range rep.Consumers {
		w, ok := wants[c.Consumer]
		if !ok {
			t.Errorf("unexpected consumer %s", c.Consumer)
			continue
		}
		if i > 0 && rep.Consumers[i-1].Consumer > c.Consumer {
			t.Errorf("consumers not sorted: %s before %s", rep.Consumers[i-1].Consumer, c.Consumer)
		}
		got := want{mode: c.Mode, rows: c.Rows, past: c.PastRetention, running: c.Running, expired: c.Expired, released: c.Released,
			retried: c.Retried, max: c.MaxAttempts, oldest: c.OldestAge, retain: c.Retain, lease: c.Lease,
			outPending: c.Outbox.Pending, outDead: c.Outbox.Dead}
		if got != w {
			t.Errorf("%s:\n got %+v\nwant %+v", c.Consumer, got, w)
		}
		if c.Schema != db.Schema {
			t.Errorf("%s: schema %s, want %s", c.Consumer, c.Schema, db.Schema)
		}
		t.Logf("%s: rows=%d past_retention=%d running=%d past_lease=%d released=%d attempts>1=%d max=%d oldest=%v outbox pending=%d dead=%d",
			c.Consumer, c.Rows, c.PastRetention, c.Running, c.Expired, c.Released, c.Retried, c.MaxAttempts, c.OldestAge, c.Outbox.Pending, c.Outbox.Dead)
	}
	pc := rep.Consumers[3]
	if want := audittest.Now.Add(-5 * time.Minute); !pc.OldestExpired.Equal(want) {
		t.Errorf("payments.charge: oldest expired lease %v, want %v", pc.OldestExpired, want)
	}
	bc := rep.Consumers[0]
	if want := audittest.Now.Add(-3 * time.Hour); !bc.Outbox.OldestPending.Equal(want) || bc.Outbox.OldestPendingAge != 3*time.Hour {
		t.Errorf("billing.charge: oldest pending outbox row %v (%v), want %v", bc.Outbox.OldestPending, bc.Outbox.OldestPendingAge, want)
	}

	if rep.Outbox == nil {
		t.Fatal("no outbox in the report")
	}
	if o := rep.Outbox.OutboxCounts; o.Pending != 3 || o.Dead != 1 || o.OldestPendingAge != 5*time.Hour {
		t.Errorf("outbox: %+v, want 3 pending (other.service's too), the oldest 5h, 1 dead", o)
	}
	t.Logf("outbox: pending=%d dead=%d oldest=%v", rep.Outbox.Pending, rep.Outbox.Dead, rep.Outbox.OldestPendingAge)

	d := rep.Doubles
	if d == nil || !rep.Doubled() {
		t.Fatalf("doubled work not found: %+v", d)
	}
	if d.Groups != 1 || d.Rows != 2 || d.Extra != 1 || len(d.Top) != 1 || *d.Top[0].Values[0] != "evt_3" || d.Top[0].Count != 2 {
		t.Errorf("doubles: %+v, want evt_3 twice and nothing else (evt_old is outside the window)", d)
	}
	if !d.From.Equal(audittest.Now.Add(-24 * time.Hour)) {
		t.Errorf("window from %v", d.From)
	}
	t.Logf("doubles in 24h: groups=%d rows=%d extra=%d top=%s×%d", d.Groups, d.Rows, d.Extra, *d.Top[0].Values[0], d.Top[0].Count)
}

func TestRunDoublesWindow(t *testing.T) {
	db := audittest.Seed(t, false)
	cases := []struct {
		name   string
		q      audit.DoublesQuery
		groups int64
		top    []string // "value,value:count"
	}{
		{"within 24h", audit.DoublesQuery{Columns: []string{"external_event_id"}, TimeColumn: "created_at", Since: 24 * time.Hour}, 0, nil},
		{"within 4 days", audit.DoublesQuery{Columns: []string{"external_event_id"}, TimeColumn: "created_at", Since: 96 * time.Hour}, 1, []string{"evt_old:2"}},
		{"all rows", audit.DoublesQuery{Columns: []string{"external_event_id"}}, 1, []string{"evt_old:2"}},
		{"two columns", audit.DoublesQuery{Columns: []string{"external_event_id", "channel"}}, 1, []string{"evt_old,sms:2"}},
		{"every notification on one channel", audit.DoublesQuery{Columns: []string{"channel"}, Limit: 1}, 1, []string{"sms:5"}},
		{"schema-qualified", audit.DoublesQuery{Table: db.Schema + "." + audittest.Business, Columns: []string{"external_event_id"}}, 1, []string{"evt_old:2"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.q.Table == "" {
				tc.q.Table = audittest.Business
			}
			rep, err := run(t, db.Pool, audit.Config{Doubles: &tc.q})
			if err != nil {
				t.Fatal(err)
			}
			d := rep.Doubles
			var top []string
			for _, g := range d.Top {
				var vals []string
				for _, v := range g.Values {
					vals = append(vals, *v)
				}
				top = append(top, strings.Join(vals, ",")+":"+itoa(g.Count))
			}
			if d.Groups != tc.groups || strings.Join(top, " ") != strings.Join(tc.top, " ") || rep.Doubled() != (tc.groups > 0) {
				t.Errorf("groups %d top %v doubled %v, want %d %v", d.Groups, top, rep.Doubled(), tc.groups, tc.top)
			}
			t.Logf("groups=%d top=%v", d.Groups, top)
		})
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func TestRunErrors(t *testing.T) {
	db := audittest.Seed(t, false)
	ctx := context.Background()
	// A schema without the payments table, to find the missing inbox.
	if _, err := db.Pool.Exec(ctx, "DROP TABLE idem_payments_charge"); err != nil {
		t.Fatal(err)
	}
	dq := func(q audit.DoublesQuery) *audit.DoublesQuery {
		if q.Table == "" {
			q.Table = audittest.Business
		}
		return &q
	}
	cases := []struct {
		name     string
		cfg      audit.Config
		want     string
		notFound bool
	}{
		{"missing inbox", audit.Config{}, `inbox table ` + db.Schema + `.idem_payments_charge of consumer payments.charge not found`, true},
		{"missing schema", audit.Config{Schema: "no_such_schema_h13"}, `schema "no_such_schema_h13" not found`, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := run(t, db.Pool, tc.cfg)
			checkErr(t, err, tc.want, tc.notFound)
		})
	}

	// The business table's errors, with the consumers' tables all there.
	full := audittest.Seed(t, false)
	bad := []struct {
		name     string
		q        *audit.DoublesQuery
		want     string
		notFound bool
	}{
		{"missing table", dq(audit.DoublesQuery{Table: "notification", Columns: []string{"id"}}), `table ` + full.Schema + `.notification not found (-table)`, true},
		{"missing table schema", dq(audit.DoublesQuery{Table: "nope_h13.notifications", Columns: []string{"id"}}), `schema "nope_h13" of table nope_h13.notifications not found (-table)`, true},
		{"missing column", dq(audit.DoublesQuery{Columns: []string{"event_id"}}), `table ` + full.Schema + `.notifications has no column "event_id" (not found); its columns are id, external_event_id, channel, sent_on, created_at (-columns)`, true},
		{"column case", dq(audit.DoublesQuery{Columns: []string{"External_Event_ID"}}), `has no column "External_Event_ID" (not found); did you mean "external_event_id"? (-columns)`, true},
		{"missing time column", dq(audit.DoublesQuery{Columns: []string{"id"}, TimeColumn: "sent_at", Since: time.Hour}), `has no column "sent_at" (not found); its columns are`, true},
		{"time column not a time", dq(audit.DoublesQuery{Columns: []string{"id"}, TimeColumn: "sent_on", Since: time.Hour}), `column "sent_on" of table ` + full.Schema + `.notifications is text, not a timestamp or date (-time-column)`, false},
		{"no columns", dq(audit.DoublesQuery{}), `needs the columns that identify one piece of work (-columns)`, false},
		{"column twice", dq(audit.DoublesQuery{Columns: []string{"id", "id"}}), `column "id" is named twice (-columns)`, false},
		{"window without since", dq(audit.DoublesQuery{Columns: []string{"id"}, TimeColumn: "created_at"}), `a time window on created_at needs a positive -since`, false},
		{"since without window", dq(audit.DoublesQuery{Columns: []string{"id"}, Since: time.Hour}), `-since needs -time-column`, false},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			_, err := run(t, full.Pool, audit.Config{Doubles: tc.q})
			checkErr(t, err, tc.want, tc.notFound)
		})
	}

	// An outbox handler's schema without the outbox table.
	if _, err := full.Pool.Exec(ctx, "DROP TABLE idem_outbox"); err != nil {
		t.Fatal(err)
	}
	_, err := run(t, full.Pool, audit.Config{})
	checkErr(t, err, `consumer billing.charge publishes through the outbox, but table `+full.Schema+`.idem_outbox not found`, true)
}

func checkErr(t *testing.T, err error, want string, notFound bool) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %q", want)
	}
	if !strings.Contains(err.Error(), want) {
		t.Errorf("error %q\nwant it to contain %q", err, want)
	}
	if errors.Is(err, audit.ErrNotFound) != notFound {
		t.Errorf("errors.Is(%q, ErrNotFound) = %v, want %v", err, !notFound, notFound)
	}
	t.Logf("error: %v", err)
}

// TestRunQuotesNames audits a business table and columns whose names need
// quotes (a keyword, upper case, a space, a double quote).
func TestRunQuotesNames(t *testing.T) {
	db := audittest.Seed(t, false)
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `CREATE TABLE "Order Log" ("select" text, "Event ""Id""" text, "When" timestamp)`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO "Order Log" VALUES ('a', 'e1', $1), ('a', 'e1', $1), ('b', NULL, $1), ('b', NULL, $1), ('c', 'e2', $1)`,
		audittest.Now.Add(-time.Hour).Format("2006-01-02 15:04:05")); err != nil {
		t.Fatal(err)
	}
	rep, err := run(t, db.Pool, audit.Config{Doubles: &audit.DoublesQuery{Table: "Order Log", Columns: []string{"select", `Event "Id"`}, TimeColumn: "When", Since: 48 * time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	d := rep.Doubles
	if d.Groups != 2 || d.Rows != 4 || d.Top[0].Values[1] == nil || *d.Top[0].Values[1] != "e1" || d.Top[1].Values[1] != nil {
		t.Errorf("doubles %+v: want (a, e1) and (b, NULL) twice each", d)
	}
	t.Logf("groups=%d rows=%d", d.Groups, d.Rows)
}

// TestRunOutboxKeepingPublished: an outbox table without the migration 00002
// still keeps its published rows (published_at set); the audit leaves them
// out of the backlog, as it did before the relay deleted them.
func TestRunOutboxKeepingPublished(t *testing.T) {
	first, err := fs.ReadFile(migrations.FS, "00001_idem_outbox.sql")
	if err != nil {
		t.Fatal(err)
	}
	db := idemtest.New(t, fstest.MapFS{"00001_idem_outbox.sql": {Data: first}})
	ctx := context.Background()
	at := func(d time.Duration) time.Time { return audittest.Now.Add(-d) }
	if _, err := db.Pool.Exec(ctx, `INSERT INTO idem_outbox (message_id, consumer, key, destination, payload, created_at, published_at, dead_at) VALUES
		(gen_random_uuid(), 'c', 'pending', 'd', '\x00', $1, NULL, NULL),
		(gen_random_uuid(), 'c', 'published', 'd', '\x00', $2, $2, NULL),
		(gen_random_uuid(), 'c', 'dead', 'd', '\x00', $3, NULL, $3)`, at(2*time.Hour), at(5*time.Hour), at(time.Hour)); err != nil {
		t.Fatal(err)
	}
	rep, err := audit.Run(ctx, db.Pool, model.Program{}, audit.Config{Now: audittest.Now})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Outbox == nil {
		t.Fatal("no outbox in the report")
	}
	if o := rep.Outbox.OutboxCounts; o.Pending != 1 || o.Dead != 1 || o.OldestPendingAge != 2*time.Hour {
		t.Errorf("outbox: %+v, want 1 pending (2h old) and 1 dead, the published row left out", o)
	}
}
