package idem_test

import (
	"context"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemimpl"
	"github.com/idemgen/idemgen/idem/idemtest"
	"github.com/idemgen/idemgen/idem/internal/obs"
)

// benchProviders are the two providers the benchmarks compare: the global
// one as an application that sets none has it (it records nothing), and an
// SDK provider with a ManualReader (which aggregates every measurement).
func benchProviders(b *testing.B) map[string][]idem.Option {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	b.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	// The default logger level (Info) leaves processed and duplicate records
	// out, as in production; the handler discards what it is given.
	logger := slog.New(slog.NewTextHandler(discard{}, nil))
	return map[string][]idem.Option{
		"noop": {idem.WithLogger(logger)},
		"sdk":  {idem.WithLogger(logger), idem.WithMeterProvider(mp)},
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// BenchmarkHandleObservability measures Handle of the tx inbox against
// PostgreSQL with the global (no-op) MeterProvider and with an SDK provider,
// in pairs: each iteration delivers once through an inbox on each provider,
// in alternating order, so that the load of a shared machine weighs on both
// alike. It reports noop-ns/op, sdk-ns/op and their ratio sdk/noop, for a
// Duplicate (one round trip: the cheapest delivery, where the
// instrumentation weighs most) and a Processed delivery (a fresh key: claim,
// handler, commit). go test -run '^$' -bench HandleObservability ./idem
func BenchmarkHandleObservability(b *testing.B) {
	db := idemtest.New(b, migrations)
	ctx := context.Background()
	providers := benchProviders(b)
	handler := func(ctx context.Context, tx pgx.Tx, msg deposit) (receipt, error) { return receipt{Note: "ok"}, nil }
	inboxes := [2]*idemimpl.Inbox[deposit, receipt]{
		idemimpl.NewInbox(db.Pool, depositTable, handler, providers["noop"]...),
		idemimpl.NewInbox(db.Pool, depositTable, handler, providers["sdk"]...),
	}
	run := 0
	for _, kind := range []string{"duplicate", "processed"} {
		b.Run(kind, func(b *testing.B) {
			run++
			var spent [2]time.Duration
			i := 0
			msgOf := func(which int) deposit {
				if kind == "duplicate" {
					return deposit{Account: "bench-dup-" + strconv.Itoa(which), Ref: 1, Amount: 1}
				}
				return deposit{Account: "bench-new-" + strconv.Itoa(run) + "-" + strconv.Itoa(which), Ref: int64(i), Amount: 1}
			}
			want := idem.Processed
			if kind == "duplicate" {
				want = idem.Duplicate
				for which, in := range inboxes {
					_, _, _ = in.Handle(ctx, msgOf(which))
				}
			}
			for b.Loop() {
				i++
				for k := range 2 {
					which := (i + k) % 2
					began := time.Now()
					_, o, err := inboxes[which].Handle(ctx, msgOf(which))
					spent[which] += time.Since(began)
					if err != nil || o != want {
						b.Fatal(o, err)
					}
				}
			}
			noop, sdk := float64(spent[0].Nanoseconds())/float64(i), float64(spent[1].Nanoseconds())/float64(i)
			b.ReportMetric(noop, "noop-ns/op")
			b.ReportMetric(sdk, "sdk-ns/op")
			b.ReportMetric(sdk/noop, "sdk/noop")
		})
	}
}

// BenchmarkHandleAllocs counts the allocations of a Duplicate delivery on
// each provider (the same on both: recording allocates nothing).
func BenchmarkHandleAllocs(b *testing.B) {
	db := idemtest.New(b, migrations)
	ctx := context.Background()
	for _, provider := range []string{"noop", "sdk"} {
		in := idemimpl.NewInbox(db.Pool, depositTable, func(ctx context.Context, tx pgx.Tx, msg deposit) (receipt, error) {
			return receipt{Note: "ok"}, nil
		}, benchProviders(b)[provider]...)
		b.Run(provider, func(b *testing.B) {
			msg := deposit{Account: "bench-alloc-" + provider, Ref: 1, Amount: 1}
			_, _, _ = in.Handle(ctx, msg)
			b.ReportAllocs()
			for b.Loop() {
				if _, o, err := in.Handle(ctx, msg); err != nil || o != idem.Duplicate {
					b.Fatal(o, err)
				}
			}
		})
	}
}

// BenchmarkObserveOutcome measures what the instrumentation adds to each
// delivery, without the database: the count and the duration of one
// outcome, with the attribute sets made once per consumer, on the global
// (no-op) provider and on an SDK provider.
func BenchmarkObserveOutcome(b *testing.B) {
	sdk := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	b.Cleanup(func() { _ = sdk.Shutdown(context.Background()) })
	ctx := context.Background()
	for name, ins := range map[string]*obs.Instruments{"noop": obs.New(nil), "sdk": obs.New(sdk)} {
		c := ins.Consumer("bench.consumer")
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				c.Outcome(ctx, obs.Duplicate, 3*time.Millisecond)
			}
		})
	}
	// Many consumers: the lookup by name that a component does once.
	b.Run("consumer_lookup", func(b *testing.B) {
		ins := obs.New(sdk)
		for i := range 100 {
			ins.Consumer("c" + strconv.Itoa(i))
		}
		b.ReportAllocs()
		for b.Loop() {
			ins.Consumer("c42")
		}
	})
}
