package idemtest_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemimpl"
	"github.com/idemgen/idemgen/idem/idemtest"
)

// The scenarios must be able to fail. These tests run them against the real
// idemimpl.Inbox and against three deliberately broken consumers of the same
// message, and check that each broken one is caught, and by which scenario.
//
// The business: a transfer credits an account and writes a ledger entry; a
// transfer may redeem a voucher, which is unique across the ledger.

type transfer struct {
	ID      string `json:"id"`
	Account string `json:"account"`
	Amount  int64  `json:"amount"`
	Voucher string `json:"voucher"`
}

type receipt struct {
	Balance int64 `json:"balance"`
}

var migrations = fstest.MapFS{
	"00001_ledger.sql": {Data: []byte(`-- +goose Up
CREATE TABLE accounts (id text PRIMARY KEY, balance bigint NOT NULL DEFAULT 0);
CREATE TABLE ledger (
    transfer_id text   NOT NULL,
    account     text   NOT NULL REFERENCES accounts,
    amount      bigint NOT NULL,
    voucher     text   UNIQUE
);
-- +goose Down
DROP TABLE ledger;
DROP TABLE accounts;
`)},
	"00002_inbox_transfer.sql": {Data: []byte(`-- +goose Up
CREATE TABLE inbox_transfer (
    key_id       text        PRIMARY KEY,
    fingerprint  bytea       NOT NULL,
    status       text        NOT NULL DEFAULT 'done',
    result       json,
    attempts     integer     NOT NULL DEFAULT 1,
    created_at   timestamptz NOT NULL DEFAULT now(),
    completed_at timestamptz
);
-- +goose Down
DROP TABLE inbox_transfer;
`)},
}

// post is the business change, the same for every consumer below.
func post(ctx context.Context, tx pgx.Tx, msg transfer) (receipt, error) {
	if _, err := tx.Exec(ctx, `INSERT INTO ledger (transfer_id, account, amount, voucher) VALUES ($1, $2, $3, NULLIF($4, ''))`,
		msg.ID, msg.Account, msg.Amount, msg.Voucher); err != nil {
		return receipt{}, fmt.Errorf("post: %w", err)
	}
	var r receipt
	err := tx.QueryRow(ctx, `UPDATE accounts SET balance = balance + $2 WHERE id = $1 RETURNING balance`, msg.Account, msg.Amount).Scan(&r.Balance)
	return r, err
}

// fixture seeds an account and returns a transfer to it.
func fixture(t testing.TB, db *idemtest.DB) idemtest.Fixture[idemtest.NoReceiver, transfer] {
	account := idemtest.UniqueString[string]()
	if _, err := db.Pool.Exec(context.Background(), `INSERT INTO accounts (id) VALUES ($1)`, account); err != nil {
		t.Fatal(err)
	}
	return idemtest.Fixture[idemtest.NoReceiver, transfer]{
		Message: transfer{ID: idemtest.UniqueString[string](), Account: account, Amount: 100, Voucher: idemtest.UniqueString[string]()},
		Variant: func(msg transfer) transfer {
			msg.Amount++
			return msg
		},
		Effect: func(ctx context.Context, db *idemtest.DB, msg transfer) (int, error) {
			var n int
			err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM ledger WHERE transfer_id = $1`, msg.ID).Scan(&n)
			return n, err
		},
		Conflict: func(ctx context.Context, db *idemtest.DB, msg transfer) error {
			// Another transfer redeemed the voucher already.
			_, err := db.Pool.Exec(ctx, `INSERT INTO ledger (transfer_id, account, amount, voucher) VALUES ($1, $2, 1, $3)`,
				"other-"+msg.ID, msg.Account, msg.Voucher)
			return err
		},
	}
}

// The correct consumer: idemimpl.Inbox with the table a generated wrapper would
// declare.

var transferTable = idemimpl.Table[transfer]{
	Consumer: "test.transfer",
	Name:     "inbox_transfer",
	Columns:  []idemimpl.Column{{Field: "ID", Name: "key_id", Type: "text"}},
	Key: func(msg transfer) ([]any, error) {
		if err := idemimpl.CheckString("ID", msg.ID); err != nil {
			return nil, err
		}
		return []any{msg.ID}, nil
	},
	Retain: time.Hour,
}

func newInbox(_ idemtest.NoReceiver, pool *pgxpool.Pool, opts ...idem.Option) idemtest.HandleFunc[transfer, receipt] {
	return idemimpl.NewInbox(pool, transferTable, post, opts...).Handle
}

func newInboxBatch(_ idemtest.NoReceiver, pool *pgxpool.Pool, opts ...idem.Option) idemtest.BatchFunc[transfer, receipt] {
	return idemimpl.NewInbox(pool, transferTable, post, opts...).HandleBatch
}

// batchWithoutInbox is a broken batch: it runs every message of the batch in
// one transaction and reports each Processed, without recording the keys.
func batchWithoutInbox(_ idemtest.NoReceiver, pool *pgxpool.Pool, _ ...idem.Option) idemtest.BatchFunc[transfer, receipt] {
	return func(ctx context.Context, msgs []transfer) ([]idem.Result[receipt], error) {
		results := make([]idem.Result[receipt], len(msgs))
		tx, err := pool.Begin(ctx)
		if err != nil {
			return nil, err
		}
		defer tx.Rollback(ctx)
		for i, msg := range msgs {
			r, err := post(ctx, tx, msg)
			if err != nil {
				for j := range results {
					results[j].Err = err
				}
				return results, nil
			}
			results[i] = idem.Result[receipt]{Value: r, Outcome: idem.Processed}
		}
		err = idemtest.BeforeCommit(ctx, tx)
		if err == nil {
			err = tx.Commit(ctx)
		}
		if err != nil {
			for j := range results {
				results[j] = idem.Result[receipt]{Err: err}
			}
		}
		return results, nil
	}
}

// batchCommitsBeforeHook is a broken batch: a correct HandleBatch, but the
// scenario's before-commit hook (where a worker can die) runs after the
// batch committed, as in a consumer that does more work in its transaction's
// place once the batch returned: a worker killed there has already
// committed.
func batchCommitsBeforeHook(_ idemtest.NoReceiver, pool *pgxpool.Pool, opts ...idem.Option) idemtest.BatchFunc[transfer, receipt] {
	// The hook the scenario passed is replaced by one that does nothing;
	// the scenario's hook runs after the commit, through the context.
	in := idemimpl.NewInbox(pool, transferTable, post, append(opts, idem.WithBeforeCommit(func(context.Context, pgx.Tx) error { return nil }))...)
	return func(ctx context.Context, msgs []transfer) ([]idem.Result[receipt], error) {
		results, err := in.HandleBatch(ctx, msgs)
		if err != nil {
			return results, err
		}
		if err := idemtest.BeforeCommit(ctx, nil); err != nil {
			for i := range results {
				results[i] = idem.Result[receipt]{Err: err}
			}
		}
		return results, nil
	}
}

// The broken consumers. Each gets everything right but one thing. Not built
// on idemimpl.Inbox, they call idemtest.BeforeCommit where idem calls its
// before-commit hook: in the transaction that records the key, right before
// its commit.

// checkThenInsert looks the key up before its transaction: two concurrent
// deliveries both find it absent, and both run the handler.
func checkThenInsert(_ idemtest.NoReceiver, pool *pgxpool.Pool, _ ...idem.Option) idemtest.HandleFunc[transfer, receipt] {
	return func(ctx context.Context, msg transfer) (receipt, idem.Outcome, error) {
		if r, o, found, err := stored(ctx, pool, msg); found {
			return r, o, err
		}
		tx, err := pool.Begin(ctx)
		if err != nil {
			return receipt{}, 0, err
		}
		defer tx.Rollback(ctx)
		r, err := post(ctx, tx, msg)
		if err == nil {
			err = record(ctx, tx, msg, r)
		}
		if err == nil {
			err = idemtest.BeforeCommit(ctx, tx)
		}
		if err == nil {
			err = tx.Commit(ctx)
		}
		if err != nil {
			return receipt{}, 0, err
		}
		return r, idem.Processed, nil
	}
}

// recordAfterCommit commits the business change, then records the key in a
// transaction of its own: a worker that dies in between leaves the change
// without the key, and the redelivery applies it again.
func recordAfterCommit(_ idemtest.NoReceiver, pool *pgxpool.Pool, _ ...idem.Option) idemtest.HandleFunc[transfer, receipt] {
	return func(ctx context.Context, msg transfer) (receipt, idem.Outcome, error) {
		if r, o, found, err := stored(ctx, pool, msg); found {
			return r, o, err
		}
		var r receipt
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) (err error) {
			r, err = post(ctx, tx, msg)
			return err
		})
		if err != nil {
			return receipt{}, 0, err
		}
		err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if err := record(ctx, tx, msg, r); err != nil {
				return err
			}
			return idemtest.BeforeCommit(ctx, tx)
		})
		if err != nil {
			return receipt{}, 0, err
		}
		return r, idem.Processed, nil
	}
}

// uniqueViolationIsDuplicate claims the key with a plain INSERT in the
// business transaction and takes every unique violation for a duplicate,
// including one of a business table.
func uniqueViolationIsDuplicate(_ idemtest.NoReceiver, pool *pgxpool.Pool, _ ...idem.Option) idemtest.HandleFunc[transfer, receipt] {
	return func(ctx context.Context, msg transfer) (receipt, idem.Outcome, error) {
		var r receipt
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) (err error) {
			if _, err := tx.Exec(ctx, `INSERT INTO inbox_transfer (key_id, fingerprint) VALUES ($1, $2)`, msg.ID, fingerprint(msg)); err != nil {
				return err
			}
			if r, err = post(ctx, tx, msg); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `UPDATE inbox_transfer SET status = 'done', result = $2 WHERE key_id = $1`, msg.ID, resultJSON(r)); err != nil {
				return err
			}
			return idemtest.BeforeCommit(ctx, tx)
		})
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == pgerrcode.UniqueViolation {
			if r, o, found, err := stored(ctx, pool, msg); found {
				return r, o, err
			}
			return receipt{}, idem.Duplicate, nil
		}
		if err != nil {
			return receipt{}, 0, err
		}
		return r, idem.Processed, nil
	}
}

// stored returns what the inbox knows about msg's key: Duplicate with the
// stored result, or ErrKeyReused; found is false when the key is not there.
func stored(ctx context.Context, pool *pgxpool.Pool, msg transfer) (r receipt, o idem.Outcome, found bool, err error) {
	var fp []byte
	err = pool.QueryRow(ctx, `SELECT fingerprint, result FROM inbox_transfer WHERE key_id = $1`, msg.ID).Scan(&fp, &r)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return receipt{}, 0, false, nil
	case err != nil:
		return receipt{}, 0, true, err
	case !bytes.Equal(fp, fingerprint(msg)):
		return receipt{}, 0, true, idem.ErrKeyReused
	}
	return r, idem.Duplicate, true, nil
}

func record(ctx context.Context, tx pgx.Tx, msg transfer, r receipt) error {
	_, err := tx.Exec(ctx, `INSERT INTO inbox_transfer (key_id, fingerprint, status, result, completed_at) VALUES ($1, $2, 'done', $3, now())`,
		msg.ID, fingerprint(msg), resultJSON(r))
	return err
}

// resultJSON is r as JSON text, the form a json column takes in every
// pgx.QueryExecMode: a struct has no text encoding for a parameter of unknown
// type (exec and simple_protocol modes do not describe the statement).
func resultJSON(r receipt) string {
	data, _ := json.Marshal(r)
	return string(data)
}

// IdemFingerprint makes transfer an idem.Fingerprinter, so that the
// hand-written consumers below store the fingerprint the runtime computes
// (fingerprint), and a row one of them wrote reads as the same message.
func (msg transfer) IdemFingerprint() []byte {
	data, _ := json.Marshal(msg)
	return data
}

// fingerprint is the runtime's fingerprint of msg: scheme 1, the SHA-256 of
// its Fingerprinter bytes.
func fingerprint(msg transfer) []byte {
	sum := sha256.Sum256(msg.IdemFingerprint())
	return append([]byte{1}, sum[:]...)
}

func suite(build func(idemtest.NoReceiver, *pgxpool.Pool, ...idem.Option) idemtest.HandleFunc[transfer, receipt], opts ...idem.Option) idemtest.Suite[idemtest.NoReceiver, transfer, receipt] {
	return idemtest.Suite[idemtest.NoReceiver, transfer, receipt]{
		Migrations: migrations,
		Inbox:      "inbox_transfer",
		New:        build,
		Batch:      newInboxBatch,
		Fixture:    fixture,
		Options:    opts,
	}
}

// withBatch is s with another batch consumer.
func withBatch(s idemtest.Suite[idemtest.NoReceiver, transfer, receipt], b func(idemtest.NoReceiver, *pgxpool.Pool, ...idem.Option) idemtest.BatchFunc[transfer, receipt]) idemtest.Suite[idemtest.NoReceiver, transfer, receipt] {
	s.Batch = b
	return s
}

// TestSuiteRun runs the scenarios as a generated test does, as subtests.
func TestSuiteRun(t *testing.T) {
	suite(newInbox).Run(t)
}

// TestScenariosCatchBrokenConsumers runs every scenario against each
// consumer with a recording testing.TB and compares the scenarios that
// failed with those that must.
func TestScenariosCatchBrokenConsumers(t *testing.T) {
	idemtest.DatabaseURL(t)
	cases := []struct {
		name     string
		suite    idemtest.Suite[idemtest.NoReceiver, transfer, receipt]
		caughtBy []string
	}{
		{"idemimpl.Inbox", suite(newInbox), nil},
		{"idem.Inbox_repeatable_read", suite(newInbox, idem.WithIsolation(pgx.RepeatableRead)), nil},
		{"idem.Inbox_serializable", suite(newInbox, idem.WithIsolation(pgx.Serializable)), nil},
		{"check_then_insert", suite(checkThenInsert), []string{idemtest.ScenarioConcurrent}},
		{"record_key_after_commit", suite(recordAfterCommit), []string{idemtest.ScenarioConcurrent, idemtest.ScenarioFailureBeforeCommit}},
		{"unique_violation_is_duplicate", suite(uniqueViolationIsDuplicate), []string{idemtest.ScenarioBusinessUniqueViolation}},
		{"batch_without_inbox", withBatch(suite(newInbox), batchWithoutInbox), []string{idemtest.ScenarioBatchKeyTwice,
			idemtest.ScenarioBatchProcessedKey, idemtest.ScenarioBatchFailingHandler, idemtest.ScenarioBatchConcurrent, idemtest.ScenarioBatchKilledMidBatch}},
		// Its hook runs once a batch, after the commit: a batch of processed
		// keys counts as a run, and a failure or a kill there comes too late.
		// Concurrent batches may run the handler once each (the default
		// protocol rolls the copies back at their INSERT), so the runs of
		// batch_concurrent do not tell this consumer from a correct one.
		{"batch_commits_before_hook", withBatch(suite(newInbox), batchCommitsBeforeHook), []string{idemtest.ScenarioBatchProcessedKey,
			idemtest.ScenarioBatchFailingHandler, idemtest.ScenarioBatchKilledMidBatch}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var caught []string
			for _, sc := range c.suite.Scenarios() {
				// A subtest per scenario, so that the child process of a
				// kill scenario (this test binary, run with this test's
				// name) runs that scenario alone.
				t.Run(sc.Name, func(t *testing.T) {
					rec := runRecorded(t, sc)
					switch {
					case rec.skipped:
						t.Errorf("%s skipped: %s", sc.Name, rec.report())
					case rec.failed():
						caught = append(caught, sc.Name)
						t.Logf("%s caught %s:\n%s", sc.Name, c.name, rec.report())
					}
				})
			}
			if !slices.Equal(caught, c.caughtBy) {
				t.Errorf("%s was caught by %v; want %v", c.name, caught, c.caughtBy)
			}
		})
	}
}

// recorder is a testing.TB that records failures instead of failing the
// test, so that a scenario's failure is an observation. Fatal and Skip end
// the scenario's goroutine, as they do a test's.
type recorder struct {
	testing.TB // the test itself, for what is not overridden

	mu       sync.Mutex
	failures []string
	skipped  bool
	cleanups []func()
}

// runRecorded runs the scenario in a goroutine of its own with a recorder,
// then its cleanups (the scenario's pools and schema).
func runRecorded(t *testing.T, sc idemtest.Scenario) *recorder {
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer r.runCleanups()
		sc.Run(r)
	}()
	<-done
	return r
}

func (r *recorder) add(msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failures = append(r.failures, msg)
}

func (r *recorder) failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.failures) > 0
}

func (r *recorder) report() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return "\t" + strings.Join(r.failures, "\n\t")
}

func (r *recorder) runCleanups() {
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
}

func (r *recorder) Helper()                      {}
func (r *recorder) Cleanup(f func())             { r.cleanups = append(r.cleanups, f) }
func (r *recorder) Error(args ...any)            { r.add(fmt.Sprint(args...)) }
func (r *recorder) Errorf(f string, args ...any) { r.add(fmt.Sprintf(f, args...)) }
func (r *recorder) Fail()                        { r.add("failed") }
func (r *recorder) Failed() bool                 { return r.failed() }
func (r *recorder) FailNow()                     { r.Fail(); runtime.Goexit() }
func (r *recorder) Fatal(args ...any)            { r.Error(args...); runtime.Goexit() }
func (r *recorder) Fatalf(f string, args ...any) { r.Errorf(f, args...); runtime.Goexit() }
func (r *recorder) Log(args ...any)              {}
func (r *recorder) Logf(string, ...any)          {}
func (r *recorder) Skipped() bool                { return r.skipped }
func (r *recorder) SkipNow()                     { r.skipped = true; runtime.Goexit() }
func (r *recorder) Skip(args ...any)             { r.add(fmt.Sprint(args...)); r.SkipNow() }
func (r *recorder) Skipf(f string, args ...any)  { r.add(fmt.Sprintf(f, args...)); r.SkipNow() }
