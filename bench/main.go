// Command bench measures what idemgen costs and rewrites BENCHMARKS.md at the
// root of the repository with the results:
//
//   - the consumer of package bench/ledger (one UPDATE per message) against
//     the real PostgreSQL, side by side in one run, at 1, 4 and 16 concurrent
//     workers: without deduplication ("bare"), through a hand-written inbox,
//     through the generated wrapper, through the same wrapper with the
//     claim-first protocol (idem.WithPessimisticClaim), and through the
//     generated wrapper fed only messages it has already processed; plus
//     pgbench running the same SQL and each protocol's round trips as a
//     reference. Messages per second, median and p99 latency, round trips
//     per message (counted on the wire) and the ratios; and, on a
//     throwaway cluster, the unique violations the server logs;
//   - what the wrapper allocates per message (go test -bench -benchmem), and
//     its live heap over a long run;
//   - the outbox: first deliveries whose handler publishes 0, 1 and 10
//     messages (round trips on the wire, throughput, latency), with and
//     without the commit's NOTIFY; commit-to-publish latency of an
//     relay.Relay woken by NOTIFY against one that only polls; and relay
//     throughput over a backlog, for 1 and 4 relays;
//   - the brokers (brokers.go): consuming from RabbitMQ, NATS JetStream and
//     Kafka (kfake, in-process) through idem's adapters into the generated
//     wrapper, at 1, 4 and 16 handlers, against the same library's raw
//     consume-and-ack; the relay's publish rate through each adapter against
//     a raw publisher with confirms; and idemgen's outbox against
//     Watermill's (watermill-sql and its forwarder to RabbitMQ);
//   - the purge: idem.Janitor deleting a million expired inbox rows while
//     16 workers deliver, their p99 next to their p99 without it, and the
//     lock waits between the purge and the deliveries;
//   - HTTP (http.go): requests through idemhttp against a plain net/http
//     handler around the hand-written inbox, first requests and replays;
//   - idemgen's running time against go vet on the same packages, and how it
//     grows with the number of handlers.
//
// Usage, from the repository root:
//
//	go run ./bench [flags]
//
// The database is -db, else the one the tests use, found the same way
// (internal/testdb): IDEMGEN_TEST_DATABASE_URL, else the local server's
// socket, database idemgen_test, created if missing. Every cell of the table runs in a fresh schema,
// dropped afterwards; nothing else in the database is touched.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idemgen/idemgen/bench/internal/procstat"
	"github.com/idemgen/idemgen/idem/relay"
	"github.com/idemgen/idemgen/internal/testdb"
)

type config struct {
	db        string
	duration  time.Duration
	warmup    time.Duration
	rounds    int
	workers   []int
	accounts  int
	pgbench   string
	memRun    time.Duration
	genReps   int
	genSizes  []int
	benchTime string
	// The outbox part: the message rate and the relays' poll interval of
	// the latency runs, the backlog and the relay counts of the
	// throughput runs.
	obxRates   []int
	obxPoll    time.Duration
	obxBacklog int
	obxRelays  []int
	// The brokers part: the brokers, their addresses, the backlog of each
	// consume and publish cell, the messages of the peer comparison's
	// burst.
	brokers  []string
	amqpURL  string
	natsURL  string
	brkMsgs  int
	peerMsgs int
	// The purge part: the expired rows, the workers delivering meanwhile
	// and how long they deliver without the purge first.
	purgeRows     int
	purgeWorkers  int
	purgeBaseline time.Duration
	// The network part: the round trips the proxy adds, the workers, how
	// long each cell measures.
	netRTTs     []time.Duration
	netWorkers  []int
	netDuration time.Duration
	// The sizing part: the rows the tables are filled to, the deliveries
	// each WAL measurement averages over, and how many times it repeats.
	batchSize    int
	batchWorkers []int
	sizeRows     int
	walMsgs      int
	walRepeats   int
	// The statements part: the messages of each scenario between two
	// reads of pg_stat_statements.
	stmtMsgs    int
	stmtWorkers []int
	keep        bool
	parts       map[string]bool
	out         string
	root        string
	args        []string
}

// allParts are the parts of the run, in the order they run.
var allParts = []string{"mem", "db", "statements", "network", "batch", "outbox", "brokers", "purge", "entity", "http", "sizing", "alloc", "gen"}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run() error {
	cfg, err := parseFlags()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	rep := &report{cfg: cfg, started: time.Now()}
	if err := rep.describeMachine(ctx); err != nil {
		return err
	}
	// The long run first, so that the live heap it samples holds the
	// wrapper, the pool and pgx's caches, not the results of the other parts.
	if cfg.parts["mem"] {
		if rep.mem, err = runMem(ctx, cfg); err != nil {
			return err
		}
	}
	if cfg.parts["db"] {
		if rep.db, err = runDB(ctx, cfg); err != nil {
			return err
		}
	}
	if cfg.parts["statements"] {
		if rep.stmts, err = runStatements(ctx, cfg); err != nil {
			return err
		}
	}
	if cfg.parts["network"] {
		if rep.net, err = runNetwork(ctx, cfg); err != nil {
			return err
		}
	}
	if cfg.parts["batch"] {
		if rep.batch, err = runBatch(ctx, cfg); err != nil {
			return err
		}
	}
	if cfg.parts["outbox"] {
		if rep.outbox, err = runOutbox(ctx, cfg); err != nil {
			return err
		}
	}
	if cfg.parts["brokers"] {
		if rep.brokers, err = runBrokers(ctx, cfg); err != nil {
			return err
		}
	}
	if cfg.parts["purge"] {
		if rep.purge, err = runPurge(ctx, cfg); err != nil {
			return err
		}
	}
	if cfg.parts["entity"] {
		if rep.entity, err = runEntity(ctx, cfg); err != nil {
			return err
		}
	}
	if cfg.parts["http"] {
		if rep.http, err = runHTTP(ctx, cfg); err != nil {
			return err
		}
	}
	if cfg.parts["sizing"] {
		if rep.sizing, err = runSizing(ctx, cfg); err != nil {
			return err
		}
	}
	if cfg.parts["alloc"] {
		if rep.alloc, err = runAlloc(ctx, cfg); err != nil {
			return err
		}
	}
	if cfg.parts["gen"] {
		if rep.gen, err = runGen(ctx, cfg); err != nil {
			return err
		}
	}
	rep.finished = time.Now()
	rep.loadAfter = procstat.LoadAverage()
	out := cfg.out
	if !filepath.IsAbs(out) {
		out = filepath.Join(cfg.root, out)
	}
	if err := os.WriteFile(out, rep.markdown(), 0o644); err != nil {
		return err
	}
	logf("wrote %s", out)
	return nil
}

func parseFlags() (*config, error) {
	cfg := &config{args: os.Args[1:]}
	var workers, sizes, parts, relays, brokers, netRTTs, netWorkers, batchWorkers, stmtWorkers, obxRates string
	flag.StringVar(&cfg.db, "db", "", "PostgreSQL `URL` (default: $IDEMGEN_TEST_DATABASE_URL, else database idemgen_test on the local socket, created if missing)")
	flag.DurationVar(&cfg.duration, "duration", 5*time.Second, "measured time of each cell")
	flag.DurationVar(&cfg.warmup, "warmup", time.Second, "warm-up before each cell's measurement")
	flag.IntVar(&cfg.rounds, "rounds", 2, "how many times every cell runs; the rounds interleave the scenarios")
	flag.StringVar(&workers, "workers", "1,4,16", "concurrent workers of the cells, comma-separated")
	flag.IntVar(&cfg.accounts, "accounts", 10000, "accounts the messages credit, at random")
	flag.StringVar(&cfg.pgbench, "pgbench", "auto", "pgbench `binary` for the reference column; \"\" or \"off\" to skip")
	flag.DurationVar(&cfg.memRun, "memrun", time.Minute, "length of the long run that samples the live heap")
	flag.IntVar(&cfg.genReps, "genreps", 5, "repetitions of each idemgen and go vet timing")
	flag.StringVar(&sizes, "gensizes", "50,100,250,500", "handlers in the synthetic packages, comma-separated")
	flag.StringVar(&cfg.benchTime, "benchtime", "2s", "-benchtime of the go test -benchmem benchmarks")
	flag.StringVar(&obxRates, "obxrate", "200,2000", "outbox: messages per second of the commit-to-publish latency runs, comma-separated (the first is also the rate of the Watermill comparison's steady runs)")
	flag.DurationVar(&cfg.obxPoll, "obxpoll", relay.DefaultPoll, "outbox: the relay's poll interval in the latency runs (NOTIFY and poll-only)")
	flag.IntVar(&cfg.obxBacklog, "obxbacklog", 50000, "outbox: rows in the backlog of the relay throughput runs")
	flag.StringVar(&relays, "obxrelays", "1,4", "outbox: relays at once in the throughput runs, comma-separated")
	flag.StringVar(&brokers, "brokers", strings.Join(brokerNames, ","), "brokers: the brokers of the brokers part, comma-separated (rabbitmq also runs the Watermill comparison)")
	flag.StringVar(&cfg.amqpURL, "amqp", envOr("IDEMGEN_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/"), "brokers: the RabbitMQ `URL`")
	flag.StringVar(&cfg.natsURL, "nats", envOr("IDEMGEN_TEST_NATS_URL", "nats://127.0.0.1:4222"), "brokers: the NATS (JetStream) `URL`")
	flag.IntVar(&cfg.brkMsgs, "brkmsgs", 10000, "brokers: messages in the backlog of each consume and publish cell")
	flag.IntVar(&cfg.peerMsgs, "peermsgs", 5000, "brokers: messages of the burst of the Watermill comparison")
	flag.BoolVar(&cfg.keep, "keep", false, "keep the generator's temporary module (its path is logged)")
	flag.IntVar(&cfg.purgeRows, "purgerows", 1000000, "purge: expired inbox rows the janitor purges")
	flag.IntVar(&cfg.purgeWorkers, "purgeworkers", 16, "purge: workers delivering messages during the purge")
	flag.DurationVar(&cfg.purgeBaseline, "purgebase", 10*time.Second, "purge: how long the workers deliver without the purge, before it")
	flag.StringVar(&netRTTs, "netrtt", "500us,2ms", "network: the round trips the proxy adds in front of PostgreSQL, comma-separated (the socket is always measured too)")
	flag.StringVar(&netWorkers, "networkers", "1,16", "network: concurrent workers of the cells, comma-separated")
	flag.DurationVar(&cfg.netDuration, "netduration", 5*time.Second, "network: measured time of each cell")
	flag.IntVar(&cfg.batchSize, "batchsize", 100, "batch: messages a HandleBatch call (and a bare batched transaction) delivers")
	flag.StringVar(&batchWorkers, "batchworkers", "16", "batch: concurrent workers of the cells, comma-separated")
	flag.IntVar(&cfg.sizeRows, "sizerows", 1000000, "sizing: rows the inbox and the outbox are filled to before their sizes are read")
	flag.IntVar(&cfg.walMsgs, "walmsgs", 1000, "sizing: deliveries each WAL measurement averages over")
	flag.IntVar(&cfg.walRepeats, "walrepeats", 5, "sizing: times each WAL measurement repeats (the median counts)")
	flag.IntVar(&cfg.stmtMsgs, "stmtmsgs", 2000, "statements: messages of each scenario (at each concurrency) between two reads of pg_stat_statements")
	flag.StringVar(&stmtWorkers, "stmtworkers", "1,16", "statements: concurrent workers of the scenarios, comma-separated")
	flag.StringVar(&parts, "parts", strings.Join(allParts, ","), "parts to run: mem (the long run), db (the scenarios), statements (what each statement of a delivery costs the server, from pg_stat_statements), network (the scenarios through a delaying proxy), batch (HandleBatch), outbox, brokers, purge (idem.Janitor under load), entity (mode=entity against the bare transaction and mode=tx), http (idemhttp against net/http with a hand-written inbox), sizing (bytes per row, WAL per message, purging a million rows), alloc, gen")
	flag.StringVar(&cfg.out, "out", "BENCHMARKS.md", "results file, relative to the repository root")
	flag.Parse()
	if flag.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", flag.Args())
	}

	var err error
	if cfg.workers, err = intList(workers); err != nil {
		return nil, fmt.Errorf("-workers: %w", err)
	}
	if cfg.genSizes, err = intList(sizes); err != nil {
		return nil, fmt.Errorf("-gensizes: %w", err)
	}
	if cfg.batchWorkers, err = intList(batchWorkers); err != nil {
		return nil, fmt.Errorf("-batchworkers: %w", err)
	}
	if cfg.batchSize < 1 || cfg.batchSize > duplicateKeys {
		return nil, fmt.Errorf("-batchsize must be 1 to %d", duplicateKeys)
	}
	if cfg.netWorkers, err = intList(netWorkers); err != nil {
		return nil, fmt.Errorf("-networkers: %w", err)
	}
	for _, f := range strings.Split(netRTTs, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(f))
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("-netrtt: %q is not a positive duration", f)
		}
		cfg.netRTTs = append(cfg.netRTTs, d)
	}
	if cfg.netDuration < time.Second || cfg.sizeRows < 1000 || cfg.walMsgs < 10 || cfg.walRepeats < 1 {
		return nil, fmt.Errorf("-netduration must be at least 1s, -sizerows at least 1000, -walmsgs at least 10 and -walrepeats positive")
	}
	if cfg.obxRelays, err = intList(relays); err != nil {
		return nil, fmt.Errorf("-obxrelays: %w", err)
	}
	if cfg.obxRates, err = intList(obxRates); err != nil {
		return nil, fmt.Errorf("-obxrate: %w", err)
	}
	if slices.Min(cfg.obxRates) < 1 || slices.Max(cfg.obxRates) > 100000 || cfg.obxPoll <= 0 || cfg.obxBacklog < 1 {
		return nil, fmt.Errorf("-obxrate must be 1 to 100000 each, -obxpoll positive and -obxbacklog at least 1")
	}
	for _, b := range strings.Split(brokers, ",") {
		if !slices.Contains(brokerNames, b) {
			return nil, fmt.Errorf("-brokers: unknown broker %q (want %s)", b, strings.Join(brokerNames, ","))
		}
		cfg.brokers = append(cfg.brokers, b)
	}
	if cfg.stmtMsgs < 10 {
		return nil, fmt.Errorf("-stmtmsgs must be at least 10")
	}
	if cfg.stmtWorkers, err = intList(stmtWorkers); err != nil {
		return nil, fmt.Errorf("-stmtworkers: %w", err)
	}
	if cfg.brkMsgs < 100 || cfg.peerMsgs < 10 {
		return nil, fmt.Errorf("-brkmsgs must be at least 100 and -peermsgs at least 10")
	}
	cfg.parts = map[string]bool{}
	for _, p := range strings.Split(parts, ",") {
		if !slices.Contains(allParts, p) {
			return nil, fmt.Errorf("-parts: unknown part %q (want %s)", p, strings.Join(allParts, ","))
		}
		cfg.parts[p] = true
	}
	if cfg.rounds < 1 || cfg.duration < time.Second || cfg.accounts < 1 || cfg.genReps < 1 {
		return nil, fmt.Errorf("-rounds, -accounts and -genreps must be positive and -duration at least 1s")
	}
	if cfg.db, err = databaseURL(context.Background(), cfg.db, testdb.Options{}); err != nil {
		return nil, err
	}
	switch cfg.pgbench {
	case "auto":
		cfg.pgbench = findPgbench()
	case "off":
		cfg.pgbench = ""
	}
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/idemgen/idemgen").Output()
	if err != nil {
		return nil, fmt.Errorf("find the repository root (run go run ./bench inside it): %w", err)
	}
	cfg.root = strings.TrimSpace(string(out))
	return cfg, nil
}

// databaseURL returns flagDB if set, else the test database, found (and
// created if missing) as the tests find it.
func databaseURL(ctx context.Context, flagDB string, opts testdb.Options) (string, error) {
	if flagDB != "" {
		return flagDB, nil
	}
	opts.Note = func(msg string) { logf("%s", msg) }
	u, err := testdb.Find(ctx, opts)
	if err != nil {
		return "", fmt.Errorf("find the database (or pass -db URL): %w", err)
	}
	return u, nil
}

// findPgbench looks for pgbench on PATH, then in Debian's and the usual
// PostgreSQL install directories.
func findPgbench() string {
	if p, err := exec.LookPath("pgbench"); err == nil {
		return p
	}
	for _, pattern := range []string{"/usr/lib/postgresql/*/bin/pgbench", "/usr/pgsql-*/bin/pgbench", "/opt/homebrew/opt/postgresql@*/bin/pgbench"} {
		if m, _ := filepath.Glob(pattern); len(m) > 0 {
			return m[len(m)-1]
		}
	}
	return ""
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func intList(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive integer", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s  %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}
