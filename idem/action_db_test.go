package idem_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemimpl"
	"github.com/idemgen/idemgen/idem/idemtest"
)

// measurement has a float, so that NaN makes it unencodable.
type measurement struct {
	Account string  `json:"account"`
	Ref     int64   `json:"ref"`
	Ratio   float64 `json:"ratio"`
}

// TestActionForHandleErrors delivers messages against PostgreSQL so that
// Handle itself returns each kind of outcome and error, and checks what
// ActionFor makes of them: the policy holds for the errors as they really
// come out of Handle, not only for the ones built in TestActionFor.
func TestActionForHandleErrors(t *testing.T) {
	db := idemtest.New(t, ticketMigrations())
	ctx := context.Background()

	check := func(t *testing.T, what string, err error, want idem.Action) {
		t.Helper()
		if got := idem.ActionFor(err); got != want {
			t.Errorf("%s: ActionFor(%v) = %v; want %v", what, err, got, want)
		}
	}

	t.Run("processed and duplicate", func(t *testing.T) {
		inbox := idemimpl.NewInbox(db.Pool, depositTable, credit)
		msg := deposit{Account: "act-1", Ref: 1, Amount: 5}
		for _, want := range []idem.Outcome{idem.Processed, idem.Duplicate} {
			_, o, err := inbox.Handle(ctx, msg)
			if o != want {
				t.Fatalf("got %v, %v; want %v", o, err, want)
			}
			check(t, o.String(), err, idem.Ack)
		}
		msg.Amount = 6
		_, _, err := inbox.Handle(ctx, msg)
		if !errors.Is(err, idem.ErrKeyReused) {
			t.Fatalf("another payload: %v; want ErrKeyReused", err)
		}
		check(t, "key reused", err, idem.DeadLetter)
	})

	t.Run("invalid key", func(t *testing.T) {
		_, _, err := idemimpl.NewInbox(db.Pool, depositTable, credit).Handle(ctx, deposit{Ref: 1})
		if !errors.Is(err, idem.ErrInvalidKey) {
			t.Fatalf("got %v; want ErrInvalidKey", err)
		}
		check(t, "invalid key", err, idem.DeadLetter)
	})

	t.Run("unencodable message", func(t *testing.T) {
		inbox := idemimpl.NewInbox(db.Pool, tableFor(func(m measurement) (string, int64) { return m.Account, m.Ref }),
			func(context.Context, pgx.Tx, measurement) (receipt, error) { return receipt{}, nil })
		_, _, err := inbox.Handle(ctx, measurement{Account: "act-2", Ref: 1, Ratio: math.NaN()})
		if !errors.Is(err, idem.ErrUnencodable) {
			t.Fatalf("got %v; want ErrUnencodable", err)
		}
		check(t, "NaN in the message", err, idem.DeadLetter)
	})

	t.Run("stale", func(t *testing.T) {
		inbox := idemimpl.NewInbox(db.Pool, ticketTable, book)
		show := [16]byte{1}
		if _, _, err := inbox.Handle(ctx, ticket{ID: [16]byte{2}, Show: show, Version: 2, Holder: "Ada"}); err != nil {
			t.Fatal(err)
		}
		_, _, err := inbox.Handle(ctx, ticket{ID: [16]byte{3}, Show: show, Version: 1, Holder: "Bob"})
		if !errors.Is(err, idem.ErrStale) {
			t.Fatalf("an older version: %v; want ErrStale", err)
		}
		check(t, "stale version", err, idem.Ack)
	})

	t.Run("handler error", func(t *testing.T) {
		insufficient := errors.New("insufficient funds")
		inbox := idemimpl.NewInbox(db.Pool, depositTable, func(context.Context, pgx.Tx, deposit) (receipt, error) { return receipt{}, insufficient })
		_, _, err := inbox.Handle(ctx, deposit{Account: "act-3", Ref: 1})
		if !errors.Is(err, insufficient) {
			t.Fatalf("got %v; want the handler's error", err)
		}
		check(t, "the handler's error", err, idem.Retry)
	})

	t.Run("handler says its payload is undecodable", func(t *testing.T) {
		inbox := idemimpl.NewInbox(db.Pool, depositTable, func(context.Context, pgx.Tx, deposit) (receipt, error) {
			return receipt{}, errors.Join(idem.ErrUndecodablePayload, errors.New("the attachment is not a PDF"))
		})
		_, _, err := inbox.Handle(ctx, deposit{Account: "act-4", Ref: 1})
		check(t, "ErrUndecodablePayload from the handler", err, idem.DeadLetter)
	})

	t.Run("connection terminated by the server", func(t *testing.T) {
		// pg_terminate_backend on the handler's own connection: the
		// server sends 57P01 (admin shutdown) and closes it.
		inbox := idemimpl.NewInbox(db.Pool, depositTable, func(ctx context.Context, tx pgx.Tx, msg deposit) (receipt, error) {
			_, err := tx.Exec(ctx, `SELECT pg_terminate_backend(pg_backend_pid())`)
			return receipt{}, err
		})
		_, _, err := inbox.Handle(ctx, deposit{Account: "act-5", Ref: 1})
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != pgerrcode.AdminShutdown {
			t.Fatalf("got %v; want SQLSTATE %s", err, pgerrcode.AdminShutdown)
		}
		check(t, "admin shutdown", err, idem.Retry)
	})

	t.Run("context cancelled and deadline passed", func(t *testing.T) {
		inbox := idemimpl.NewInbox(db.Pool, depositTable, credit)
		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		_, _, err := inbox.Handle(cancelled, deposit{Account: "act-6", Ref: 1})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v; want context.Canceled", err)
		}
		check(t, "cancelled context", err, idem.Retry)

		slow := idemimpl.NewInbox(db.Pool, depositTable, func(ctx context.Context, tx pgx.Tx, msg deposit) (receipt, error) {
			_, err := tx.Exec(ctx, `SELECT pg_sleep(10)`)
			return receipt{}, err
		})
		expiring, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		_, _, err = slow.Handle(expiring, deposit{Account: "act-6", Ref: 2})
		if err == nil || expiring.Err() == nil {
			t.Fatalf("got %v before the deadline; want the deadline's error", err)
		}
		check(t, "deadline passed in the handler", err, idem.Retry)
	})

	t.Run("inbox row deleted by the handler", func(t *testing.T) {
		inbox := idemimpl.NewInbox(db.Pool, depositTable, func(ctx context.Context, tx pgx.Tx, msg deposit) (receipt, error) {
			_, err := tx.Exec(ctx, `DELETE FROM idem_test_deposit WHERE key_account = $1`, msg.Account)
			return receipt{}, err
		}, idem.WithPessimisticClaim()) // the claim-first protocol writes the row before the handler
		_, _, err := inbox.Handle(ctx, deposit{Account: "act-7", Ref: 1})
		if err == nil {
			t.Fatal("the handler deleted its inbox row and Handle returned nil")
		}
		check(t, "inbox row gone at the commit", err, idem.Retry)
	})

	t.Run("in progress", func(t *testing.T) {
		entered, release := make(chan struct{}), make(chan struct{})
		slow := idemimpl.NewInbox(db.Pool, depositTable, func(ctx context.Context, tx pgx.Tx, msg deposit) (receipt, error) {
			close(entered)
			<-release
			return credit(ctx, tx, msg)
		}, idem.WithPessimisticClaim()) // the claim-first protocol holds the key while the handler runs
		msg := deposit{Account: "act-8", Ref: 1, Amount: 1}
		done := make(chan error)
		go func() {
			_, _, err := slow.Handle(ctx, msg)
			done <- err
		}()
		select {
		case <-entered:
		case err := <-done:
			t.Fatalf("the first delivery returned %v before its handler ran", err)
		}
		_, _, err := idemimpl.NewInbox(db.Pool, depositTable, credit, idem.WithClaimWait(50*time.Millisecond), idem.WithPessimisticClaim()).Handle(ctx, msg)
		close(release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if !errors.Is(err, idem.ErrInProgress) {
			t.Fatalf("got %v; want ErrInProgress", err)
		}
		check(t, "in progress", err, idem.Retry)
	})
}
