package idem_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemimpl"
	"github.com/idemgen/idemgen/idem/idemtest"
)

// TestBeforeCommitSeesTheHandlersWrites: the hook runs once per real run of
// the handler, inside its transaction (it sees the uncommitted posting), and
// never for a Duplicate.
func TestBeforeCommitSeesTheHandlersWrites(t *testing.T) {
	db := idemtest.New(t, migrations)
	ctx := context.Background()
	var calls, postings int
	inbox := idemimpl.NewInbox(db.Pool, depositTable, credit, idem.WithBeforeCommit(func(ctx context.Context, tx pgx.Tx) error {
		calls++
		return tx.QueryRow(ctx, `SELECT count(*) FROM postings WHERE account = 'acc-b1'`).Scan(&postings)
	}))
	msg := deposit{Account: "acc-b1", Ref: 1, Amount: 3}
	for _, want := range []idem.Outcome{idem.Processed, idem.Duplicate} {
		if _, o, err := inbox.Handle(ctx, msg); err != nil || o != want {
			t.Fatalf("got %v, %v; want %v", o, err, want)
		}
	}
	if calls != 1 || postings != 1 {
		t.Errorf("hook called %d times and saw %d postings; want 1 and 1", calls, postings)
	}
}

// TestBeforeCommitErrorRollsBack: an error from the hook undoes the handler's
// writes and the claim, and the redelivery processes the message.
func TestBeforeCommitErrorRollsBack(t *testing.T) {
	db := idemtest.New(t, migrations)
	ctx := context.Background()
	veto := errors.New("veto")
	fail := true
	inbox := idemimpl.NewInbox(db.Pool, depositTable, credit, idem.WithBeforeCommit(func(ctx context.Context, tx pgx.Tx) error {
		if fail {
			return veto
		}
		return nil
	}))
	msg := deposit{Account: "acc-b2", Ref: 1, Amount: 4}
	_, o, err := inbox.Handle(ctx, msg)
	var e *idem.Error
	if !errors.Is(err, veto) || !errors.As(err, &e) || e.Consumer != "test.deposit" || o != 0 {
		t.Fatalf("got %v, %v; want the hook's error as an *idem.Error", o, err)
	}
	if inboxRows(t, db) != 0 || balance(t, db, "acc-b2") != 0 {
		t.Fatal("the vetoed delivery left its inbox row or its change behind")
	}
	fail = false
	if _, o, err := inbox.Handle(ctx, msg); err != nil || o != idem.Processed {
		t.Fatalf("redelivery: %v, %v; want Processed", o, err)
	}
	if balance(t, db, "acc-b2") != 4 {
		t.Errorf("balance %d, want 4", balance(t, db, "acc-b2"))
	}
}

// TestBeforeCommitRules: the hook is not called when the handler failed or
// left the transaction aborted, it cannot end the transaction, and a panic in
// it rolls back and goes on.
func TestBeforeCommitRules(t *testing.T) {
	db := idemtest.New(t, migrations)
	ctx := context.Background()

	called := false
	boom := errors.New("boom")
	failing := idemimpl.NewInbox(db.Pool, depositTable, func(context.Context, pgx.Tx, deposit) (receipt, error) {
		return receipt{}, boom
	}, idem.WithBeforeCommit(func(context.Context, pgx.Tx) error {
		called = true
		return nil
	}))
	if _, _, err := failing.Handle(ctx, deposit{Account: "acc-b3", Ref: 1}); !errors.Is(err, boom) || called {
		t.Errorf("failing handler: %v, hook called %v; want the handler's error and no hook", err, called)
	}

	swallowing := idemimpl.NewInbox(db.Pool, depositTable, func(ctx context.Context, tx pgx.Tx, msg deposit) (receipt, error) {
		_, _ = tx.Exec(ctx, `SELECT 1/0`) // error ignored: the transaction is aborted
		return receipt{}, nil
	}, idem.WithBeforeCommit(func(context.Context, pgx.Tx) error {
		called = true
		return nil
	}))
	if _, _, err := swallowing.Handle(ctx, deposit{Account: "acc-b3", Ref: 2}); err == nil || !strings.Contains(err.Error(), "returned nil") || called {
		t.Errorf("aborted transaction: %v, hook called %v; want the aborted-transaction error and no hook", err, called)
	}

	var commitErr error
	committing := idemimpl.NewInbox(db.Pool, depositTable, credit, idem.WithBeforeCommit(func(ctx context.Context, tx pgx.Tx) error {
		commitErr = tx.Commit(ctx)
		return nil
	}))
	if _, o, err := committing.Handle(ctx, deposit{Account: "acc-b4", Ref: 1, Amount: 1}); err != nil || o != idem.Processed || commitErr == nil {
		t.Errorf("hook that commits: %v, %v, Commit returned %v; want Processed and a refused Commit", o, err, commitErr)
	}

	panicking := idemimpl.NewInbox(db.Pool, depositTable, credit, idem.WithBeforeCommit(func(context.Context, pgx.Tx) error {
		panic("hook panic")
	}))
	func() {
		defer func() {
			if p := recover(); p != "hook panic" {
				t.Errorf("recovered %v, want the hook's panic", p)
			}
		}()
		_, _, _ = panicking.Handle(ctx, deposit{Account: "acc-b5", Ref: 1, Amount: 1})
	}()
	if balance(t, db, "acc-b5") != 0 || count(t, db.Pool, `SELECT count(*) FROM idem_test_deposit WHERE key_account = 'acc-b5'`) != 0 {
		t.Error("a panicking hook left the delivery's writes behind")
	}
	if s := db.Pool.Stat(); s.AcquiredConns() != 0 {
		t.Errorf("%d connections still acquired after the panic", s.AcquiredConns())
	}
}
