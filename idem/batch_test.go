package idem_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemimpl"
	"github.com/idemgen/idemgen/idem/idemtest"
)

// txRecorder is a credit handler that records the transaction id of each
// call, and fails for the refs in fail.
type txRecorder struct {
	mu    sync.Mutex
	txids []int64
	fail  map[int64]bool
}

func (r *txRecorder) handle(ctx context.Context, tx pgx.Tx, msg deposit) (receipt, error) {
	var id int64
	if err := tx.QueryRow(ctx, `SELECT txid_current()`).Scan(&id); err != nil {
		return receipt{}, err
	}
	r.mu.Lock()
	r.txids = append(r.txids, id)
	r.mu.Unlock()
	if r.fail[msg.Ref] {
		return receipt{}, fmt.Errorf("ref %d refused", msg.Ref)
	}
	return credit(ctx, tx, msg)
}

func (r *txRecorder) transactions() (calls, distinct int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := map[int64]bool{}
	for _, id := range r.txids {
		seen[id] = true
	}
	return len(r.txids), len(seen)
}

func TestHandleBatchOneTransaction(t *testing.T) {
	db := idemtest.New(t, migrations)
	ctx := context.Background()
	rec := &txRecorder{}
	inbox := idemimpl.NewInbox(db.Pool, depositTable, rec.handle)

	// b/1 is processed before the batch.
	if _, o, err := inbox.Handle(ctx, deposit{Account: "b", Ref: 1, Amount: 7}); err != nil || o != idem.Processed {
		t.Fatalf("Handle before the batch: %v, %v", o, err)
	}
	rec.txids = nil

	msgs := []deposit{
		{Account: "a", Ref: 1, Amount: 10}, // 0 processed
		{Account: "a", Ref: 2, Amount: 20}, // 1 processed
		{Account: "a", Ref: 1, Amount: 10}, // 2 in-batch duplicate of 0
		{Account: "a", Ref: 2, Amount: 99}, // 3 the key of 1 reused
		{Account: "", Ref: 3, Amount: 1},   // 4 invalid key
		{Account: "b", Ref: 1, Amount: 7},  // 5 processed before: duplicate
		{Account: "b", Ref: 1, Amount: 8},  // 6 processed before, another payload... but an in-batch reuse of 5
		{Account: "c", Ref: 9, Amount: 3},  // 7 processed
	}
	results, err := inbox.HandleBatch(ctx, msgs)
	if err != nil {
		t.Fatalf("HandleBatch: %v", err)
	}
	want := []struct {
		o   idem.Outcome
		err error
	}{{idem.Processed, nil}, {idem.Processed, nil}, {idem.Duplicate, nil}, {0, idem.ErrKeyReused},
		{0, idem.ErrInvalidKey}, {idem.Duplicate, nil}, {0, idem.ErrKeyReused}, {idem.Processed, nil}}
	for i, w := range want {
		r := results[i]
		if r.Outcome != w.o || (w.err == nil) != (r.Err == nil) || (w.err != nil && !errors.Is(r.Err, w.err)) {
			t.Errorf("message %d %+v: %v, %v; want %v, %v", i, msgs[i], r.Outcome, r.Err, w.o, w.err)
		}
	}
	if results[2].Value != results[0].Value {
		t.Errorf("the in-batch duplicate got %+v, the first %+v", results[2].Value, results[0].Value)
	}
	if results[5].Value.Balance != 7 {
		t.Errorf("the earlier key's duplicate got %+v, want its stored result (balance 7)", results[5].Value)
	}
	calls, txs := rec.transactions()
	t.Logf("8 messages: %d handler calls in %d transaction(s)", calls, txs)
	if calls != 3 || txs != 1 {
		t.Errorf("%d handler calls in %d transactions; want 3 in 1", calls, txs)
	}
	if got := inboxRows(t, db); got != 4 {
		t.Errorf("%d inbox rows, want 4", got)
	}
	if a, c := balance(t, db, "a"), balance(t, db, "c"); a != 30 || c != 3 {
		t.Errorf("balances a=%d c=%d, want 30 and 3", a, c)
	}

	// The whole batch again: all duplicates, from one lookup.
	rec.txids = nil
	again, err := inbox.HandleBatch(ctx, []deposit{msgs[0], msgs[1], msgs[7]})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range again {
		if r.Outcome != idem.Duplicate || r.Err != nil {
			t.Errorf("redelivered message %d: %v, %v; want Duplicate", i, r.Outcome, r.Err)
		}
	}
	if again[1].Value != results[1].Value {
		t.Errorf("redelivered result %+v, first %+v", again[1].Value, results[1].Value)
	}
	if calls, _ := rec.transactions(); calls != 0 {
		t.Errorf("the handler ran %d times for a redelivered batch", calls)
	}
}

func TestHandleBatchFailingHandlerFallsBack(t *testing.T) {
	db := idemtest.New(t, migrations)
	ctx := context.Background()
	rec := &txRecorder{fail: map[int64]bool{2: true}}
	inbox := idemimpl.NewInbox(db.Pool, depositTable, rec.handle)
	msgs := []deposit{{Account: "a", Ref: 1, Amount: 1}, {Account: "a", Ref: 2, Amount: 2}, {Account: "a", Ref: 3, Amount: 4}, {Account: "a", Ref: 2, Amount: 2}}
	results, err := inbox.HandleBatch(ctx, msgs)
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{0, 2} {
		if results[i].Outcome != idem.Processed || results[i].Err != nil {
			t.Errorf("message %d: %v, %v; want Processed", i, results[i].Outcome, results[i].Err)
		}
	}
	for _, i := range []int{1, 3} {
		if results[i].Err == nil || idem.ActionFor(results[i].Err) == idem.Ack {
			t.Errorf("message %d (the failing handler's key): %v, %v; want its error", i, results[i].Outcome, results[i].Err)
		}
	}
	calls, txs := rec.transactions()
	t.Logf("a failing handler: %d handler calls in %d transactions (the batch, then one each)", calls, txs)
	// The batch ran 0 and 1 (failing) and rolled back; then 0, 1 and 2 one
	// transaction each.
	if calls != 5 || txs != 4 {
		t.Errorf("%d calls in %d transactions, want 5 in 4", calls, txs)
	}
	if got := balance(t, db, "a"); got != 5 {
		t.Errorf("balance %d, want 5 (1 and 3 applied once, 2 not at all)", got)
	}
	if got := inboxRows(t, db); got != 2 {
		t.Errorf("%d inbox rows, want 2", got)
	}
}

func TestHandleBatchCap(t *testing.T) {
	db := idemtest.New(t, migrations)
	rec := &txRecorder{}
	inbox := idemimpl.NewInbox(db.Pool, depositTable, rec.handle, idem.WithBatchCap(3))
	var msgs []deposit
	for i := range 7 {
		msgs = append(msgs, deposit{Account: "cap", Ref: int64(i + 1), Amount: 1})
	}
	results, err := inbox.HandleBatch(context.Background(), msgs)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range results {
		if r.Outcome != idem.Processed || r.Err != nil {
			t.Errorf("message %d: %v, %v", i, r.Outcome, r.Err)
		}
	}
	calls, txs := rec.transactions()
	t.Logf("7 messages at a cap of 3: %d calls in %d transactions", calls, txs)
	if calls != 7 || txs != 3 {
		t.Errorf("%d calls in %d transactions, want 7 in 3 (3+3+1)", calls, txs)
	}
}

// TestHandleBatchNullableKey: a table with a nullable key part batches in
// one transaction too.
func TestHandleBatchNullableKey(t *testing.T) {
	db := idemtest.New(t, migrations)
	rec := &txRecorder{}
	table := depositTable
	table.Columns = slices.Clone(table.Columns)
	table.Columns[1].Nullable = true
	inbox := idemimpl.NewInbox(db.Pool, table, rec.handle)
	msgs := []deposit{{Account: "s", Ref: 1, Amount: 1}, {Account: "s", Ref: 2, Amount: 1}, {Account: "s", Ref: 1, Amount: 1}}
	results, err := inbox.HandleBatch(context.Background(), msgs)
	if err != nil {
		t.Fatal(err)
	}
	if results[0].Outcome != idem.Processed || results[1].Outcome != idem.Processed || results[2].Outcome != idem.Duplicate {
		t.Errorf("outcomes %v %v %v; want Processed Processed Duplicate", results[0].Outcome, results[1].Outcome, results[2].Outcome)
	}
	if calls, txs := rec.transactions(); calls != 2 || txs != 1 {
		t.Errorf("%d calls in %d transactions; want 2 in 1", calls, txs)
	}
}

// setRecorder is a set-based credit handler that records what each call
// was given and in which transaction, and fails a call given a ref of fail.
type setRecorder struct {
	txRecorder
	given [][]int64 // the refs of each call
	extra int       // results returned beyond one a message
}

func (r *setRecorder) handle(ctx context.Context, tx pgx.Tx, msgs []deposit) ([]receipt, error) {
	var id int64
	if err := tx.QueryRow(ctx, `SELECT txid_current()`).Scan(&id); err != nil {
		return nil, err
	}
	refs := make([]int64, len(msgs))
	for i, m := range msgs {
		refs[i] = m.Ref
	}
	r.mu.Lock()
	r.txids, r.given = append(r.txids, id), append(r.given, refs)
	r.mu.Unlock()
	out := make([]receipt, 0, len(msgs)+r.extra)
	for _, m := range msgs {
		if r.fail[m.Ref] {
			return nil, fmt.Errorf("ref %d refused", m.Ref)
		}
		rc, err := credit(ctx, tx, m)
		if err != nil {
			return nil, err
		}
		out = append(out, rc)
	}
	for range r.extra {
		out = append(out, receipt{})
	}
	return out, nil
}

// TestHandleBatchSetBased: a set-based handler is called once a batch, in
// its one transaction, with the messages whose keys the claim won, in
// input order; Handle gives it a batch of one; a failing message sends the
// batch one message at a time, each alone; a wrong number of results is an
// error naming the handler and both lengths, nothing committed.
func TestHandleBatchSetBased(t *testing.T) {
	db := idemtest.New(t, migrations)
	ctx := context.Background()
	rec := &setRecorder{}
	table := depositTable
	table.Handler = "creditAll"
	inbox := idemimpl.NewSetInbox(db.Pool, table, rec.handle)

	if _, o, err := inbox.Handle(ctx, deposit{Account: "set", Ref: 1, Amount: 1}); err != nil || o != idem.Processed {
		t.Fatalf("Handle: %v, %v", o, err)
	}
	if !slices.Equal(rec.given[0], []int64{1}) {
		t.Fatalf("Handle gave the handler %v; want a batch of one, [1]", rec.given)
	}
	rec.given, rec.txids = nil, nil
	msgs := []deposit{
		{Account: "set", Ref: 3, Amount: 3}, // processed
		{Account: "set", Ref: 1, Amount: 1}, // processed before: Duplicate
		{Account: "set", Ref: 2, Amount: 2}, // processed
		{Account: "set", Ref: 3, Amount: 3}, // in-batch duplicate
		{Account: "set", Ref: 2, Amount: 9}, // in-batch reuse
		{Account: "", Ref: 4, Amount: 1},    // invalid
		{Account: "set", Ref: 5, Amount: 5}, // processed
	}
	results, err := inbox.HandleBatch(ctx, msgs)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.given) != 1 || !slices.Equal(rec.given[0], []int64{3, 2, 5}) {
		t.Errorf("the handler was given %v; want one call with the won keys in input order, [[3 2 5]]", rec.given)
	}
	want := []struct {
		o   idem.Outcome
		err error
	}{{idem.Processed, nil}, {idem.Duplicate, nil}, {idem.Processed, nil}, {idem.Duplicate, nil},
		{0, idem.ErrKeyReused}, {0, idem.ErrInvalidKey}, {idem.Processed, nil}}
	for i, w := range want {
		r := results[i]
		if r.Outcome != w.o || (w.err == nil) != (r.Err == nil) || (w.err != nil && !errors.Is(r.Err, w.err)) {
			t.Errorf("message %d %+v: %v, %v; want %v, %v", i, msgs[i], r.Outcome, r.Err, w.o, w.err)
		}
	}
	if results[6].Value.Balance != 11 || results[3].Value != results[0].Value {
		t.Errorf("results %+v; want the balance after each message in input order, and the in-batch duplicate's equal to the first", results)
	}

	// A failing message: the batch rolls back, then each message alone.
	rec.given, rec.fail = nil, map[int64]bool{7: true}
	results, err = inbox.HandleBatch(ctx, []deposit{{Account: "set", Ref: 6, Amount: 1}, {Account: "set", Ref: 7, Amount: 1}, {Account: "set", Ref: 8, Amount: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.EqualFunc(rec.given, [][]int64{{6, 7, 8}, {6}, {7}, {8}}, slices.Equal) {
		t.Errorf("the handler was given %v; want the batch, then each message alone", rec.given)
	}
	if results[0].Outcome != idem.Processed || results[1].Err == nil || results[2].Outcome != idem.Processed {
		t.Errorf("results %+v; want Processed, the failure, Processed", results)
	}

	// One result too many.
	rec.given, rec.fail, rec.extra = nil, nil, 1
	before := inboxRows(t, db)
	results, _ = inbox.HandleBatch(ctx, []deposit{{Account: "set", Ref: 9, Amount: 1}, {Account: "set", Ref: 10, Amount: 1}})
	for i, r := range results {
		if r.Err == nil || !strings.Contains(r.Err.Error(), "the set-based handler creditAll returned 2 results for 1 message") {
			t.Errorf("message %d of a handler with one result too many: %v, %v; want the error naming the handler and both lengths", i, r.Outcome, r.Err)
		}
	}
	if len(rec.given) != 3 {
		t.Errorf("the handler was given %v; want the batch, then each message alone", rec.given)
	}
	if got := inboxRows(t, db); got != before {
		t.Errorf("%d inbox rows after the failed batch, %d before; want nothing committed", got, before)
	}
}

// TestHandleBatchSetBasedPublishing: a set-based handler publishes through
// out.For(i), and each outgoing message gets the id a handler of msgs[i]
// alone mints; the run's Outbox refuses Publish.
func TestHandleBatchSetBasedPublishing(t *testing.T) {
	db := orderDB(t)
	ctx := context.Background()
	var direct error
	in := idemimpl.NewPublishingSetInbox(db.Pool, orderTable, func(ctx context.Context, tx pgx.Tx, out *idem.Outbox, msgs []order) ([]int, error) {
		direct = out.Publish("test.placed", "refused")
		n := make([]int, len(msgs))
		for i, m := range msgs {
			var err error
			if n[i], err = placeOrder(ctx, tx, out.For(i), m); err != nil {
				return nil, err
			}
		}
		return n, nil
	})
	msgs := []order{{Shop: "s", Number: 1, Publish: 2}, {Shop: "s", Number: 2, Publish: 0}, {Shop: "s", Number: 3, Publish: 1}}
	results, err := in.HandleBatch(ctx, msgs)
	if err != nil {
		t.Fatal(err)
	}
	if direct == nil || !strings.Contains(direct.Error(), "out.For(i)") {
		t.Errorf("Publish on the run's Outbox: %v; want an error pointing to out.For(i)", direct)
	}
	for i, r := range results {
		if r.Outcome != idem.Processed || r.Err != nil || r.Value != msgs[i].Publish {
			t.Errorf("message %d: %v, %v, %v", i, r.Value, r.Outcome, r.Err)
		}
	}
	rows := outboxRows(t, db.Pool)
	want := []string{
		idem.OutgoingMessageID("test.order", []any{"s", int64(1)}, 0),
		idem.OutgoingMessageID("test.order", []any{"s", int64(1)}, 1),
		idem.OutgoingMessageID("test.order", []any{"s", int64(3)}, 0),
	}
	if len(rows) != len(want) {
		t.Fatalf("%d outbox rows, want %d", len(rows), len(want))
	}
	for i, r := range rows {
		if r.ID != want[i] {
			t.Errorf("outbox row %d: id %s; want %s (the id of msgs[i]'s key)", i, r.ID, want[i])
		}
	}
}

// Concurrent batches with overlapping keys, at each isolation level: every
// key's effect is applied once, and every message is Processed or Duplicate.
func TestHandleBatchConcurrentOverlap(t *testing.T) {
	for _, iso := range []pgx.TxIsoLevel{"", pgx.RepeatableRead, pgx.Serializable} {
		t.Run("isolation="+string(iso), func(t *testing.T) {
			db := idemtest.New(t, migrations)
			ctx := context.Background()
			const workers, keys = 8, 40
			idemtest.Warm(t, db.Pool, workers)
			var calls atomic.Int64
			var opts []idem.Option
			if iso != "" {
				opts = append(opts, idem.WithIsolation(iso))
			}
			inbox := idemimpl.NewInbox(db.Pool, depositTable, func(ctx context.Context, tx pgx.Tx, msg deposit) (receipt, error) {
				calls.Add(1)
				return credit(ctx, tx, msg)
			}, opts...)
			var processed, duplicate, retried atomic.Int64
			idemtest.AtOnce(workers, func(w int) {
				// Worker w delivers keys w*5 .. w*5+19: each key reaches up to 4 workers,
				// in a different order per worker.
				var msgs []deposit
				for k := range 20 {
					ref := int64((w*5+k)%keys + 1)
					if w%2 == 1 {
						ref = int64((w*5+19-k)%keys + 1)
					}
					msgs = append(msgs, deposit{Account: "acc", Ref: ref, Amount: 1})
				}
				// Like a broker, redeliver what was nacked for a retry (a
				// serialization failure on the hot balance row under
				// REPEATABLE READ and SERIALIZABLE, a claim that could not
				// wait) until every message is acked.
				for round := 0; len(msgs) > 0; round++ {
					if round == 50 {
						t.Errorf("worker %d: %d messages still nacked after 50 rounds", w, len(msgs))
						return
					}
					results, err := inbox.HandleBatch(ctx, msgs)
					if err != nil {
						t.Errorf("worker %d: %v", w, err)
						return
					}
					var again []deposit
					for i, r := range results {
						switch {
						case r.Err == nil && r.Outcome == idem.Processed:
							processed.Add(1)
						case r.Err == nil && r.Outcome == idem.Duplicate:
							duplicate.Add(1)
						case idem.ActionFor(r.Err) == idem.Retry:
							retried.Add(1)
							again = append(again, msgs[i])
						default:
							t.Errorf("worker %d: %v, %v", w, r.Outcome, r.Err)
						}
					}
					msgs = again
				}
			})
			applied := count(t, db.Pool, `SELECT count(*) FROM postings`)
			t.Logf("%d workers x 20 messages over %d keys: %d Processed, %d Duplicate, %d nacked for a retry; %d handler calls; %d postings",
				workers, keys, processed.Load(), duplicate.Load(), retried.Load(), calls.Load(), applied)
			if int(processed.Load()) != applied || applied != keys {
				t.Errorf("%d Processed, %d postings; want %d of each (one effect per key)", processed.Load(), applied, keys)
			}
			if got := balance(t, db, "acc"); got != keys {
				t.Errorf("balance %d, want %d", got, keys)
			}
		})
	}
}

func TestHandleBatchPublishing(t *testing.T) {
	db := orderDB(t)
	ctx := context.Background()
	table := orderTable
	in := idemimpl.NewPublishingInbox(db.Pool, table, placeOrder)
	msgs := []order{{Shop: "s", Number: 1, Publish: 2}, {Shop: "s", Number: 2, Publish: 0}, {Shop: "s", Number: 3, Publish: 1}}
	results, err := in.HandleBatch(ctx, msgs)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range results {
		if r.Outcome != idem.Processed || r.Err != nil || r.Value != msgs[i].Publish {
			t.Errorf("message %d: %v, %v, %v", i, r.Value, r.Outcome, r.Err)
		}
	}
	rows := outboxRows(t, db.Pool)
	if len(rows) != 3 {
		t.Fatalf("%d outbox rows, want 3", len(rows))
	}
	want := []string{
		idem.OutgoingMessageID("test.order", []any{"s", int64(1)}, 0),
		idem.OutgoingMessageID("test.order", []any{"s", int64(1)}, 1),
		idem.OutgoingMessageID("test.order", []any{"s", int64(3)}, 0),
	}
	for i, r := range rows {
		if r.ID != want[i] || r.Consumer != "test.order" {
			t.Errorf("outbox row %d: id %s consumer %s; want %s (the ids Handle mints)", i, r.ID, r.Consumer, want[i])
		}
	}
	if rows[2].Key != `Shop="s",Number=3` {
		t.Errorf("outbox row 2 key %q", rows[2].Key)
	}
}

// TestHandleBatchInProgressRetryAfter: a batch one of whose keys another
// delivery holds returns, for it, ErrInProgress after the claim wait, with
// RetryAfter the claim wait; the batch's other message is processed. The
// held key sorts first in the batch's claim, and last: the claim's bound
// on its wait holds for every key it inserts, not only up to the first.
func TestHandleBatchInProgressRetryAfter(t *testing.T) {
	for _, heldAccount := range []string{"acc-batch-a-held", "acc-batch-z-held"} {
		t.Run(heldAccount, func(t *testing.T) {
			db := idemtest.New(t, migrations)
			ctx := context.Background()
			entered, release := make(chan struct{}), make(chan struct{})
			slow := idemimpl.NewInbox(db.Pool, depositTable, func(ctx context.Context, tx pgx.Tx, msg deposit) (receipt, error) {
				close(entered)
				<-release
				return credit(ctx, tx, msg)
			}, idem.WithPessimisticClaim()) // holds the key while the handler runs
			held := deposit{Account: heldAccount, Ref: 1, Amount: 4}
			done := make(chan error, 1)
			go func() { _, _, err := slow.Handle(ctx, held); done <- err }()
			<-entered
			const wait = 200 * time.Millisecond
			in := idemimpl.NewInbox(db.Pool, depositTable, credit, idem.WithClaimWait(wait), idem.WithPessimisticClaim())
			start := time.Now()
			results, err := in.HandleBatch(ctx, []deposit{held, {Account: "acc-batch-m-free", Ref: 1, Amount: 5}})
			took := time.Since(start)
			close(release)
			if err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			after, ok := idem.RetryAfter(results[0].Err)
			t.Logf("batch with a held key: %v (RetryAfter %v, %v) after %v; the other: %v %v", results[0].Err, after, ok, took.Round(time.Millisecond), results[1].Outcome, results[1].Err)
			if !errors.Is(results[0].Err, idem.ErrInProgress) || !ok || after != wait {
				t.Errorf("the held key: %v, RetryAfter %v %v; want ErrInProgress with RetryAfter the claim wait %v", results[0].Err, after, ok, wait)
			}
			if results[1].Err != nil || results[1].Outcome != idem.Processed {
				t.Errorf("the free key: %v %v; want Processed", results[1].Outcome, results[1].Err)
			}
			if took > 10*wait {
				t.Errorf("the batch took %v with a claim wait of %v", took, wait)
			}
		})
	}
	if _, ok := idem.RetryAfter(errors.New("other")); ok {
		t.Error("RetryAfter of another error reports ok")
	}
}
