package idem_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemimpl"
	"github.com/idemgen/idemgen/idem/idemtest"
)

// tableFor is depositTable for another message type with the same key: what
// the generated code declares after the message type changed.
func tableFor[M any](key func(M) (string, int64)) idemimpl.Table[M] {
	t := depositTable
	return idemimpl.Table[M]{
		Consumer: t.Consumer, Name: t.Name, Columns: t.Columns, Retain: t.Retain,
		Key: func(msg M) ([]any, error) {
			account, ref := key(msg)
			if err := idemimpl.CheckString("Account", account); err != nil {
				return nil, err
			}
			return []any{account, ref}, nil
		},
	}
}

// depositV2 is deposit after a deploy that added fields.
type depositV2 struct {
	Account string            `json:"account"`
	Ref     int64             `json:"ref"`
	Amount  int64             `json:"amount"`
	Memo    string            `json:"memo"`
	Tags    []string          `json:"tags"`
	Meta    struct{ By int }  `json:"meta"`
	Extra   map[string]string `json:"extra"`
}

func v2Key(m depositV2) (string, int64) { return m.Account, m.Ref }

// notCalled is a handler that must not get past its first statement: a
// delivery of a processed key enters the handler, and the lookup sent with
// that statement stops it.
func notCalled[M any](t *testing.T) func(context.Context, pgx.Tx, M) (receipt, error) {
	return func(ctx context.Context, tx pgx.Tx, _ M) (receipt, error) {
		if _, err := tx.Exec(ctx, "SELECT 1"); err != nil {
			return receipt{}, err
		}
		t.Error("the handler ran past its first statement for a processed key")
		return receipt{}, nil
	}
}

// Item 12: a message type that gains a field left at zero keeps the
// fingerprint of the messages processed before; a field that changed in
// value is still ErrKeyReused.
func TestFingerprintSurvivesAddedZeroField(t *testing.T) {
	ctx := context.Background()
	t.Run("current scheme", func(t *testing.T) {
		db := idemtest.New(t, migrations)
		first := idemimpl.NewInbox(db.Pool, depositTable, credit)
		if _, o, err := first.Handle(ctx, deposit{Account: "acc-n", Ref: 1, Amount: 3}); err != nil || o != idem.Processed {
			t.Fatalf("first delivery: %v, %v", o, err)
		}
		var n int
		if err := db.Pool.QueryRow(ctx, `SELECT length(fingerprint) FROM idem_test_deposit`).Scan(&n); err != nil || n != 33 {
			t.Fatalf("stored fingerprint is %d bytes (%v); want 33, the scheme byte first", n, err)
		}
		grown := idemimpl.NewInbox(db.Pool, tableFor(v2Key), notCalled[depositV2](t))
		if r, o, err := grown.Handle(ctx, depositV2{Account: "acc-n", Ref: 1, Amount: 3}); err != nil || o != idem.Duplicate || r.Balance != 3 {
			t.Fatalf("a type with added zero fields: %+v, %v, %v; want Duplicate", r, o, err)
		}
		if _, o, err := grown.Handle(ctx, depositV2{Account: "acc-n", Ref: 1, Amount: 3, Tags: []string{"a"}}); !errors.Is(err, idem.ErrKeyReused) {
			t.Errorf("a new field set: %v, %v; want ErrKeyReused", o, err)
		}
		if _, o, err := grown.Handle(ctx, depositV2{Account: "acc-n", Ref: 1, Amount: 4}); !errors.Is(err, idem.ErrKeyReused) {
			t.Errorf("a field changed in value: %v, %v; want ErrKeyReused", o, err)
		}
	})
	t.Run("unknown scheme", func(t *testing.T) {
		db := idemtest.New(t, migrations)
		if _, err := db.Pool.Exec(ctx, `INSERT INTO idem_test_deposit (key_account, key_ref, fingerprint) VALUES ('acc-u', 1, '\x09' || sha256('x'))`); err != nil {
			t.Fatal(err)
		}
		in := idemimpl.NewInbox(db.Pool, depositTable, notCalled[deposit](t))
		_, _, err := in.Handle(ctx, deposit{Account: "acc-u", Ref: 1})
		if err == nil || errors.Is(err, idem.ErrKeyReused) || !strings.Contains(err.Error(), "scheme 9") {
			t.Errorf("a row of a newer scheme: %v; want an error naming the scheme, not ErrKeyReused", err)
		}
	})
}

// Item 12: a stored result that no longer decodes is ErrUndecodableResult,
// not an error retried forever.
func TestStoredResultOfAnotherShapeIsUndecodable(t *testing.T) {
	db := idemtest.New(t, migrations)
	ctx := context.Background()
	if _, _, err := idemimpl.NewInbox(db.Pool, depositTable, credit).Handle(ctx, deposit{Account: "acc-r", Ref: 1, Amount: 2}); err != nil {
		t.Fatal(err)
	}
	// After a deploy, the result's Balance is a string.
	type receiptV2 struct {
		Balance string `json:"balance"`
	}
	in := idemimpl.NewInbox(db.Pool, depositTable, func(ctx context.Context, tx pgx.Tx, _ deposit) (receiptV2, error) {
		if _, err := tx.Exec(ctx, "SELECT 1"); err != nil {
			return receiptV2{}, err
		}
		t.Error("the handler ran past its first statement for a processed key")
		return receiptV2{}, nil
	})
	_, o, err := in.Handle(ctx, deposit{Account: "acc-r", Ref: 1, Amount: 2})
	var typeErr *json.UnmarshalTypeError
	if !errors.Is(err, idem.ErrUndecodableResult) || !errors.As(err, &typeErr) || errors.Is(err, idem.ErrRetryable) || o != 0 {
		t.Fatalf("got %v, %v; want ErrUndecodableResult wrapping the json error, not retryable", o, err)
	}
}

type measured struct {
	Account string  `json:"account"`
	Ref     int64   `json:"ref"`
	Value   float64 `json:"value"`
}

type ratio struct {
	Value float64 `json:"value"`
}

// Item 13: NaN or Inf in a message or a result is ErrUnencodable, and
// nothing is committed.
func TestNaNAndInfAreUnencodable(t *testing.T) {
	db := idemtest.New(t, migrations)
	ctx := context.Background()
	table := tableFor(func(m measured) (string, int64) { return m.Account, m.Ref })
	for _, bad := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		calls := 0
		msgIn := idemimpl.NewInbox(db.Pool, table, func(context.Context, pgx.Tx, measured) (ratio, error) {
			calls++
			return ratio{}, nil
		})
		_, _, err := msgIn.Handle(ctx, measured{Account: "acc-f", Ref: 1, Value: bad})
		var unsupported *json.UnsupportedValueError
		if !errors.Is(err, idem.ErrUnencodable) || !errors.As(err, &unsupported) || errors.Is(err, idem.ErrRetryable) || calls != 0 {
			t.Errorf("message with %v: %v (handler ran %d times); want ErrUnencodable wrapping json's error, before the handler", bad, err, calls)
		}

		resIn := idemimpl.NewInbox(db.Pool, table, func(ctx context.Context, tx pgx.Tx, m measured) (ratio, error) {
			_, err := tx.Exec(ctx, `INSERT INTO accounts (id, balance) VALUES ($1, 1)`, m.Account)
			return ratio{Value: bad}, err
		})
		_, _, err = resIn.Handle(ctx, measured{Account: "acc-f", Ref: 2, Value: 1})
		if !errors.Is(err, idem.ErrUnencodable) || !errors.As(err, &unsupported) || errors.Is(err, idem.ErrRetryable) {
			t.Errorf("result with %v: %v; want ErrUnencodable wrapping json's error", bad, err)
		}
	}
	if n := inboxRows(t, db); n != 0 || balance(t, db, "acc-f") != 0 {
		t.Errorf("%d inbox rows, balance %d after unencodable deliveries; want nothing committed", n, balance(t, db, "acc-f"))
	}
}

// Item 14: options that would make every claim fail panic in NewInbox,
// naming the option, the value and the bound.
func TestOptionsOutOfRangePanicAtConstruction(t *testing.T) {
	db := idemtest.New(t, migrations)
	for _, c := range []struct {
		opt  idem.Option
		want []string
	}{
		{idem.WithClaimWait(720 * time.Hour), []string{"WithClaimWait(720h0m0s)", "596h31m23.647s", "2147483647ms", "test.deposit"}},
		{idem.WithIsolation("snapshot"), []string{`WithIsolation("snapshot")`, "serializable", "read committed"}},
	} {
		func() {
			defer func() {
				p := recover()
				msg, _ := p.(string)
				for _, w := range c.want {
					if !strings.Contains(msg, w) {
						t.Errorf("panic %v does not say %q", p, w)
					}
				}
			}()
			idemimpl.NewInbox(db.Pool, depositTable, credit, c.opt)
			t.Errorf("NewInbox accepted %v", c.want[0])
		}()
	}
	// The bound itself works: a claim with the longest lock_timeout.
	in := idemimpl.NewInbox(db.Pool, depositTable, credit, idem.WithClaimWait(2147483647*time.Millisecond), idem.WithIsolation(pgx.ReadCommitted))
	if _, o, err := in.Handle(context.Background(), deposit{Account: "acc-o", Ref: 1, Amount: 1}); err != nil || o != idem.Processed {
		t.Errorf("the longest claim wait: %v, %v; want Processed", o, err)
	}
}

// Item 15: with a pool smaller than the number of duplicates of a slow
// message, every duplicate still returns within the claim wait.
func TestDuplicatesWithSmallPoolReturnWithinClaimWait(t *testing.T) {
	db := idemtest.New(t, migrations)
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()

	const (
		n         = 8
		claimWait = 500 * time.Millisecond
		handler   = 3 * time.Second
		slack     = 300 * time.Millisecond
	)
	entered := make(chan struct{})
	var once sync.Once
	in := idemimpl.NewInbox(pool, depositTable, func(ctx context.Context, tx pgx.Tx, msg deposit) (receipt, error) {
		once.Do(func() { close(entered) })
		time.Sleep(handler)
		return credit(ctx, tx, msg)
	}, idem.WithClaimWait(claimWait), idem.WithPessimisticClaim()) // holds the key while the handler runs
	msg := deposit{Account: "acc-p", Ref: 1, Amount: 1}
	first := make(chan error)
	go func() {
		_, _, err := in.Handle(ctx, msg)
		first <- err
	}()
	<-entered

	took := make([]time.Duration, n)
	errs := make([]error, n)
	idemtest.AtOnce(n, func(i int) {
		began := time.Now()
		_, _, errs[i] = in.Handle(ctx, msg)
		took[i] = time.Since(began)
	})
	for i := range n {
		if !errors.Is(errs[i], idem.ErrInProgress) || took[i] > claimWait+slack {
			t.Errorf("duplicate %d: %v after %v; want ErrInProgress within the claim wait %v (+%v)", i, errs[i], took[i].Round(time.Millisecond), claimWait, slack)
		}
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if _, o, err := in.Handle(ctx, msg); err != nil || o != idem.Duplicate {
		t.Errorf("after the first delivery: %v, %v; want Duplicate", o, err)
	}
}

// Item 10: a handler that ends the transaction through SQL, then writes,
// never commits an effect twice, and its delivery fails saying what it did.
func TestHandlerEndingTheTransactionThroughSQL(t *testing.T) {
	write := func(ctx context.Context, tx pgx.Tx, msg deposit) {
		_, _ = tx.Exec(ctx, `INSERT INTO accounts (id, balance) VALUES ($1, 100)
			ON CONFLICT (id) DO UPDATE SET balance = accounts.balance + 100`, msg.Account)
	}
	for _, c := range []struct {
		name string
		end  func(ctx context.Context, tx pgx.Tx)
		want string
	}{
		{"Exec ROLLBACK", func(ctx context.Context, tx pgx.Tx) { _, _ = tx.Exec(ctx, "ROLLBACK") }, `statement "ROLLBACK" would roll the inbox's transaction back: it was not sent`},
		{"Exec abort", func(ctx context.Context, tx pgx.Tx) { _, _ = tx.Exec(ctx, "abort") }, `statement "abort" would roll`},
		{"Exec COMMIT", func(ctx context.Context, tx pgx.Tx) { _, _ = tx.Exec(ctx, "COMMIT") }, `statement "COMMIT" would commit the inbox's transaction: it was not sent`},
		{"Exec END", func(ctx context.Context, tx pgx.Tx) { _, _ = tx.Exec(ctx, "END") }, `statement "END" would commit`},
		{"Exec SELECT; COMMIT", func(ctx context.Context, tx pgx.Tx) { _, _ = tx.Exec(ctx, "SELECT 1; COMMIT") }, "hold a COMMIT, which would commit the inbox's transaction: none of them was sent"},
		{"Exec ROLLBACK; BEGIN", func(ctx context.Context, tx pgx.Tx) { _, _ = tx.Exec(ctx, "ROLLBACK; BEGIN") }, "hold a ROLLBACK"},
		{"Exec BEGIN", func(ctx context.Context, tx pgx.Tx) { _, _ = tx.Exec(ctx, "BEGIN") }, `statement "BEGIN" would begin a transaction`},
		{"Prepare COMMIT", func(ctx context.Context, tx pgx.Tx) {
			if _, err := tx.Prepare(ctx, "c", "COMMIT"); err == nil {
				_, _ = tx.Exec(ctx, "c")
			}
		}, `statement "COMMIT" would commit`},
		{"Query ROLLBACK", func(ctx context.Context, tx pgx.Tx) {
			rows, _ := tx.Query(ctx, "ROLLBACK")
			rows.Close()
		}, `statement "ROLLBACK" would roll`},
		{"QueryRow ROLLBACK", func(ctx context.Context, tx pgx.Tx) { _ = tx.QueryRow(ctx, "ROLLBACK").Scan() }, `statement "ROLLBACK" would roll`},
		{"SendBatch ROLLBACK", func(ctx context.Context, tx pgx.Tx) {
			b := &pgx.Batch{}
			b.Queue("SELECT 1")
			b.Queue("ROLLBACK")
			_ = tx.SendBatch(ctx, b).Close()
		}, `statement "ROLLBACK" would roll`},
		{"savepoint Exec ROLLBACK", func(ctx context.Context, tx pgx.Tx) {
			sp, _ := tx.Begin(ctx)
			_, _ = sp.Exec(ctx, "ROLLBACK")
		}, `statement "ROLLBACK" would roll`},
		{"ROLLBACK through tx.Conn()", func(ctx context.Context, tx pgx.Tx) { _, _ = tx.Conn().Exec(ctx, "ROLLBACK") }, "sent around the handler's Tx"},
		// The connection is in a transaction again, so no check on the
		// client sees it; the check queued before the COMMIT does.
		{"ROLLBACK; BEGIN through tx.Conn()", func(ctx context.Context, tx pgx.Tx) { _, _ = tx.Conn().Exec(ctx, "ROLLBACK; BEGIN") }, "in another transaction than the one that"},
	} {
		for _, protocol := range []string{"optimistic", "pessimistic"} {
			t.Run(protocol+"/"+c.name, func(t *testing.T) {
				db := idemtest.New(t, migrations)
				ctx := context.Background()
				var opts []idem.Option
				if protocol == "pessimistic" {
					opts = append(opts, idem.WithPessimisticClaim())
				}
				in := idemimpl.NewInbox(db.Pool, depositTable, idemimpl.NoResult(func(ctx context.Context, tx pgx.Tx, msg deposit) error {
					// A first statement: the optimistic delivery's transaction
					// begins with it.
					_, _ = tx.Exec(ctx, "SELECT 1")
					c.end(ctx, tx)
					write(ctx, tx, msg) // its error ignored, as a careless handler does
					return nil
				}), opts...)
				msg := deposit{Account: "acc-x", Ref: 1}
				var outcomes []string
				for range 3 {
					_, o, err := in.Handle(ctx, msg)
					switch {
					case err == nil:
						outcomes = append(outcomes, o.String())
					case strings.Contains(err.Error(), c.want):
						outcomes = append(outcomes, "refused")
					default:
						t.Errorf("error %v does not say %q", err, c.want)
					}
				}
				if got := balance(t, db, "acc-x"); got > 0 {
					t.Errorf("three deliveries (%v) committed the handler's write %d times; want none (the write came after the transaction ended)", outcomes, got/100)
				}
				if len(outcomes) > 0 && outcomes[0] != "refused" {
					t.Errorf("the first delivery was %s; want it refused", outcomes[0])
				}
				// The key is never answered as done for work that did not
				// finish: a handler that commits every time is refused every
				// time (its running row taken over and committed again).
				for i, o := range outcomes {
					if o == idem.Duplicate.String() {
						t.Errorf("delivery %d was a Duplicate (%v): the key's row was done although the handler never finished", i+1, outcomes)
					}
				}
				if s := db.Pool.Stat(); s.AcquiredConns() != 0 {
					t.Errorf("%d connections still acquired", s.AcquiredConns())
				}
				t.Log(fmt.Sprint(outcomes))
			})
		}
	}
}

// A handler without a result has its row born done (marking it done in the
// commit would cost an UPDATE a message), so a COMMIT it sends around its Tx
// (through tx.Conn(), which the Tx cannot refuse) commits the row done: the
// delivery fails saying so, the handler's later write is refused, and the
// redelivery is a Duplicate. This is the loss docs/errors.md describes; a
// COMMIT through the Tx itself is refused before it is sent
// (TestHandlerEndingTheTransactionThroughSQL) and loses nothing.
func TestCommitAroundTheTxOfAHandlerWithoutAResult(t *testing.T) {
	db := idemtest.New(t, migrations)
	ctx := context.Background()
	in := idemimpl.NewInbox(db.Pool, depositTable, idemimpl.NoResult(func(ctx context.Context, tx pgx.Tx, msg deposit) error {
		if _, err := tx.Conn().Exec(ctx, "COMMIT"); err != nil {
			return err
		}
		_, err := credit(ctx, tx, msg)
		return err
	}), idem.WithPessimisticClaim()) // its row is born done at the claim
	msg := deposit{Account: "acc-c", Ref: 1, Amount: 5}
	if _, _, err := in.Handle(ctx, msg); err == nil || !strings.Contains(err.Error(), "sent around the handler's Tx (through tx.Conn()) ended it") {
		t.Fatalf("the run that commits: %v; want it refused", err)
	}
	var status string
	if err := db.Pool.QueryRow(ctx, `SELECT status FROM idem_test_deposit WHERE key_account = 'acc-c'`).Scan(&status); err != nil || status != "done" {
		t.Fatalf("after the COMMIT the row is %q (%v); want done (born done)", status, err)
	}
	if _, o, err := in.Handle(ctx, msg); err != nil || o != idem.Duplicate {
		t.Errorf("the redelivery: %v, %v; want the documented Duplicate", o, err)
	}
	if got := balance(t, db, "acc-c"); got != 0 {
		t.Errorf("balance %d; want 0: the write after the COMMIT was refused", got)
	}
}

// A delivery whose context is cancelled at any moment has a known outcome:
// either it returns nil and its row is committed, or it returns an error and
// nothing is committed. A cancellation must never land inside the commit
// round trip, where it would leave a committed delivery reported as failed
// (a consumer stopping would then not ack it, and its redelivery would be a
// Duplicate).
func TestCancelledDeliveryHasAKnownOutcome(t *testing.T) {
	db := idemtest.New(t, migrations)
	in := idemimpl.NewInbox(db.Pool, depositTable, credit)
	const n = 300
	// How long a delivery takes here: the cancellations below spread over
	// it, so that they land in the claim, the handler and the commit round
	// trip on a quiet machine (about a millisecond) and on a loaded one
	// (several) alike.
	var took []time.Duration
	for i := range 20 {
		start := time.Now()
		if _, _, err := in.Handle(context.Background(), deposit{Account: "acc-warm", Ref: int64(i + 1), Amount: 1}); err != nil {
			t.Fatal(err)
		}
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	step := took[len(took)/2] * 3 / 2 / 40
	first := step
	var failedButCommitted, committed, failed int
	var blockCommitted, blockFailed int
	for i := range n {
		if i > 0 && i%40 == 0 {
			// The machine's load changes while the test runs (other
			// packages' tests run beside it): a block of 40 that saw only
			// one outcome cancelled too early or too late for this
			// moment, so the next block's window doubles or halves.
			switch {
			case blockCommitted == 0:
				step *= 2
			case blockFailed == 0:
				step /= 2
			}
			blockCommitted, blockFailed = 0, 0
		}
		ctx, cancel := context.WithCancel(context.Background())
		// Cancel somewhere inside the delivery: from at once to half as
		// long again as a median delivery.
		timer := time.AfterFunc(time.Duration(i%40)*step, cancel)
		msg := deposit{Account: "acc-cancel", Ref: int64(i + 1), Amount: 1}
		_, _, err := in.Handle(ctx, msg)
		timer.Stop()
		cancel()
		rows := count(t, db.Pool, `SELECT count(*) FROM idem_test_deposit WHERE key_account = $1 AND key_ref = $2`, msg.Account, msg.Ref)
		switch {
		case err != nil && rows > 0:
			failedButCommitted++
			t.Errorf("delivery %d returned %v, but its row is committed", i+1, err)
		case err != nil:
			failed++
			blockFailed++
		default:
			committed++
			blockCommitted++
		}
	}
	t.Logf("a delivery takes %v (median of 20); cancelled after 0 to %v, the window adapted to the load up to 0 to %v: %d committed, %d failed with nothing committed, %d failed but committed", took[len(took)/2], 39*first, 39*step, committed, failed, failedButCommitted)
	if failed == 0 || committed == 0 {
		t.Errorf("the cancellations did not spread over the delivery (%d committed, %d failed); the test shows nothing", committed, failed)
	}
}

// A handler with a result that ended its transaction with a COMMIT sent
// around its Tx (through tx.Conn(), which the Tx cannot refuse) left the
// key's row running (the row is marked done only in the wrapper's commit,
// with the result): the redelivery takes the key over and runs the handler
// in full, once, even with eight copies delivered at once and through
// HandleBatch, and the row counts the attempts.
func TestCommittedRunningRowIsTakenOver(t *testing.T) {
	for _, c := range []struct {
		name  string
		batch bool
	}{{"Handle", false}, {"HandleBatch", true}} {
		t.Run(c.name, func(t *testing.T) {
			db := idemtest.New(t, migrations)
			ctx := context.Background()
			var runs, commits atomic.Int32
			handler := func(ctx context.Context, tx pgx.Tx, msg deposit) (receipt, error) {
				if msg.Ref != 1 {
					return credit(ctx, tx, msg)
				}
				runs.Add(1)
				if commits.Add(1) == 1 {
					_, _ = tx.Conn().Exec(ctx, "COMMIT") // the first run only
				}
				return credit(ctx, tx, msg)
			}
			// The claim-first protocol commits the running row with the
			// handler's COMMIT.
			in := idemimpl.NewInbox(db.Pool, depositTable, handler, idem.WithPessimisticClaim())
			msg := deposit{Account: "acc-t", Ref: 1, Amount: 7}
			if _, _, err := in.Handle(ctx, msg); err == nil || !strings.Contains(err.Error(), "sent around the handler's Tx (through tx.Conn()) ended it") {
				t.Fatalf("the run that commits: %v; want the delivery refused", err)
			}
			var status string
			var attempts int
			if err := db.Pool.QueryRow(ctx, `SELECT status, attempts FROM idem_test_deposit WHERE key_account = 'acc-t'`).Scan(&status, &attempts); err != nil || status != "running" {
				t.Fatalf("after the COMMIT the row is %q (%v); want running", status, err)
			}

			const copies = 8
			outcomes := make([]idem.Outcome, copies)
			errs := make([]error, copies)
			var wg sync.WaitGroup
			for i := range copies {
				wg.Go(func() {
					if c.batch {
						rs, err := in.HandleBatch(ctx, []deposit{msg, {Account: "acc-o", Ref: int64(100 + i), Amount: 1}})
						if err == nil {
							outcomes[i], err = rs[0].Outcome, rs[0].Err
						}
						errs[i] = err
						return
					}
					_, outcomes[i], errs[i] = in.Handle(ctx, msg)
				})
			}
			wg.Wait()
			processed := 0
			for i := range copies {
				switch {
				case errs[i] == nil && outcomes[i] == idem.Processed:
					processed++
				case errs[i] == nil && outcomes[i] == idem.Duplicate, errors.Is(errs[i], idem.ErrInProgress):
				default:
					t.Errorf("copy %d: %v, %v; want Processed once, else Duplicate or ErrInProgress", i, outcomes[i], errs[i])
				}
			}
			if processed != 1 {
				t.Errorf("%d copies processed the taken-over key; want 1 (outcomes %v, errors %v)", processed, outcomes, errs)
			}
			if r, o, err := in.Handle(ctx, msg); err != nil || o != idem.Duplicate || r.Balance != 7 {
				t.Errorf("after the take-over: %+v, %v, %v; want Duplicate with balance 7", r, o, err)
			}
			if got := balance(t, db, "acc-t"); got != 7 {
				t.Errorf("balance %d; want 7: the handler's write applied once, by the run that took the key over", got)
			}
			if err := db.Pool.QueryRow(ctx, `SELECT status, attempts FROM idem_test_deposit WHERE key_account = 'acc-t' AND key_ref = 1`).Scan(&status, &attempts); err != nil || status != "done" || attempts != 2 {
				t.Errorf("the row is %q after %d attempts (%v); want done after 2", status, attempts, err)
			}
			if n := runs.Load(); n != 2 {
				t.Errorf("the handler ran %d times for the key; want 2: the run that committed and the one that took the key over", n)
			}
		})
	}
}
