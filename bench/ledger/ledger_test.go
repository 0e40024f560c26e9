package ledger_test

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/bench/ledger"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemtest"
)

// accounts is how many accounts newDB creates, ids 1 to accounts.
const accounts = 1000

func newDB(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	db := idemtest.New(tb, ledger.Migrations())
	if _, err := db.Pool.Exec(context.Background(),
		`INSERT INTO accounts (id) SELECT generate_series(1, $1::bigint)`, accounts); err != nil {
		tb.Fatal(err)
	}
	return db.Pool
}

func balance(t *testing.T, pool *pgxpool.Pool, account int64) int64 {
	t.Helper()
	var b int64
	if err := pool.QueryRow(context.Background(), `SELECT balance FROM accounts WHERE id = $1`, account).Scan(&b); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestHandWrittenAgreesWithGenerated checks that the benchmark compares like
// with like: the hand-written consumer and the generated wrapper process a
// message once, give a redelivery the stored result, and refuse a reused id.
func TestHandWrittenAgreesWithGenerated(t *testing.T) {
	ctx := context.Background()
	pool := newDB(t)
	hand := ledger.NewHandWritten(pool)
	gen := ledger.NewPostIdem(pool)

	first := ledger.Deposit{MessageID: "m-1", Account: 7, Amount: 5}
	reused := ledger.Deposit{MessageID: "m-1", Account: 7, Amount: 6}
	want := ledger.Posted{Account: 7, Amount: 5}

	for i := range 2 {
		got, dup, err := hand.Handle(ctx, first)
		if err != nil || dup != (i == 1) || got != want {
			t.Fatalf("hand-written delivery %d: %+v, duplicate %v, %v", i+1, got, dup, err)
		}
	}
	if _, _, err := hand.Handle(ctx, reused); !errors.Is(err, ledger.ErrKeyReused) {
		t.Fatalf("hand-written reused id: %v, want ErrKeyReused", err)
	}
	for i, outcome := range []idem.Outcome{idem.Processed, idem.Duplicate} {
		got, o, err := gen.Handle(ctx, first)
		if err != nil || o != outcome || got != want {
			t.Fatalf("generated delivery %d: %+v, %v, %v", i+1, got, o, err)
		}
	}
	if _, _, err := gen.Handle(ctx, reused); !errors.Is(err, idem.ErrKeyReused) {
		t.Fatalf("generated reused id: %v, want ErrKeyReused", err)
	}
	if b := balance(t, pool, 7); b != 10 {
		t.Fatalf("balance %d, want 10: each consumer credits once", b)
	}
	if _, err := ledger.Apply(ctx, pool, ledger.Deposit{Account: accounts + 1, Amount: 1}); !errors.Is(err, ledger.ErrUnknownAccount) {
		t.Fatalf("unknown account: %v", err)
	}
}

// The benchmarks deliver messages one at a time against the test database;
// run them with -benchmem to see what each way of delivering allocates per
// message (go run ./bench reports them).

func deposits(n int, prefix string) []ledger.Deposit {
	msgs := make([]ledger.Deposit, n)
	for i := range msgs {
		msgs[i] = ledger.Deposit{MessageID: prefix + strconv.Itoa(i), Account: int64(i%accounts) + 1, Amount: 1}
	}
	return msgs
}

func BenchmarkBare(b *testing.B) {
	ctx := context.Background()
	pool := newDB(b)
	msgs := deposits(b.N, "bare-")
	b.ResetTimer()
	for i := range b.N {
		if _, err := ledger.Apply(ctx, pool, msgs[i]); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkHandWritten(b *testing.B) {
	ctx := context.Background()
	hand := ledger.NewHandWritten(newDB(b))
	msgs := deposits(b.N, "hand-")
	b.ResetTimer()
	for i := range b.N {
		if _, dup, err := hand.Handle(ctx, msgs[i]); err != nil || dup {
			b.Fatal(dup, err)
		}
	}
}

func BenchmarkGenerated(b *testing.B) {
	ctx := context.Background()
	gen := ledger.NewPostIdem(newDB(b))
	msgs := deposits(b.N, "gen-")
	b.ResetTimer()
	for i := range b.N {
		if _, o, err := gen.Handle(ctx, msgs[i]); err != nil || o != idem.Processed {
			b.Fatal(o, err)
		}
	}
}

func BenchmarkGeneratedDuplicate(b *testing.B) {
	ctx := context.Background()
	gen := ledger.NewPostIdem(newDB(b))
	msgs := deposits(100, "dup-")
	for _, m := range msgs {
		if _, _, err := gen.Handle(ctx, m); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := range b.N {
		if _, o, err := gen.Handle(ctx, msgs[i%len(msgs)]); err != nil || o != idem.Duplicate {
			b.Fatal(o, err)
		}
	}
}

// batchSize is the size of the batches of the HandleBatch benchmarks.
const batchSize = 100

func BenchmarkHandleBatch(b *testing.B) {
	ctx := context.Background()
	gen := ledger.NewPostIdem(newDB(b))
	msgs := deposits(b.N*batchSize, "batch-")
	b.ResetTimer()
	for i := range b.N {
		results, err := gen.HandleBatch(ctx, msgs[i*batchSize:(i+1)*batchSize])
		if err != nil || results[0].Outcome != idem.Processed {
			b.Fatal(results[0], err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batchSize), "ns/msg")
}

func BenchmarkHandleBatchDuplicate(b *testing.B) {
	ctx := context.Background()
	gen := ledger.NewPostIdem(newDB(b))
	msgs := deposits(batchSize, "batchdup-")
	if _, err := gen.HandleBatch(ctx, msgs); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		results, err := gen.HandleBatch(ctx, msgs)
		if err != nil || results[0].Outcome != idem.Duplicate {
			b.Fatal(results[0], err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batchSize), "ns/msg")
}
