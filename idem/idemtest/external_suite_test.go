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
	"github.com/idemgen/idemgen/idem/idemtest"
)

// The external scenarios must be able to fail too: the real
// idem.ExternalInbox passes them, with and without a handler that calls the
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

// defaultFixture is what the generated test of a handler without fixture=
// does: a zero receiver, so the handler never reaches the provider.
func defaultFixture(t testing.TB, _ *idemtest.Provider) idemtest.ExternalFixture[*payoutService, payout] {
	return idemtest.ExternalFixture[*payoutService, payout]{
		Receiver: &payoutService{},
		Message:  payout{ID: idemtest.UniqueString[string](), Amount: 900},
	}
}

// notifyOnly is a handler without a provider call (it has nothing to
// deduplicate outside): the default fixture's case.
func notifyOnly(_ *payoutService, pool *pgxpool.Pool, opts ...idem.Option) idemtest.HandleFunc[payout, paid] {
	return idem.NewExternalInbox(pool, payoutTable, func(ctx context.Context, msg payout) (paid, error) {
		return paid{ChargeID: "none"}, nil
	}, opts...).Handle
}

// buildWith returns a builder of the real ExternalInbox on a table whose
// statements edit changed, each replacement required to apply.
func buildWith(t testing.TB, edit func(*idem.ExternalTable[payout]) error) func(*payoutService, *pgxpool.Pool, ...idem.Option) idemtest.HandleFunc[payout, paid] {
	table := payoutTable
	if edit != nil {
		if err := edit(&table); err != nil {
			t.Fatal(err)
		}
	}
	return func(s *payoutService, pool *pgxpool.Pool, opts ...idem.Option) idemtest.HandleFunc[payout, paid] {
		return idem.NewExternalInbox(pool, table, s.Pay, opts...).Handle
	}
}

func replace(stmt *string, old, new string) error {
	if !strings.Contains(*stmt, old) {
		return fmt.Errorf("the statement %q has no %q to break", *stmt, old)
	}
	*stmt = strings.ReplaceAll(*stmt, old, new)
	return nil
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
// idem.ExternalInbox, as the generated test of a mode=external handler does.
func TestExternalSuiteRun(t *testing.T) {
	externalSuite(buildWith(t, nil), payoutFixture).Run(t)
}

// TestExternalSuiteRunDefaultFixture runs them for a handler that never
// calls the provider, as with the generated default fixture.
func TestExternalSuiteRunDefaultFixture(t *testing.T) {
	externalSuite(notifyOnly, defaultFixture).Run(t)
}

// TestExternalSuiteCatchesBrokenWrappers runs every scenario against each
// wrapper and compares the scenarios that failed with those that must.
func TestExternalSuiteCatchesBrokenWrappers(t *testing.T) {
	idemtest.DatabaseURL(t)
	cases := []struct {
		name     string
		edit     func(*idem.ExternalTable[payout]) error
		caughtBy []string
	}{
		{"idem.NewExternalInbox", nil, nil},
		// The heartbeat touches the row but never renews the lease nor
		// checks the fence: the claim runs out under a long run, and a
		// stolen claim goes unnoticed.
		{"never_heartbeats", func(x *idem.ExternalTable[payout]) error {
			x.Heartbeat = `UPDATE idem_test_payout SET updated_at = now() WHERE idem_key = $1 AND $2::bigint IS NOT NULL AND $3::float8 IS NOT NULL`
			return nil
		}, []string{idemtest.ScenarioExternalHeartbeat, idemtest.ScenarioExternalClaimLost}},
		// done is written without the fence: a worker that lost its claim
		// overwrites the row.
		{"completes_without_fence", func(x *idem.ExternalTable[payout]) error {
			return replace(&x.Complete, "fence = $2::bigint", "$2::bigint IS NOT NULL")
		}, []string{idemtest.ScenarioExternalClaimLost}},
		// The claim takes over running rows whose lease is live.
		{"claims_live_leases", func(x *idem.ExternalTable[payout]) error {
			return replace(&x.Claim, "r.status = 'running' AND r.lease_until < now()", "r.status = 'running'")
		}, []string{idemtest.ScenarioExternalConcurrent, idemtest.ScenarioExternalHeartbeat}},
		// The claim never takes over an expired claim: a dead worker's key
		// is stuck until the sweeper comes.
		{"never_takes_over", func(x *idem.ExternalTable[payout]) error {
			return replace(&x.Claim, " OR (r.status = 'running' AND r.lease_until < now())", "")
		}, []string{idemtest.ScenarioExternalTakeover}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var caught []string
			for _, sc := range externalSuite(buildWith(t, c.edit), payoutFixture).Scenarios() {
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
