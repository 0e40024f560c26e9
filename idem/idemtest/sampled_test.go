package idemtest_test

import (
	"context"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemimpl"
	"github.com/idemgen/idemgen/idem/idemtest"
)

// A handler without a fixture: the suite delivers idemtest.Sample's message
// and judges the effect by the state of the test schema.

type credit struct {
	ID      string
	Account string
	Amount  int64
}

// creditService keeps its pool unexported, as services often do; the
// sampled fixture gives it the scenario's pool.
type creditService struct{ pool *pgxpool.Pool }

const creditUpsert = `INSERT INTO balances (id, balance) VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET balance = balances.balance + EXCLUDED.balance`

func (s *creditService) inTx(ctx context.Context, tx pgx.Tx, msg credit) (idem.None, error) {
	_, err := tx.Exec(ctx, creditUpsert, msg.Account, msg.Amount)
	return idem.None{}, err
}

func (s *creditService) throughPool(ctx context.Context, tx pgx.Tx, msg credit) (idem.None, error) {
	_, err := s.pool.Exec(ctx, creditUpsert, msg.Account, msg.Amount)
	return idem.None{}, err
}

func (s *creditService) nothing(ctx context.Context, tx pgx.Tx, msg credit) (idem.None, error) {
	_, err := tx.Exec(ctx, `UPDATE balances SET balance = balance + $2 WHERE id = $1`, msg.Account, msg.Amount)
	return idem.None{}, err
}

var creditTable, creditInbox = idemtest.TextKeyInbox[credit]("test.credit", "inbox_credit", "ID", func(m credit) string { return m.ID })

var creditMigrations = fstest.MapFS{
	"00001_balances.sql": {Data: []byte(`-- +goose Up
CREATE TABLE balances (id text PRIMARY KEY, balance bigint NOT NULL, updated_at timestamptz NOT NULL DEFAULT now());
-- +goose Down
DROP TABLE balances;
`)},
	"00002_inbox.sql": {Data: []byte(creditInbox)},
}

func sampledSuite(handler func(*creditService) func(context.Context, pgx.Tx, credit) (idem.None, error)) idemtest.Suite[*creditService, credit, idem.None] {
	return idemtest.Suite[*creditService, credit, idem.None]{
		Migrations: creditMigrations,
		Inbox:      "inbox_credit",
		New: func(s *creditService, pool *pgxpool.Pool, opts ...idem.Option) idemtest.HandleFunc[credit, idem.None] {
			return idemimpl.NewInbox(pool, creditTable, handler(s), opts...).Handle
		},
		Batch: func(s *creditService, pool *pgxpool.Pool, opts ...idem.Option) idemtest.BatchFunc[credit, idem.None] {
			return idemimpl.NewInbox(pool, creditTable, handler(s), opts...).HandleBatch
		},
		Fixture: idemtest.Sampled[*creditService, credit](nil),
	}
}

// TestSampledSuite: a handler that writes through its transaction passes
// every scenario on the sample message.
func TestSampledSuite(t *testing.T) {
	sampledSuite(func(s *creditService) func(context.Context, pgx.Tx, credit) (idem.None, error) { return s.inTx }).Run(t)
}

// TestSampledCatchesPoolWrites: a handler that writes through its
// service's pool is caught by every scenario whose delivery is undone, and
// the failure names the cause.
func TestSampledCatchesPoolWrites(t *testing.T) {
	idemtest.DatabaseURL(t)
	s := sampledSuite(func(s *creditService) func(context.Context, pgx.Tx, credit) (idem.None, error) { return s.throughPool })
	want := map[string]string{
		idemtest.ScenarioFailureBeforeCommit: "the delivery abandoned before its commit left 1 row in balances where the state before it had none: " +
			"the handler writes outside its transaction (through a pool?)",
		idemtest.ScenarioBatchFailingHandler: "the failed batch and its redelivery left balance = 300 in balances where one delivery leaves 100",
		idemtest.ScenarioBatchKilledMidBatch: "the batch killed before its commit left 1 row in balances where the state before it had none",
		// A copy runs the handler until its first statement through tx,
		// which the key's lookup rides with: a write through the pool
		// before it is done once a copy.
		idemtest.ScenarioConcurrent: "the copies that were not processed must leave no trace, yet the effect grew with them: " +
			"the handler writes outside its transaction (through a pool?)",
		idemtest.ScenarioCrashAfterCommit:    "the delivery and its redelivery after the crash left balance = 200 in balances where one delivery leaves 100: a duplicate must change nothing",
		idemtest.ScenarioSequentialDuplicate: "the delivery and its duplicate left balance = 200 in balances where one delivery leaves 100: a duplicate must change nothing",
		idemtest.ScenarioBatchConcurrent:     "concurrent batches of the message twice left balance = ",
	}
	for _, sc := range s.Scenarios() {
		if sc.Name == idemtest.ScenarioKeyReused || sc.Name == idemtest.ScenarioBusinessUniqueViolation {
			continue // Run leaves them out: no Variant, no Conflict
		}
		t.Run(sc.Name, func(t *testing.T) {
			r := runRecorded(t, sc)
			line, caught := want[sc.Name]
			switch {
			case caught && !strings.Contains(r.report(), line):
				t.Errorf("%s: want a failure with %q:\n%s", sc.Name, line, r.report())
			case !caught && r.failed():
				t.Errorf("%s failed:\n%s", sc.Name, r.report())
			case caught:
				t.Logf("%s caught the handler:\n%s", sc.Name, r.report())
			}
		})
	}
}

// TestSampledNoEffect: a handler whose sample message changes nothing fails
// the effect scenario with the fixture to write, and every other scenario
// stops at once.
func TestSampledNoEffect(t *testing.T) {
	idemtest.DatabaseURL(t)
	s := sampledSuite(func(s *creditService) func(context.Context, pgx.Tx, credit) (idem.None, error) { return s.nothing })
	for i, sc := range s.Scenarios() {
		if i > 1 {
			break
		}
		r := runRecorded(t, sc)
		want := "not run: the first delivery of the sample message changed nothing (see effect)"
		if sc.Name == idemtest.ScenarioEffect {
			want = "func handlerFixture(t testing.TB, db *idemtest.DB) idemtest.Fixture[*creditService, credit]"
		}
		if !strings.Contains(r.report(), want) {
			t.Errorf("%s: want a failure with %q:\n%s", sc.Name, want, r.report())
		}
		t.Logf("%s:\n%s", sc.Name, r.report())
	}
}
