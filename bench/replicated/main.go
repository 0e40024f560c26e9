// Command replicated measures what asynchronous replication risks and
// what relay.WithReplicated costs, on throwaway primaries with a standby
// (internal/pgcluster, both local to the benchmark, fsync on):
//
//   - the commit-to-publish latency of a relay with an asynchronous
//     standby, with and without the option, side by side. Deliveries of the
//     benchmark's ledger consumer, each publishing one message through the
//     outbox (ledger.NewPublishingPost), commit at a steady rate; a relay
//     woken by their NOTIFY publishes to an in-memory publisher that notes
//     when it first sees each message. The latency is from the commit's
//     return to that moment. The rounds interleave the two relays, in a
//     fresh schema each;
//
//   - how many acknowledged deliveries a failover loses, with an
//     asynchronous and with a synchronous standby: producers commit as fast
//     as they go, and the primary fails over halfway through (loss.go).
//
//     go run ./bench/replicated [-rates 200,2000] [-duration 10s] [-rounds 2] [-failovers 5]
//
// It prints two Markdown tables (docs/failover.md quotes them).
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/idemgen/idemgen/bench/internal/mdtable"
	"github.com/idemgen/idemgen/bench/internal/procstat"
	"github.com/idemgen/idemgen/bench/internal/stats"
	"github.com/idemgen/idemgen/bench/ledger"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/relay"
	"github.com/idemgen/idemgen/internal/pgcluster"
)

type config struct {
	rates     []int
	duration  time.Duration
	warmup    time.Duration
	rounds    int
	accounts  int
	failovers int
	producers int
	burst     time.Duration
}

func main() {
	var c config
	var rates string
	flag.StringVar(&rates, "rates", "200,2000", "deliveries per second of the runs, comma-separated")
	flag.DurationVar(&c.duration, "duration", 10*time.Second, "measured time of each run")
	flag.DurationVar(&c.warmup, "warmup", time.Second, "warm-up before each run's measurement")
	flag.IntVar(&c.rounds, "rounds", 2, "how many times each run repeats, the relays taking turns")
	flag.IntVar(&c.accounts, "accounts", 1000, "accounts the deliveries credit, at random")
	flag.IntVar(&c.failovers, "failovers", 5, "loss: failovers of each pair (0: skip the loss part)")
	flag.IntVar(&c.producers, "producers", 16, "loss: producers committing deliveries at once")
	flag.DurationVar(&c.burst, "burst", 2*time.Second, "loss: how long the producers commit; the failover comes halfway")
	flag.Parse()
	for _, f := range strings.Split(rates, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 100000 {
			fmt.Fprintf(os.Stderr, "replicated: -rates: %q is not a rate from 1 to 100000\n", f)
			os.Exit(2)
		}
		c.rates = append(c.rates, n)
	}
	if flag.NArg() > 0 || c.rounds < 1 || c.duration < time.Second || c.accounts < 1 || c.failovers < 0 || c.producers < 1 || c.burst <= 0 {
		fmt.Fprintln(os.Stderr, "usage: go run ./bench/replicated [-rates 200,2000] [-duration 10s] [-rounds 2] [-failovers 5]")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, c, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "replicated:", err)
		os.Exit(1)
	}
}

func rateList(rates []int) string {
	s := make([]string, len(rates))
	for i, r := range rates {
		s[i] = strconv.Itoa(r)
	}
	return strings.Join(s, ",")
}

// key is one cell of the table: a rate, and the relay with or without
// WithReplicated.
type key struct {
	rate       int
	replicated bool
}

func mode(replicated bool) string {
	if replicated {
		return "WithReplicated"
	}
	return "without"
}

func run(ctx context.Context, c config, out io.Writer) error {
	pair, err := pgcluster.StartPair(pgcluster.PairOptions{Prefix: "idemgen-bench-replicated.", Settings: []string{"max_connections=200"}})
	if err != nil {
		return err
	}
	defer pair.Remove()
	started := time.Now()
	fmt.Fprintf(os.Stderr, "a throwaway primary (%s) and its asynchronous standby (%s), fsync on\n", pair.Primary(), pair.Standby())
	lat := map[key][]time.Duration{}
	achieved := map[key][]float64{}
	var busy []float64
	for round := range c.rounds {
		for i, rate := range c.rates {
			for j := range 2 {
				replicated := (round+i+j)%2 == 1
				k := key{rate, replicated}
				fmt.Fprintf(os.Stderr, "round %d: %d/s, %s\n", round+1, rate, mode(replicated))
				r, err := measure(ctx, c, pair.URL("postgres"), rate, replicated)
				if err != nil {
					return fmt.Errorf("round %d, %d/s, %s: %w", round+1, rate, mode(replicated), err)
				}
				lat[k] = append(lat[k], r.lat...)
				achieved[k] = append(achieved[k], r.rate)
				busy = append(busy, r.busy)
				sorted := slices.Sorted(slices.Values(r.lat))
				fmt.Fprintf(os.Stderr, "    %d messages at %.0f/s: p50 %s, p99 %s\n", len(r.lat), r.rate,
					mdtable.Dur(stats.Percentile(sorted, 50)), mdtable.Dur(stats.Percentile(sorted, 99)))
			}
		}
	}
	host, _ := os.Hostname()
	fmt.Fprintf(out, "go run ./bench/replicated -rates %s -duration %v -rounds %d (%s, %d CPUs, %s; %v; CPU busy %.0f%% on average)\n\n",
		rateList(c.rates), c.duration, c.rounds,
		host, runtime.NumCPU(), runtime.Version(), time.Since(started).Round(time.Second), 100*stats.Median(busy))
	t := mdtable.New(mdtable.R("rate"), mdtable.L("relay"), mdtable.R("messages"), mdtable.R("p50"), mdtable.R("p99"), mdtable.R("max"))
	for _, rate := range c.rates {
		for _, replicated := range []bool{false, true} {
			k := key{rate, replicated}
			sorted := slices.Sorted(slices.Values(lat[k]))
			t.Row(fmt.Sprintf("%d/s", rate), mode(replicated), mdtable.Int(len(sorted)),
				mdtable.Dur(stats.Percentile(sorted, 50)), mdtable.Dur(stats.Percentile(sorted, 99)), mdtable.Dur(sorted[len(sorted)-1]))
		}
	}
	fmt.Fprint(out, t.String())
	if c.failovers == 0 {
		return nil
	}
	lt := mdtable.New(mdtable.L("standby"), mdtable.R("failovers"), mdtable.R("acknowledged by the old primary"), mdtable.R("lost"), mdtable.L("lost per failover"))
	for _, sync := range []bool{false, true} {
		name := map[bool]string{false: "asynchronous", true: "synchronous"}[sync]
		fmt.Fprintf(os.Stderr, "loss: %d failovers of a pair with a %s standby, %d producers, a burst of %v each\n", c.failovers, name, c.producers, c.burst)
		runs, err := measureLoss(ctx, sync, c.failovers, c.producers, c.burst, c.accounts)
		if err != nil {
			return fmt.Errorf("loss with a %s standby: %w", name, err)
		}
		var acked, lost int
		var each []string
		for _, r := range runs {
			acked += r.acked
			lost += r.lost
			each = append(each, fmt.Sprintf("%d of %d", r.lost, r.acked))
		}
		lt.Row(name, mdtable.Int(len(runs)), mdtable.Int(acked), mdtable.Int(lost), strings.Join(each, ", "))
	}
	fmt.Fprintf(out, "\nA failover halfway through a burst of %v, %d producers committing as fast as they go:\n\n%s", c.burst, c.producers, lt.String())
	return nil
}

// result is one run: the latency of each measured message, the rate the
// producers achieved, and the machine's CPU busy share meanwhile.
type result struct {
	lat  []time.Duration
	rate float64
	busy float64
}

// producers deliver the messages of a run at rate, each at its scheduled
// time: enough that a slow commit does not delay the next message.
func producers(rate int) int { return min(max(4, rate/100), 64) }

// measure runs one cell in a fresh schema of base.
func measure(ctx context.Context, c config, base string, rate int, replicated bool) (result, error) {
	schema, drop, err := newSchema(ctx, base, c.accounts)
	if err != nil {
		return result{}, err
	}
	defer drop()
	url := base + "&search_path=" + schema
	nProducers := producers(rate)
	prod, err := openPool(ctx, url, nProducers)
	if err != nil {
		return result{}, err
	}
	defer prod.Close()
	relayPool, err := openPool(ctx, url, 4)
	if err != nil {
		return result{}, err
	}
	defer relayPool.Close()

	rec := &recorder{seen: map[string]time.Time{}}
	opts := []relay.Option{relay.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))}
	if replicated {
		opts = append(opts, relay.WithReplicated())
	}
	rctx, stopRelay := context.WithCancel(ctx)
	relayDone := make(chan error, 1)
	go func() { relayDone <- relay.New(relayPool, rec, opts...).Run(rctx) }()
	defer func() {
		stopRelay()
		<-relayDone
	}()

	in := ledger.NewPublishingPost(prod, 1)
	interval := time.Second / time.Duration(rate)
	warm := int(c.warmup / interval)
	total := warm + int(c.duration/interval)
	ids := make([]string, total)
	commits := make([]time.Time, total)
	var (
		next  atomic.Int64
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	meter := procstat.Start()
	start := time.Now()
	for p := range nProducers {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= total {
					return
				}
				time.Sleep(time.Until(start.Add(time.Duration(i) * interval)))
				msg := ledger.Deposit{MessageID: "r-" + strconv.Itoa(i), Account: int64(1 + (i*7+p)%c.accounts), Amount: 1}
				id, err := ledger.OutgoingID(msg, 0)
				if err == nil {
					var outcome idem.Outcome
					if _, outcome, err = in.Handle(ctx, msg); err == nil && outcome != idem.Processed {
						err = fmt.Errorf("outcome %v, want processed", outcome)
					}
				}
				if err != nil {
					mu.Lock()
					first = cmp(first, err)
					mu.Unlock()
					return
				}
				ids[i], commits[i] = id, time.Now()
			}
		})
	}
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	if first != nil {
		return result{}, first
	}
	var res result
	_, res.busy = meter.Stop()
	last := commits[warm]
	for _, t := range commits[warm:] {
		if t.After(last) {
			last = t
		}
	}
	res.rate = float64(total-warm) / last.Sub(start.Add(time.Duration(warm)*interval)).Seconds()
	deadline := time.Now().Add(30 * time.Second)
	for rec.count() < total {
		if time.Now().After(deadline) {
			return result{}, fmt.Errorf("the relay published %d of %d messages by 30s after the last commit", rec.count(), total)
		}
		time.Sleep(2 * time.Millisecond)
	}
	for i := warm; i < total; i++ {
		res.lat = append(res.lat, rec.at(ids[i]).Sub(commits[i]))
	}
	return res, nil
}

// cmp keeps the first error.
func cmp(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// recorder is the relay's publisher: it confirms every message at once
// and notes when it first saw each.
type recorder struct {
	mu   sync.Mutex
	seen map[string]time.Time
}

func (r *recorder) Publish(_ context.Context, msgs []idem.OutgoingMessage) []error {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range msgs {
		if _, ok := r.seen[m.ID]; !ok {
			r.seen[m.ID] = now
		}
	}
	return make([]error, len(msgs))
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.seen)
}

func (r *recorder) at(id string) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seen[id]
}

func openPool(ctx context.Context, url string, n int) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = int32(n)
	return pgxpool.NewWithConfig(ctx, cfg)
}

// newSchema creates a schema on base with the ledger's migrations and the
// outbox chain, and n accounts; drop removes it.
func newSchema(ctx context.Context, base string, n int) (name string, drop func(), err error) {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name = "idembench_replicated_" + hex.EncodeToString(b)
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		return "", nil, err
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+name); err != nil {
		return "", nil, err
	}
	drop = func() {
		dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if conn, err := pgx.Connect(dctx, base); err == nil {
			_, _ = conn.Exec(dctx, "DROP SCHEMA "+name+" CASCADE")
			conn.Close(dctx)
		}
	}
	migrations, err := ledger.MigrationsWithOutbox()
	if err != nil {
		drop()
		return "", nil, err
	}
	pool, err := openPool(ctx, base+"&search_path="+name, 2)
	if err != nil {
		drop()
		return "", nil, err
	}
	defer pool.Close()
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	provider, err := goose.NewProvider(goose.DialectPostgres, db, migrations, goose.WithDisableGlobalRegistry(true))
	if err == nil {
		_, err = provider.Up(ctx)
	}
	if err == nil {
		_, err = pool.Exec(ctx, `INSERT INTO accounts (id) SELECT generate_series(1, $1::bigint)`, n)
	}
	if err != nil {
		drop()
		return "", nil, errors.Join(fmt.Errorf("prepare schema %s", name), err)
	}
	return name, drop, nil
}
