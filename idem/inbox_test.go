package idem_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
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

// The tests drive the runtime with the same kind of Table a generated wrapper
// declares: a deposit handler keyed by (Account, Ref) that credits a balance.

type deposit struct {
	Account string `json:"account"`
	Ref     int64  `json:"ref"`
	Amount  int64  `json:"amount"`
}

type receipt struct {
	Balance int64  `json:"balance"`
	Note    string `json:"note"`
}

var migrations = fstest.MapFS{
	"00001_accounts.sql": {Data: []byte(`-- +goose Up
CREATE TABLE accounts (id text PRIMARY KEY, balance bigint NOT NULL DEFAULT 0);
CREATE TABLE postings (account text NOT NULL, ref bigint NOT NULL, UNIQUE (account, ref));
-- +goose Down
DROP TABLE postings;
DROP TABLE accounts;
`)},
	"00002_idem_test_deposit.sql": {Data: []byte(`-- +goose Up
CREATE TABLE idem_test_deposit (
    key_account  text        NOT NULL,
    key_ref      bigint      NOT NULL,
    fingerprint  bytea       NOT NULL,
    status       text        NOT NULL DEFAULT 'done',
    result       json,
    attempts     integer     NOT NULL DEFAULT 1,
    created_at   timestamptz NOT NULL DEFAULT now(),
    completed_at timestamptz,
    PRIMARY KEY (key_account, key_ref)
);
CREATE INDEX ON idem_test_deposit (created_at);
-- +goose Down
DROP TABLE idem_test_deposit;
`)},
}

var depositTable = idemimpl.Table[deposit]{
	Consumer: "test.deposit",
	Name:     "idem_test_deposit",
	Columns: []idemimpl.Column{
		{Field: "Account", Name: "key_account", Type: "text"},
		{Field: "Ref", Name: "key_ref", Type: "bigint"},
	},
	Key: func(msg deposit) ([]any, error) {
		if err := idemimpl.CheckString("Account", msg.Account); err != nil {
			return nil, err
		}
		return []any{msg.Account, msg.Ref}, nil
	},
	Retain: 720 * time.Hour,
}

// credit is the business change: it posts the deposit (unique per account and
// ref, so a second posting is a business unique violation) and credits the
// balance.
func credit(ctx context.Context, tx pgx.Tx, msg deposit) (receipt, error) {
	if _, err := tx.Exec(ctx, `INSERT INTO postings (account, ref) VALUES ($1, $2)`, msg.Account, msg.Ref); err != nil {
		return receipt{}, err
	}
	var r receipt
	err := tx.QueryRow(ctx, `INSERT INTO accounts (id, balance) VALUES ($1, $2)
		ON CONFLICT (id) DO UPDATE SET balance = accounts.balance + EXCLUDED.balance RETURNING balance`,
		msg.Account, msg.Amount).Scan(&r.Balance)
	r.Note = fmt.Sprintf("credited %d", msg.Amount)
	return r, err
}

func count(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

func inboxRows(t *testing.T, db *idemtest.DB) int {
	return count(t, db.Pool, `SELECT count(*) FROM idem_test_deposit`)
}

func balance(t *testing.T, db *idemtest.DB, account string) int {
	return count(t, db.Pool, `SELECT coalesce(sum(balance), 0)::int FROM accounts WHERE id = $1`, account)
}

// TestConcurrentDeliveriesProcessOnce delivers 16 copies of a slow message
// at once, under each isolation level and each protocol. One copy commits
// its effect; the other 15 are Duplicate with its result. The optimistic
// protocol lets copies run the handler and rolls them back at their
// INSERT (or at the handler's own conflicting write): the test logs how
// many ran. WithPessimisticClaim runs the handler once.
func TestConcurrentDeliveriesProcessOnce(t *testing.T) {
	for _, protocol := range []string{"optimistic", "pessimistic"} {
		for _, iso := range []pgx.TxIsoLevel{"", pgx.RepeatableRead, pgx.Serializable} {
			t.Run(protocol+"/isolation="+string(iso), func(t *testing.T) {
				testConcurrentDeliveries(t, protocol == "pessimistic", iso)
			})
		}
	}
}

func testConcurrentDeliveries(t *testing.T, pessimistic bool, iso pgx.TxIsoLevel) {
	db := idemtest.New(t, migrations)
	ctx := context.Background()
	const n = 16
	idemtest.Warm(t, db.Pool, n)

	var runs, completed atomic.Int32
	handler := func(ctx context.Context, tx pgx.Tx, msg deposit) (receipt, error) {
		runs.Add(1)
		// Slow: every other copy arrives while this one's transaction is
		// open.
		time.Sleep(300 * time.Millisecond)
		r, err := credit(ctx, tx, msg)
		if err == nil {
			completed.Add(1)
		}
		return r, err
	}
	var opts []idem.Option
	if iso != "" {
		opts = append(opts, idem.WithIsolation(iso))
	}
	if pessimistic {
		opts = append(opts, idem.WithPessimisticClaim())
	}
	inbox := idemimpl.NewInbox(db.Pool, depositTable, handler, opts...)

	msg := deposit{Account: "acc-1", Ref: 7, Amount: 100}
	type res struct {
		r   receipt
		o   idem.Outcome
		err error
	}
	results := make([]res, n)
	idemtest.AtOnce(n, func(i int) {
		r, o, err := inbox.Handle(ctx, msg)
		results[i] = res{r, o, err}
	})

	var processed, duplicate int
	var first receipt
	for _, r := range results {
		if r.err != nil {
			t.Fatalf("Handle: %v", r.err)
		}
		if r.o == idem.Processed {
			processed++
			first = r.r
		} else {
			duplicate++
		}
	}
	if processed != 1 || duplicate != n-1 {
		t.Fatalf("processed=%d duplicate=%d, want 1 and %d", processed, duplicate, n-1)
	}
	for _, r := range results {
		if r.r != first {
			t.Errorf("result %+v differs from the first delivery's %+v", r.r, first)
		}
	}
	t.Logf("%d copies: the handler ran %d times, %d ran to its end, %d rolled back", n, runs.Load(), completed.Load(), runs.Load()-1)
	if pessimistic && runs.Load() != 1 {
		t.Errorf("handler ran %d times with WithPessimisticClaim, want 1", runs.Load())
	}
	if got := runs.Load(); got < 1 || got > n {
		t.Errorf("handler ran %d times, want 1 to %d", got, n)
	}
	if got := inboxRows(t, db); got != 1 {
		t.Errorf("%d inbox rows, want 1", got)
	}
	if got := balance(t, db, "acc-1"); got != 100 {
		t.Errorf("balance %d, want 100 (the deposit applied once)", got)
	}
	if got := count(t, db.Pool, `SELECT count(*) FROM postings WHERE account = 'acc-1'`); got != 1 {
		t.Errorf("%d postings, want 1", got)
	}
}

func TestSequentialDuplicateReturnsStoredResult(t *testing.T) {
	db := idemtest.New(t, migrations)
	ctx := context.Background()
	// A duplicate enters the handler, but its first statement fails
	// (the lookup in front of it found the key): count the runs that got
	// past it.
	var calls int
	inbox := idemimpl.NewInbox(db.Pool, depositTable, func(ctx context.Context, tx pgx.Tx, msg deposit) (receipt, error) {
		r, err := credit(ctx, tx, msg)
		if err == nil {
			calls++
		}
		return r, err
	})
	msg := deposit{Account: "acc-2", Ref: 1, Amount: 5}
	r1, o1, err := inbox.Handle(ctx, msg)
	if err != nil || o1 != idem.Processed {
		t.Fatalf("first delivery: %v, %v", o1, err)
	}
	r2, o2, err := inbox.Handle(ctx, msg)
	if err != nil || o2 != idem.Duplicate {
		t.Fatalf("second delivery: %v, %v", o2, err)
	}
	if r1 != r2 || r1.Balance != 5 {
		t.Errorf("results %+v and %+v, want equal with balance 5", r1, r2)
	}
	if calls != 1 {
		t.Errorf("handler called %d times, want 1", calls)
	}
}

func TestKeyReused(t *testing.T) {
	db := idemtest.New(t, migrations)
	ctx := context.Background()
	inbox := idemimpl.NewInbox(db.Pool, depositTable, credit)
	if _, _, err := inbox.Handle(ctx, deposit{Account: "acc-3", Ref: 1, Amount: 5}); err != nil {
		t.Fatal(err)
	}
	_, o, err := inbox.Handle(ctx, deposit{Account: "acc-3", Ref: 1, Amount: 6})
	if !errors.Is(err, idem.ErrKeyReused) {
		t.Fatalf("got %v, %v; want ErrKeyReused", o, err)
	}
	var e *idem.Error
	if !errors.As(err, &e) || e.Consumer != "test.deposit" || e.Key != `Account="acc-3",Ref=1` {
		t.Errorf("error %#v does not name the consumer and key", err)
	}
	if got := balance(t, db, "acc-3"); got != 5 {
		t.Errorf("balance %d, want 5", got)
	}
}

func TestInvalidKeyWritesNothing(t *testing.T) {
	db := idemtest.New(t, migrations)
	called := false
	inbox := idemimpl.NewInbox(db.Pool, depositTable, func(ctx context.Context, tx pgx.Tx, msg deposit) (receipt, error) {
		called = true
		return receipt{}, nil
	})
	for _, account := range []string{"", "a\x00b", "\xff", strings.Repeat("x", idem.MaxKeyBytes+1)} {
		_, _, err := inbox.Handle(context.Background(), deposit{Account: account, Ref: 1})
		if !errors.Is(err, idem.ErrInvalidKey) {
			t.Errorf("account %.10q: got %v, want ErrInvalidKey", account, err)
		}
	}
	if called || inboxRows(t, db) != 0 {
		t.Errorf("handler called %v, %d inbox rows; want neither", called, inboxRows(t, db))
	}
}

func TestHandlerErrorRollsBack(t *testing.T) {
	db := idemtest.New(t, migrations)
	ctx := context.Background()
	boom := errors.New("boom")
	fail := true
	inbox := idemimpl.NewInbox(db.Pool, depositTable, func(ctx context.Context, tx pgx.Tx, msg deposit) (receipt, error) {
		r, err := credit(ctx, tx, msg)
		if fail {
			return r, boom
		}
		return r, err
	})
	msg := deposit{Account: "acc-4", Ref: 1, Amount: 9}
	if _, _, err := inbox.Handle(ctx, msg); !errors.Is(err, boom) {
		t.Fatalf("got %v, want the handler's error", err)
	}
	if inboxRows(t, db) != 0 || balance(t, db, "acc-4") != 0 {
		t.Fatal("a failed handler left its inbox row or its change behind")
	}
	fail = false
	if _, o, err := inbox.Handle(ctx, msg); err != nil || o != idem.Processed {
		t.Fatalf("redelivery: %v, %v; want Processed", o, err)
	}
	if got := balance(t, db, "acc-4"); got != 9 {
		t.Errorf("balance %d, want 9", got)
	}
}

func TestHandlerPanicRollsBackAndRepanics(t *testing.T) {
	db := idemtest.New(t, migrations)
	ctx := context.Background()
	inbox := idemimpl.NewInbox(db.Pool, depositTable, func(ctx context.Context, tx pgx.Tx, msg deposit) (receipt, error) {
		if _, err := credit(ctx, tx, msg); err != nil {
			return receipt{}, err
		}
		panic("handler panic")
	})
	func() {
		defer func() {
			if p := recover(); p != "handler panic" {
				t.Errorf("recovered %v, want the handler's panic", p)
			}
		}()
		_, _, _ = inbox.Handle(ctx, deposit{Account: "acc-5", Ref: 1, Amount: 1})
	}()
	if inboxRows(t, db) != 0 || balance(t, db, "acc-5") != 0 {
		t.Fatal("a panicking handler left its inbox row or its change behind")
	}
	if s := db.Pool.Stat(); s.AcquiredConns() != 0 {
		t.Errorf("%d connections still acquired after the panic", s.AcquiredConns())
	}
}

func TestBusinessUniqueViolationIsNotADuplicate(t *testing.T) {
	db := idemtest.New(t, migrations)
	ctx := context.Background()
	// The posting (acc-6, 1) exists already, outside the inbox: the handler's
	// own INSERT violates the business table's unique constraint.
	if _, err := db.Pool.Exec(ctx, `INSERT INTO postings VALUES ('acc-6', 1)`); err != nil {
		t.Fatal(err)
	}
	inbox := idemimpl.NewInbox(db.Pool, depositTable, credit)
	_, o, err := inbox.Handle(ctx, deposit{Account: "acc-6", Ref: 1, Amount: 1})
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != pgerrcode.UniqueViolation || o == idem.Duplicate {
		t.Fatalf("got %v, %v; want the handler's unique violation, not a duplicate", o, err)
	}
	if inboxRows(t, db) != 0 {
		t.Error("the failed delivery was recorded in the inbox")
	}
}

func TestSwallowedStatementErrorIsNotCommitted(t *testing.T) {
	db := idemtest.New(t, migrations)
	inbox := idemimpl.NewInbox(db.Pool, depositTable, func(ctx context.Context, tx pgx.Tx, msg deposit) (receipt, error) {
		_, _ = tx.Exec(ctx, `SELECT 1/0`) // error ignored: the transaction is aborted
		return receipt{}, nil
	})
	_, _, err := inbox.Handle(context.Background(), deposit{Account: "acc-7", Ref: 1})
	if err == nil || !strings.Contains(err.Error(), "returned nil") {
		t.Fatalf("got %v, want the aborted-transaction error", err)
	}
	if inboxRows(t, db) != 0 {
		t.Error("the aborted delivery was recorded in the inbox")
	}
}

func TestHandlerCannotEndTheTransaction(t *testing.T) {
	db := idemtest.New(t, migrations)
	var leaked pgx.Tx
	inbox := idemimpl.NewInbox(db.Pool, depositTable, func(ctx context.Context, tx pgx.Tx, msg deposit) (receipt, error) {
		leaked = tx
		if err := tx.Commit(ctx); err == nil {
			t.Error("Commit inside the handler succeeded")
		}
		// Savepoints still work.
		sp, err := tx.Begin(ctx)
		if err != nil {
			return receipt{}, err
		}
		if err := sp.Rollback(ctx); err != nil {
			return receipt{}, err
		}
		return credit(ctx, tx, msg)
	})
	if _, _, err := inbox.Handle(context.Background(), deposit{Account: "acc-8", Ref: 1, Amount: 3}); err != nil {
		t.Fatal(err)
	}
	if _, err := leaked.Exec(context.Background(), `DELETE FROM accounts`); !errors.Is(err, pgx.ErrTxClosed) {
		t.Errorf("a leaked Tx used after Handle returned: %v, want ErrTxClosed", err)
	}
	if got := balance(t, db, "acc-8"); got != 3 {
		t.Errorf("balance %d, want 3", got)
	}
}

func TestInProgressAfterClaimWait(t *testing.T) {
	db := idemtest.New(t, migrations)
	ctx := context.Background()
	entered, release := make(chan struct{}), make(chan struct{})
	// The claim-first protocol holds the key while the handler runs.
	slow := idemimpl.NewInbox(db.Pool, depositTable, func(ctx context.Context, tx pgx.Tx, msg deposit) (receipt, error) {
		close(entered)
		<-release
		return credit(ctx, tx, msg)
	}, idem.WithPessimisticClaim())
	msg := deposit{Account: "acc-9", Ref: 1, Amount: 4}
	firstDone := make(chan error)
	go func() {
		_, _, err := slow.Handle(ctx, msg)
		firstDone <- err
	}()
	<-entered

	fast := idemimpl.NewInbox(db.Pool, depositTable, credit, idem.WithClaimWait(150*time.Millisecond), idem.WithPessimisticClaim())
	began := time.Now()
	_, _, err := fast.Handle(ctx, msg)
	waited := time.Since(began)
	if !errors.Is(err, idem.ErrInProgress) {
		t.Fatalf("got %v, want ErrInProgress", err)
	}
	if after, ok := idem.RetryAfter(err); !ok || after != 150*time.Millisecond {
		t.Errorf("RetryAfter = %v, %v; want the claim wait, 150ms", after, ok)
	}
	if waited < 150*time.Millisecond || waited > 2*time.Second {
		t.Errorf("waited %v for the claim, want about the 150ms bound", waited)
	}
	close(release)
	if err := <-firstDone; err != nil {
		t.Fatal(err)
	}
	if _, o, err := fast.Handle(ctx, msg); err != nil || o != idem.Duplicate {
		t.Errorf("after the first delivery committed: %v, %v; want Duplicate", o, err)
	}
}

func TestClaimTimeoutDoesNotLeakIntoHandler(t *testing.T) {
	db := idemtest.New(t, migrations)
	ctx := context.Background()
	// Connections whose session lock_timeout is 7s: the handler must see
	// that, not the claim's bound.
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["lock_timeout"] = "7s"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()

	var seen string
	inbox := idemimpl.NewInbox(pool, depositTable, func(ctx context.Context, tx pgx.Tx, msg deposit) (receipt, error) {
		if err := tx.QueryRow(ctx, `SHOW lock_timeout`).Scan(&seen); err != nil {
			return receipt{}, err
		}
		return credit(ctx, tx, msg)
	}, idem.WithClaimWait(time.Second))
	if _, _, err := inbox.Handle(ctx, deposit{Account: "acc-10", Ref: 1, Amount: 1}); err != nil {
		t.Fatal(err)
	}
	if seen != "7s" {
		t.Errorf("handler saw lock_timeout %q, want the session's 7s", seen)
	}
}

func TestRetryableErrors(t *testing.T) {
	db := idemtest.New(t, migrations)
	inbox := idemimpl.NewInbox(db.Pool, depositTable, func(ctx context.Context, tx pgx.Tx, msg deposit) (receipt, error) {
		return receipt{}, fmt.Errorf("update: %w", &pgconn.PgError{Code: pgerrcode.SerializationFailure, Message: "could not serialize access"})
	})
	_, _, err := inbox.Handle(context.Background(), deposit{Account: "acc-11", Ref: 1})
	if !errors.Is(err, idem.ErrRetryable) {
		t.Errorf("got %v, want ErrRetryable", err)
	}
	if errors.Is(err, idem.ErrInProgress) || errors.Is(err, idem.ErrKeyReused) {
		t.Errorf("a serialization failure classified as %v", err)
	}
}

func TestNoResultHandler(t *testing.T) {
	db := idemtest.New(t, migrations)
	ctx := context.Background()
	inbox := idemimpl.NewInbox(db.Pool, depositTable, idemimpl.NoResult(func(ctx context.Context, tx pgx.Tx, msg deposit) error {
		_, err := credit(ctx, tx, msg)
		return err
	}))
	msg := deposit{Account: "acc-12", Ref: 1, Amount: 2}
	for _, want := range []idem.Outcome{idem.Processed, idem.Duplicate} {
		if _, o, err := inbox.Handle(ctx, msg); err != nil || o != want {
			t.Fatalf("got %v, %v; want %v", o, err, want)
		}
	}
	if n := count(t, db.Pool, `SELECT count(*) FROM idem_test_deposit WHERE result IS NULL`); n != 1 {
		t.Errorf("%d rows without a result, want 1", n)
	}
}

func TestPurgeDeletesExpiredRows(t *testing.T) {
	db := idemtest.New(t, migrations)
	ctx := context.Background()
	inbox := idemimpl.NewInbox(db.Pool, depositTable, credit)
	for i := range 3 {
		if _, _, err := inbox.Handle(ctx, deposit{Account: "acc-13", Ref: int64(i), Amount: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Pool.Exec(ctx, `UPDATE idem_test_deposit SET created_at = now() - interval '31 days' WHERE key_ref < 2`); err != nil {
		t.Fatal(err)
	}
	n, err := inbox.Purge(ctx)
	if err != nil || n != 2 {
		t.Fatalf("Purge: %d, %v; want 2 rows", n, err)
	}
	if got := inboxRows(t, db); got != 1 {
		t.Errorf("%d rows left, want 1", got)
	}
}
