package idemtest_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemimpl"
	"github.com/idemgen/idemgen/idem/idemtest"
	"github.com/idemgen/idemgen/idem/internal/sqlhook"
)

// The external scenarios must be able to fail too: the real
// idemimpl.ExternalInbox passes them, with and without a handler that calls the
// provider, and four wrappers that break one rule of the protocol each are
// caught, by the scenarios that must catch them.

type payout struct {
	ID     string `json:"id"`
	Amount int64  `json:"amount"`
}

type paid struct {
	ChargeID string `json:"charge_id"`
}

// payoutService is the receiver: it pays through its provider with the
// delivery's idempotency key.
type payoutService struct{ p *idemtest.Provider }

func (s *payoutService) Pay(ctx context.Context, msg payout) (paid, error) {
	key, ok := idem.KeyFrom(ctx)
	if !ok {
		return paid{}, fmt.Errorf("no idempotency key in the context")
	}
	id, err := s.p.Call(ctx, key, []byte(fmt.Sprint(msg.Amount)))
	return paid{ChargeID: id}, err
}

var payoutTable, payoutMigration = idemtest.TextKeyExternal("test.payout", "idem_test_payout", "ID",
	func(msg payout) string { return msg.ID })

var payoutMigrations = fstest.MapFS{"00001_payout.sql": {Data: []byte(payoutMigration)}}

func payoutFixture(t testing.TB, p *idemtest.Provider) idemtest.ExternalFixture[*payoutService, payout] {
	return idemtest.ExternalFixture[*payoutService, payout]{
		Receiver: &payoutService{p: p},
		Message:  payout{ID: idemtest.UniqueString[string](), Amount: 900},
	}
}

// defaultFixture is a fixture that leaves the provider out of the
// receiver: the handler never reaches it, and writes nothing either.
func defaultFixture(t testing.TB, _ *idemtest.Provider) idemtest.ExternalFixture[*payoutService, payout] {
	return idemtest.ExternalFixture[*payoutService, payout]{
		Receiver: &payoutService{},
		Message:  payout{ID: idemtest.UniqueString[string](), Amount: 900},
	}
}

// notifyOnly is a handler without a provider call (it has nothing to
// deduplicate outside): defaultFixture's case.
func notifyOnly(_ *payoutService, pool *pgxpool.Pool, opts ...idem.Option) idemtest.HandleFunc[payout, paid] {
	return idemimpl.NewExternalInbox(pool, payoutTable, func(ctx context.Context, msg payout) (paid, error) {
		return paid{ChargeID: "none"}, nil
	}, opts...).Handle
}

// buildWith returns a builder of the real ExternalInbox on a table whose
// statements edit changes (nil: none). The runtime builds the statements
// when the inbox is constructed; edit gets each one (by its name: claim,
// heartbeat, complete, ...) through sqlhook, for a consumer name of this
// table alone, so that no other test's inbox sees the edit. Each
// replacement edit makes must apply.
func buildWith(t testing.TB, name string, edit map[string]func(sql string) (string, error)) func(*payoutService, *pgxpool.Pool, ...idem.Option) idemtest.HandleFunc[payout, paid] {
	table := payoutTable
	if edit != nil {
		table.Consumer += "." + name
		t.Cleanup(sqlhook.Set(table.Consumer, func(stmt, sql string) string {
			f, ok := edit[stmt]
			if !ok {
				return sql
			}
			edited, err := f(sql)
			if err != nil {
				t.Error(err)
			}
			return edited
		}))
	}
	return func(s *payoutService, pool *pgxpool.Pool, opts ...idem.Option) idemtest.HandleFunc[payout, paid] {
		return idemimpl.NewExternalInbox(pool, table, s.Pay, opts...).Handle
	}
}

// replace returns an edit that replaces old with new in a statement.
func replace(old, new string) func(string) (string, error) {
	return func(sql string) (string, error) {
		if !strings.Contains(sql, old) {
			return sql, fmt.Errorf("the statement %q has no %q to break", sql, old)
		}
		return strings.ReplaceAll(sql, old, new), nil
	}
}

func externalSuite(build func(*payoutService, *pgxpool.Pool, ...idem.Option) idemtest.HandleFunc[payout, paid], fixture func(testing.TB, *idemtest.Provider) idemtest.ExternalFixture[*payoutService, payout]) idemtest.ExternalSuite[*payoutService, payout, paid] {
	return idemtest.ExternalSuite[*payoutService, payout, paid]{
		Migrations: payoutMigrations,
		Inbox:      "idem_test_payout",
		Lease:      payoutTable.Lease,
		New:        build,
		Fixture:    fixture,
		Variant: func(msg payout) payout {
			msg.Amount++
			return msg
		},
	}
}

// TestExternalSuiteRun runs the scenarios against the real
// idemimpl.ExternalInbox, as the generated test of a mode=external handler does.
func TestExternalSuiteRun(t *testing.T) {
	externalSuite(buildWith(t, "", nil), payoutFixture).Run(t)
}

// TestExternalSuiteRunDefaultFixture runs them for a handler whose fixture
// shows no effect: the scenarios check the protocol alone.
func TestExternalSuiteRunDefaultFixture(t *testing.T) {
	externalSuite(notifyOnly, defaultFixture).Run(t)
}

// TestExternalSuiteRunSampled runs them as the generated test of a handler
// without fixture= does: the sample message, and the scenario's provider in
// the receiver's field, so that the provider checks run.
func TestExternalSuiteRunSampled(t *testing.T) {
	externalSuite(buildWith(t, "", nil), idemtest.SampledExternal[*payoutService, payout](nil)).Run(t)
}

// TestExternalSuiteCatchesBrokenWrappers runs every scenario against each
// wrapper and compares the scenarios that failed with those that must.
func TestExternalSuiteCatchesBrokenWrappers(t *testing.T) {
	idemtest.DatabaseURL(t)
	cases := []struct {
		name     string
		edit     map[string]func(string) (string, error)
		caughtBy []string
	}{
		{"idemimpl.NewExternalInbox", nil, nil},
		// The heartbeat touches the row but never renews the lease nor
		// checks the fence: the claim runs out under a long run, and a
		// stolen claim goes unnoticed.
		{"never_heartbeats", map[string]func(string) (string, error){"heartbeat": func(string) (string, error) {
			return `UPDATE idem_test_payout SET updated_at = now() WHERE idem_key = $1 AND $2::bigint IS NOT NULL AND $3::float8 IS NOT NULL`, nil
		}}, []string{idemtest.ScenarioExternalHeartbeat, idemtest.ScenarioExternalClaimLost}},
		// done is written without the fence: a worker that lost its claim
		// overwrites the row.
		{"completes_without_fence", map[string]func(string) (string, error){
			"complete": replace("fence = $2", "$2::bigint IS NOT NULL"),
		}, []string{idemtest.ScenarioExternalClaimLost}},
		// The claim takes over running rows whose lease is live.
		{"claims_live_leases", map[string]func(string) (string, error){
			"claim": replace("t.status = 'running' AND t.lease_until < now()", "t.status = 'running'"),
		}, []string{idemtest.ScenarioExternalConcurrent, idemtest.ScenarioExternalHeartbeat}},
		// The claim never takes over an expired claim: a dead worker's key
		// is stuck until the sweeper comes.
		{"never_takes_over", map[string]func(string) (string, error){
			"claim": replace(" OR (t.status = 'running' AND t.lease_until < now())", ""),
		}, []string{idemtest.ScenarioExternalTakeover}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var caught []string
			for _, sc := range externalSuite(buildWith(t, c.name, c.edit), payoutFixture).Scenarios() {
				rec := runRecorded(t, sc)
				switch {
				case rec.skipped:
					t.Errorf("%s skipped: %s", sc.Name, rec.report())
				case rec.failed():
					caught = append(caught, sc.Name)
					t.Logf("%s caught %s:\n%s", sc.Name, c.name, rec.report())
				}
			}
			if !slices.Equal(caught, c.caughtBy) {
				t.Errorf("%s was caught by %v; want %v", c.name, caught, c.caughtBy)
			}
		})
	}
}
