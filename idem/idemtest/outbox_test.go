package idemtest_test

import (
	"context"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemimpl"
	"github.com/idemgen/idemgen/idem/idemtest"
	runtime "github.com/idemgen/idemgen/migrations"
)

// The outbox checks must be able to fail too: the real publishing inbox
// passes them, and three consumers that publish wrongly are each caught, by
// the scenarios that must catch them.

// publishingMigrations are the transfer's migrations and the runtime's
// outbox chain.
func publishingMigrations(t testing.TB) fstest.MapFS {
	t.Helper()
	m := maps.Clone(migrations)
	names, err := fs.Glob(runtime.FS, "*.sql")
	if err != nil || len(names) == 0 {
		t.Fatalf("the runtime's outbox migrations: %v", err)
	}
	for i, name := range names {
		data, err := fs.ReadFile(runtime.FS, name)
		if err != nil {
			t.Fatal(err)
		}
		_, rest, _ := strings.Cut(name, "_")
		m[fmt.Sprintf("%05d_%s", 3+i, rest)] = &fstest.MapFile{Data: data}
	}
	return m
}

// postAndPublish is the transfer's change and its two outgoing messages.
func postAndPublish(ctx context.Context, tx pgx.Tx, out *idem.Outbox, msg transfer) (receipt, error) {
	r, err := post(ctx, tx, msg)
	if err != nil {
		return r, err
	}
	if err := out.Publish("ledger.posted", msg, idem.WithOrderingKey(msg.Account)); err != nil {
		return r, err
	}
	return r, out.Publish("ledger.balance", r, idem.WithHeader("account", msg.Account))
}

func newPublishingInbox(_ idemtest.NoReceiver, pool *pgxpool.Pool, opts ...idem.Option) idemtest.HandleFunc[transfer, receipt] {
	return idemimpl.NewPublishingInbox(pool, transferTable, postAndPublish, opts...).Handle
}

// insertRow writes one outbox row for msg with the message id id, as the
// broken consumers publish, on the pool: in a transaction of its own.
func insertRow(ctx context.Context, pool *pgxpool.Pool, id string, msg transfer) error {
	_, err := pool.Exec(ctx, `INSERT INTO idem_outbox (message_id, consumer, key, destination, payload)
		VALUES ($1::uuid, $2, $3, 'ledger.posted', convert_to($3, 'UTF8')) ON CONFLICT (message_id) DO NOTHING`,
		id, transferTable.Consumer, msg.ID)
	return err
}

// publishBeforeTx writes its outgoing message with the right id, but on the
// pool before the delivery's transaction: the message exists even when the
// change never commits.
func publishBeforeTx(recv idemtest.NoReceiver, pool *pgxpool.Pool, opts ...idem.Option) idemtest.HandleFunc[transfer, receipt] {
	handle := newInbox(recv, pool, opts...)
	return func(ctx context.Context, msg transfer) (receipt, idem.Outcome, error) {
		if err := insertRow(ctx, pool, idem.OutgoingMessageID(transferTable.Consumer, []any{msg.ID}, 0), msg); err != nil {
			return receipt{}, 0, err
		}
		return handle(ctx, msg)
	}
}

// randomIDs writes its outgoing message in the transaction, with an id of
// its own: a rerun after a crash publishes another message.
func randomIDs(_ idemtest.NoReceiver, pool *pgxpool.Pool, opts ...idem.Option) idemtest.HandleFunc[transfer, receipt] {
	return idemimpl.NewInbox(pool, transferTable, func(ctx context.Context, tx pgx.Tx, msg transfer) (receipt, error) {
		if _, err := tx.Exec(ctx, `INSERT INTO idem_outbox (message_id, consumer, key, destination, payload)
			VALUES (gen_random_uuid(), $1, $2, 'ledger.posted', '\x00')`, transferTable.Consumer, msg.ID); err != nil {
			return receipt{}, err
		}
		return post(ctx, tx, msg)
	}, opts...).Handle
}

// republishOnDuplicate is the real publishing inbox, except that a duplicate
// publishes a message again, as the next of the run's.
func republishOnDuplicate(recv idemtest.NoReceiver, pool *pgxpool.Pool, opts ...idem.Option) idemtest.HandleFunc[transfer, receipt] {
	handle := newPublishingInbox(recv, pool, opts...)
	return func(ctx context.Context, msg transfer) (receipt, idem.Outcome, error) {
		r, o, err := handle(ctx, msg)
		if err == nil && o == idem.Duplicate {
			err = insertRow(ctx, pool, idem.OutgoingMessageID(transferTable.Consumer, []any{msg.ID}, 2), msg)
		}
		return r, o, err
	}
}

func publishingSuite(t testing.TB, build func(idemtest.NoReceiver, *pgxpool.Pool, ...idem.Option) idemtest.HandleFunc[transfer, receipt]) idemtest.Suite[idemtest.NoReceiver, transfer, receipt] {
	s := suite(build)
	s.Migrations = publishingMigrations(t)
	s.Outbox = &idemtest.Outbox[transfer]{Consumer: transferTable.Consumer, Key: transferTable.Key}
	s.Batch = newPublishingBatch
	return s
}

// newPublishingBatch is the real publishing inbox's HandleBatch, with the
// batch statements.
func newPublishingBatch(_ idemtest.NoReceiver, pool *pgxpool.Pool, opts ...idem.Option) idemtest.BatchFunc[transfer, receipt] {
	return idemimpl.NewPublishingInbox(pool, transferTable, postAndPublish, opts...).HandleBatch
}

// TestSuiteRunPublishing runs the scenarios with the outbox checks against
// the real publishing inbox, as the generated test of a handler that takes
// an *idem.Outbox does.
func TestSuiteRunPublishing(t *testing.T) {
	publishingSuite(t, newPublishingInbox).Run(t)
}

// TestOutboxChecksCatchBrokenPublishers runs every scenario with the outbox
// checks against each consumer and compares the scenarios that failed with
// those that must.
func TestOutboxChecksCatchBrokenPublishers(t *testing.T) {
	idemtest.DatabaseURL(t)
	committed := []string{idemtest.ScenarioConcurrent, idemtest.ScenarioFailureBeforeCommit, idemtest.ScenarioCrashAfterCommit,
		idemtest.ScenarioKeyReused, idemtest.ScenarioSequentialDuplicate}
	cases := []struct {
		name     string
		build    func(idemtest.NoReceiver, *pgxpool.Pool, ...idem.Option) idemtest.HandleFunc[transfer, receipt]
		caughtBy []string
	}{
		{"idemimpl.NewPublishingInbox", newPublishingInbox, nil},
		{"publish_before_tx", publishBeforeTx, []string{idemtest.ScenarioFailureBeforeCommit, idemtest.ScenarioBusinessUniqueViolation}},
		// batch_processed_key delivers the message through Handle before its batch.
		{"random_ids", randomIDs, append(committed, idemtest.ScenarioBatchProcessedKey)},
		{"republish_on_duplicate", republishOnDuplicate, []string{idemtest.ScenarioCrashAfterCommit, idemtest.ScenarioKeyReused, idemtest.ScenarioSequentialDuplicate}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var caught []string
			for _, sc := range publishingSuite(t, c.build).Scenarios() {
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
