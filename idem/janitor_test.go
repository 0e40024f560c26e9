package idem_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/idemgen/idemgen/examples/billing"
	"github.com/idemgen/idemgen/examples/payments"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemimpl"
	"github.com/idemgen/idemgen/idem/idemtest"
	"github.com/idemgen/idemgen/idem/internal/relaytest"
)

// The janitor's tests run on generated tables: the inbox of examples/billing's charge
// (mode=tx) and the claims of examples/payments (mode=external), and on the
// hand-written external table of idemtest.TextKeyExternal beside the charge
// and the outbox in one schema.

// janitorDB is a fresh schema with billing's tables (its inboxes and the
// outbox) and the payment table of idemtest.TextKeyExternal.
func janitorDB(t testing.TB) *idemtest.DB {
	t.Helper()
	base := billing.Migrations()
	all := fstest.MapFS{"00100_pay.sql": {Data: []byte(payMigration)}}
	names, err := fs.Glob(base, "*.sql")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		data, err := fs.ReadFile(base, name)
		if err != nil {
			t.Fatal(err)
		}
		all[name] = &fstest.MapFile{Data: data}
	}
	return idemtest.New(t, all)
}

func mustExec(t testing.TB, db *idemtest.DB, sql string, args ...any) {
	t.Helper()
	if _, err := db.Pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// TestJanitorRefusesRetentionShorterThanLease: a mode=external consumer
// whose rows would be purged while a claim may still run is refused by the
// constructor, naming both durations; as are a Maintenance no inbox made and
// a table listed twice.
func TestJanitorRefusesRetentionShorterThanLease(t *testing.T) {
	db := payDB(t)
	short := payTable
	short.Retain, short.Lease = time.Minute, 5*time.Minute
	x := idemimpl.NewExternalInbox(db.Pool, short, charge(idemtest.NewProvider()))
	_, err := idem.NewJanitor(db.Pool, []idem.Maintained{x})
	if err == nil || !strings.Contains(err.Error(), "shorter than its lease") || !strings.Contains(err.Error(), "1m0s") || !strings.Contains(err.Error(), "5m0s") {
		t.Fatalf("NewJanitor(retain 1m, lease 5m) = %v; want a refusal naming both", err)
	}
	// WithLease counts, not only the table's lease.
	x = idemimpl.NewExternalInbox(db.Pool, payTable, charge(idemtest.NewProvider()), idem.WithLease(800*time.Hour))
	if _, err := idem.NewJanitor(db.Pool, []idem.Maintained{x}); err == nil {
		t.Fatal("NewJanitor accepted retain 720h with WithLease(800h)")
	}
	ok := idemimpl.NewExternalInbox(db.Pool, payTable, charge(idemtest.NewProvider()))
	if _, err := idem.NewJanitor(db.Pool, []idem.Maintained{ok}); err != nil {
		t.Fatalf("NewJanitor(retain 720h, lease 5m) = %v", err)
	}
	if _, err := idem.NewJanitor(db.Pool, []idem.Maintained{ok, ok}); err == nil || !strings.Contains(err.Error(), "listed twice") {
		t.Errorf("a table listed twice: %v", err)
	}
	if _, err := idem.NewJanitor(db.Pool, []idem.Maintained{fakeMaintained{}}); err == nil || !strings.Contains(err.Error(), "no inbox made") {
		t.Errorf("a hand-made Maintenance: %v", err)
	}
	if _, err := idem.NewJanitor(db.Pool, nil); err == nil {
		t.Error("a janitor with nothing to do was accepted")
	}
}

type fakeMaintained struct{}

func (fakeMaintained) Maintenance() idem.Maintenance {
	return idem.Maintenance{Consumer: "fake", Table: "fake", Retain: time.Hour}
}

// TestJanitorWarnsBelowRedeliveryHorizon: one Warn record per consumer whose
// retention is shorter than the horizon, with the consumer and both
// durations; none for one that keeps its rows longer.
func TestJanitorWarnsBelowRedeliveryHorizon(t *testing.T) {
	db := janitorDB(t)
	var buf bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	post := billing.NewChargeIdem(db.Pool, &billing.Service{}) // retain 720h
	pay := idemimpl.NewExternalInbox(db.Pool, payTable, charge(idemtest.NewProvider()))
	if _, err := idem.NewJanitor(db.Pool, []idem.Maintained{post, pay}, idem.WithJanitorLogger(logger),
		idem.WithJanitorRedeliveryHorizon(1000*time.Hour)); err != nil {
		t.Fatal(err)
	}
	var warned []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		if rec["msg"] == "idem janitor retention shorter than the redelivery horizon" {
			warned = append(warned, rec)
		}
	}
	if len(warned) != 2 || warned[0]["level"] != "WARN" || warned[0]["consumer"] != "billing.charge" || warned[1]["consumer"] != payConsumer {
		t.Fatalf("records %v; want one Warn per consumer", warned)
	}
	if warned[0]["retain"] == nil || warned[0]["horizon"] == nil {
		t.Errorf("record %v has no retain or horizon", warned[0])
	}
	buf.Reset()
	if _, err := idem.NewJanitor(db.Pool, []idem.Maintained{post}, idem.WithJanitorLogger(logger),
		idem.WithJanitorRedeliveryHorizon(7*24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), "redelivery horizon") {
		t.Errorf("a retention of 720h warned below a horizon of 168h: %s", buf.String())
	}
}

// explain returns the plan of sql with args, as text.
func explain(t testing.TB, db *idemtest.DB, sql string, args ...any) string {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), "EXPLAIN "+sql, args...)
	if err != nil {
		t.Fatalf("EXPLAIN %s: %v", sql, err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, line)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(plan, "\n")
}

// TestPurgeStatementsUseTheIndex: on generated tables of 200,000 expired
// and 20,000 fresh rows, analyzed, the purge statement (and the sweep of the
// external table) reads the index, oldest first, and never scans the table.
func TestPurgeStatementsUseTheIndex(t *testing.T) {
	db := idemtest.New(t, billing.Migrations())
	mustExec(t, db, `INSERT INTO idem_billing_charge (key_order_id, fingerprint, created_at)
		SELECT 'old-' || g, '\x00', now() - interval '40 days' + g * interval '1 ms' FROM generate_series(1, 200000) g`)
	mustExec(t, db, `INSERT INTO idem_billing_charge (key_order_id, fingerprint, created_at)
		SELECT 'new-' || g, '\x00', now() - interval '1 day' + g * interval '1 ms' FROM generate_series(1, 20000) g`)
	mustExec(t, db, `ANALYZE idem_billing_charge`)
	m := billing.NewChargeIdem(db.Pool, &billing.Service{}).Maintenance()
	purge := statementOf(t, m, "Purge")
	plan := explain(t, db, purge, m.Retain.Seconds(), 1000)
	t.Logf("inbox purge:\n%s", plan)
	if !strings.Contains(plan, "Index Scan using idem_billing_charge_retention_idx") || strings.Contains(plan, "Seq Scan") || strings.Contains(plan, "Sort") {
		t.Errorf("the inbox purge does not read the retention index oldest first:\n%s", plan)
	}

	pdb := idemtest.New(t, payments.Migrations())
	mustExec(t, pdb, `INSERT INTO idem_payments_charge (idem_key, key_order_id, fingerprint, status, fence, attempts, lease_until, created_at)
		SELECT 'k' || g, 'o' || g, '\x00', CASE WHEN g % 100 = 0 THEN 'running' ELSE 'done' END, 1, 1,
		       CASE WHEN g % 100 = 0 THEN now() - interval '1 hour' END,
		       now() - interval '40 days' + g * interval '1 ms' FROM generate_series(1, 220000) g`)
	mustExec(t, pdb, `ANALYZE idem_payments_charge`)
	w := payments.NewChargeIdem(pdb.Pool, nil)
	pm := w.Maintenance()
	plan = explain(t, pdb, statementOf(t, pm, "Purge"), pm.Retain.Seconds(), 1000)
	t.Logf("external purge:\n%s", plan)
	if !strings.Contains(plan, "Index Scan using idem_payments_charge_created_at_idx") || strings.Contains(plan, "Seq Scan") {
		t.Errorf("the external purge does not read the created_at index:\n%s", plan)
	}
	plan = explain(t, pdb, statementOf(t, pm, "Sweep"), 1000)
	t.Logf("sweep:\n%s", plan)
	if !strings.Contains(plan, "idem_payments_charge_lease_until_idx") || strings.Contains(plan, "Seq Scan on idem_payments_charge") {
		t.Errorf("the sweep does not read the lease index:\n%s", plan)
	}
}

// statementOf reads a statement of a Maintenance through the generated
// table it came from: Purge or Sweep.
func statementOf(t testing.TB, m idem.Maintenance, name string) string {
	t.Helper()
	sql := idem.MaintenanceStatement(m, name)
	if sql == "" {
		t.Fatalf("%s has no %s statement", m.Table, name)
	}
	return sql
}

// TestTwoJanitorsPurgeAndSweepEachRowOnce: two janitors, each with its own
// MeterProvider, run rounds at the same moment, in batches of 100, over
// 20,000 expired inbox rows (and 2,000 fresh ones), 3,000 expired external
// rows and 1,500 expired claims. Their counts add up to exactly the expired
// rows, each claim was reset once (attempts and fence up by one), the fresh
// rows are all there, and each janitor's metrics say what its reports say.
// The outbox holds no published row (the relay deletes each once
// published): the deprecated WithJanitorOutbox purges none of its 4,000
// rows pending for 8 days nor of its dead ones.
func TestTwoJanitorsPurgeAndSweepEachRowOnce(t *testing.T) {
	db := janitorDB(t)
	const (
		expired   = 20000
		fresh     = 2000
		extOld    = 3000
		claims    = 1500
		outboxOld = 4000
	)
	mustExec(t, db, `INSERT INTO idem_billing_charge (key_order_id, fingerprint, created_at)
		SELECT 'old-' || g, '\x00', now() - interval '31 days' - g * interval '1 ms' FROM generate_series(1, $1) g`, expired)
	mustExec(t, db, `INSERT INTO idem_billing_charge (key_order_id, fingerprint, created_at)
		SELECT 'new-' || g, '\x00', now() - interval '29 days' FROM generate_series(1, $1) g`, fresh)
	mustExec(t, db, `INSERT INTO idem_test_pay (idem_key, key_id, fingerprint, status, fence, attempts, lease_until, created_at, updated_at, done_at)
		SELECT 'old-' || g, 'old-' || g, '\x00', 'done', 1, 1, NULL, now() - interval '31 days', now() - interval '31 days', now() - interval '31 days'
		FROM generate_series(1, $1) g`, extOld)
	mustExec(t, db, `INSERT INTO idem_test_pay (idem_key, key_id, fingerprint, status, fence, attempts, lease_until)
		SELECT 'run-' || g, 'run-' || g, '\x00', 'running', 5, 2, now() - interval '1 minute' FROM generate_series(1, $1) g`, claims)
	mustExec(t, db, `INSERT INTO idem_outbox (message_id, consumer, key, destination, payload, created_at, available_at)
		SELECT gen_random_uuid(), 'c', 'k' || g, 'd', '\x00', now() - interval '8 days', now() - interval '8 days' FROM generate_series(1, $1) g`, outboxOld)
	mustExec(t, db, `INSERT INTO idem_outbox (message_id, consumer, key, destination, payload, created_at, dead_at)
		SELECT gen_random_uuid(), 'c', 'n' || g, 'd', '\x00', now() - interval '8 days', CASE WHEN g % 2 = 0 THEN now() - interval '8 days' END
		FROM generate_series(1, 100) g`)

	post := billing.NewChargeIdem(db.Pool, &billing.Service{})
	pay := idemimpl.NewExternalInbox(db.Pool, payTable, charge(idemtest.NewProvider()))
	readers := []*metric.ManualReader{metric.NewManualReader(), metric.NewManualReader()}
	var janitors []*idem.Janitor
	for _, r := range readers {
		j, err := idem.NewJanitor(db.Pool, []idem.Maintained{post, pay}, idem.WithJanitorBatchSize(100),
			idem.WithJanitorOutbox(7*24*time.Hour), idem.WithJanitorLogger(relaytest.Logger(t)),
			idem.WithJanitorMeterProvider(metric.NewMeterProvider(metric.WithReader(r))))
		if err != nil {
			t.Fatal(err)
		}
		janitors = append(janitors, j)
	}
	reports := make([]idem.JanitorReport, 2)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, j := range janitors {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			rep, err := j.RunOnce(context.Background())
			if err != nil {
				t.Errorf("janitor %d: %v", i, err)
			}
			reports[i] = rep
		}()
	}
	close(start)
	wg.Wait()

	sum := func(table string) (total int64, each []int64) {
		for _, r := range reports {
			total += r.Purged[table]
			each = append(each, r.Purged[table])
		}
		return total, each
	}
	for table, want := range map[string]int64{"idem_billing_charge": expired, "idem_test_pay": extOld, "idem_outbox": 0} {
		total, each := sum(table)
		t.Logf("%s: purged %v by the two janitors, %d in all (want %d)", table, each, total, want)
		if total != want {
			t.Errorf("%s: the janitors purged %d rows (%v); want %d, each row once", table, total, each, want)
		}
	}
	resets := []int64{reports[0].Reset[payConsumer], reports[1].Reset[payConsumer]}
	t.Logf("claims reset %v; statements %d and %d, longest %v and %v", resets, reports[0].Statements, reports[1].Statements, reports[0].Longest, reports[1].Longest)
	if resets[0]+resets[1] != claims {
		t.Errorf("the sweepers reset %v claims; want %d in all", resets, claims)
	}
	if n := relaytest.QueryInt(t, db.Pool, `SELECT count(*) FROM idem_test_pay WHERE key_id LIKE 'run-%' AND (status <> 'released' OR attempts <> 3 OR fence <> 6)`); n != 0 {
		t.Errorf("%d claims not reset exactly once (want released, attempts 3, fence 6)", n)
	}
	if n := relaytest.QueryInt(t, db.Pool, `SELECT count(*) FROM idem_billing_charge`); n != fresh {
		t.Errorf("%d inbox rows left; want the %d fresh ones", n, fresh)
	}
	if n := relaytest.QueryInt(t, db.Pool, `SELECT count(*) FROM idem_outbox`); n != outboxOld+100 {
		t.Errorf("%d outbox rows left; want every one of the %d pending or dead ones", n, outboxOld+100)
	}

	// Each janitor's metrics are its report.
	for i, r := range readers {
		var rm metricdata.ResourceMetrics
		if err := r.Collect(context.Background(), &rm); err != nil {
			t.Fatal(err)
		}
		purged, reset := map[string]int64{}, int64(0)
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				sum, ok := m.Data.(metricdata.Sum[int64])
				if !ok {
					continue
				}
				for _, dp := range sum.DataPoints {
					switch m.Name {
					case "idem.purged":
						table, _ := dp.Attributes.Value("idem.table")
						purged[table.AsString()] += dp.Value
					case "idem.sweeper.resets":
						reset += dp.Value
					}
				}
			}
		}
		for table, n := range reports[i].Purged {
			if purged[table] != n {
				t.Errorf("janitor %d: idem.purged{idem.table=%s} = %d, its report %d", i, table, purged[table], n)
			}
		}
		if reset != reports[i].Reset[payConsumer] {
			t.Errorf("janitor %d: idem.sweeper.resets = %d, its report %d", i, reset, reports[i].Reset[payConsumer])
		}
	}
}

// TestJanitorRunStopsOnCancel: Run purges at once, refuses a second Run
// meanwhile, and returns nil soon after its context is cancelled.
func TestJanitorRunStopsOnCancel(t *testing.T) {
	db := janitorDB(t)
	mustExec(t, db, `INSERT INTO idem_billing_charge (key_order_id, fingerprint, created_at)
		SELECT 'old-' || g, '\x00', now() - interval '31 days' FROM generate_series(1, 500) g`)
	j, err := idem.NewJanitor(db.Pool, []idem.Maintained{billing.NewChargeIdem(db.Pool, &billing.Service{})},
		idem.WithJanitorInterval(20*time.Millisecond), idem.WithJanitorLogger(relaytest.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- j.Run(ctx) }()
	relaytest.WaitFor(t, 10*time.Second, "the first round's purge", func() bool {
		return relaytest.QueryInt(t, db.Pool, `SELECT count(*) FROM idem_billing_charge`) == 0
	})
	if err := j.Run(ctx); err == nil || !strings.Contains(err.Error(), "while it is running") {
		t.Errorf("a second Run: %v; want it refused", err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run after cancel = %v, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return within 5s of the cancel")
	}
	if _, err := j.RunOnce(ctx); err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("RunOnce on a cancelled context: %v", err)
	}
}

// TestExternalRetentionCountsFromDone: a mode=external row's retention
// counts from when it was done, not from its first claim: a key claimed 31
// days ago and done a minute ago, after 31 days of retries, survives a
// janitor round with a 30-day retention; a key done 31 days ago and a
// released one last tried 31 days ago are purged; a running one is kept.
func TestExternalRetentionCountsFromDone(t *testing.T) {
	db := payDB(t)
	ctx := context.Background()
	mustExec(t, db, `INSERT INTO idem_test_pay (idem_key, key_id, fingerprint, status, fence, attempts, created_at, updated_at, done_at, lease_until) VALUES
		('k-retried', 'retried', '\x01', 'done', 40, 40, now() - interval '31 days', now() - interval '1 minute', now() - interval '1 minute', NULL),
		('k-old', 'old', '\x01', 'done', 1, 1, now() - interval '31 days', now() - interval '31 days', now() - interval '31 days', NULL),
		('k-released', 'released', '\x01', 'released', 3, 3, now() - interval '31 days', now() - interval '31 days', NULL, NULL),
		('k-running', 'running', '\x01', 'running', 2, 2, now() - interval '31 days', now() - interval '31 days', NULL, now() + interval '1 hour')`)
	x := idemimpl.NewExternalInbox(db.Pool, payTable, charge(idemtest.NewProvider()), idem.WithLease(time.Minute))
	j, err := idem.NewJanitor(db.Pool, []idem.Maintained{x})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := j.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	rows, err := db.Pool.Query(ctx, `SELECT idem_key FROM idem_test_pay ORDER BY idem_key`)
	if err == nil {
		left, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("retain %v: %+v; left %v", payTable.Retain, rep, left)
	if !slices.Equal(left, []string{"k-retried", "k-running"}) {
		t.Errorf("after the round the table holds %v; want k-retried (done a minute ago) and k-running", left)
	}
}
