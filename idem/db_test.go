package idem_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemimpl"
	"github.com/idemgen/idemgen/idem/idemtest"
)

// countingDB is a user's wrapper around a pool, as idem.DB allows: it counts
// the connections the runtime takes.
type countingDB struct {
	*pgxpool.Pool
	acquires atomic.Int64
}

func (c *countingDB) Acquire(ctx context.Context) (*pgxpool.Conn, error) {
	c.acquires.Add(1)
	return c.Pool.Acquire(ctx)
}

// TestNewInboxTakesAUserDB: NewInbox takes a wrapper around a pool, and the
// runtime takes every connection through it: one per delivery (processed or
// duplicate) and one per purge batch.
func TestNewInboxTakesAUserDB(t *testing.T) {
	db := idemtest.New(t, migrations)
	ctx := context.Background()
	counting := &countingDB{Pool: db.Pool}
	inbox := idemimpl.NewInbox(counting, depositTable, credit)
	msg := deposit{Account: "acct-db", Ref: 1, Amount: 5}
	for _, want := range []idem.Outcome{idem.Processed, idem.Duplicate} {
		if _, o, err := inbox.Handle(ctx, msg); err != nil || o != want {
			t.Fatalf("Handle: %v, %v; want %v", o, err, want)
		}
	}
	if n, err := inbox.Purge(ctx); err != nil || n != 0 {
		t.Fatalf("Purge: %d, %v; want 0 rows deleted", n, err)
	}
	if got := counting.acquires.Load(); got != 3 {
		t.Errorf("the wrapper saw %d acquires, want 3 (two deliveries, one purge batch)", got)
	}
	if got := balance(t, db, "acct-db"); got != 5 {
		t.Errorf("balance %d, want 5", got)
	}
}

// failingDB is a DB whose every acquire fails, as a wrapper that limits or
// routes connections may refuse one.
type failingDB struct{ err error }

func (f failingDB) Acquire(context.Context) (*pgxpool.Conn, error) { return nil, f.err }

// TestUserDBAcquireErrorIsTheDeliverysError: what a DB's Acquire returns
// reaches the caller of Handle and Purge, wrapped, with nothing written.
func TestUserDBAcquireErrorIsTheDeliverysError(t *testing.T) {
	refused := errors.New("tenant pool closed")
	inbox := idemimpl.NewInbox(failingDB{refused}, depositTable, credit)
	ctx := context.Background()
	if _, _, err := inbox.Handle(ctx, deposit{Account: "acct-db", Ref: 1}); !errors.Is(err, refused) {
		t.Errorf("Handle: %v, want an error wrapping %v", err, refused)
	}
	if _, err := inbox.Purge(ctx); !errors.Is(err, refused) {
		t.Errorf("Purge: %v, want an error wrapping %v", err, refused)
	}
}

// tracedDB is a DB of a type that == cannot compare (a func field), passed by
// value.
type tracedDB struct {
	pool  *pgxpool.Pool
	trace func(string)
}

func (d tracedDB) Acquire(ctx context.Context) (*pgxpool.Conn, error) {
	d.trace("acquire")
	return d.pool.Acquire(ctx)
}

// TestUserDBNotComparable: a DB that == cannot compare still delivers,
// concurrent deliveries of one key included (the runtime tells the deliveries
// in flight of one DB apart from those of another; it must not hash such a
// DB).
func TestUserDBNotComparable(t *testing.T) {
	db := idemtest.New(t, migrations)
	ctx := context.Background()
	var traced atomic.Int64
	inbox := idemimpl.NewInbox(tracedDB{pool: db.Pool, trace: func(string) { traced.Add(1) }}, depositTable, credit)
	const n = 4
	idemtest.Warm(t, db.Pool, n)
	var processed atomic.Int64
	errs := make([]error, n)
	idemtest.AtOnce(n, func(i int) {
		var o idem.Outcome
		_, o, errs[i] = inbox.Handle(ctx, deposit{Account: "acct-traced", Ref: 1, Amount: 2})
		if errs[i] == nil && o == idem.Processed {
			processed.Add(1)
		}
	})
	for i, err := range errs {
		if err != nil && !errors.Is(err, idem.ErrInProgress) {
			t.Errorf("delivery %d: %v", i, err)
		}
	}
	if processed.Load() != 1 || traced.Load() != n {
		t.Errorf("%d processed, %d acquires traced; want 1 and %d", processed.Load(), traced.Load(), n)
	}
	if got := balance(t, db, "acct-traced"); got != 2 {
		t.Errorf("balance %d, want 2", got)
	}
}
