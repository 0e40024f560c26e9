// Command soak proves idemgen's claim, nothing doubled and nothing lost, under
// faults at a scale no unit test reaches: billing's Charge consumers (with
// their outbox), relays and notifications consumers run as separate OS
// processes on a real broker and a PostgreSQL of the soak's own, while the
// soak SIGKILLs and restarts them, terminates their database sessions,
// closes their broker connections and restarts PostgreSQL once; with
// -failover, PostgreSQL is a primary and a synchronous standby that it
// also fails over (-failovers times), each process reaching the primary
// through the pair's multi-host URL. It then counts everything and exits
// non-zero, naming the offending keys, when a count is off.
//
//	go run ./bench/soak -broker rabbitmq -messages 20000 -seed 1
//	go run ./bench/soak -broker jetstream -messages 20000 -seed 1
//	go run ./bench/soak -broker rabbitmq -messages 20000 -seed 1 -failover
//
// See docs/soak.md.
package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	mrand "math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/idemgen/idemgen/examples/billing"
	"github.com/idemgen/idemgen/examples/notifications"
	"github.com/idemgen/idemgen/idem/idemtest/brokertest"
	"github.com/idemgen/idemgen/internal/netproxy"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "child" {
		os.Exit(runChild(os.Args[2:]))
	}
	var o options
	flag.StringVar(&o.broker, "broker", "rabbitmq", "the `broker`: rabbitmq or jetstream")
	flag.IntVar(&o.messages, "messages", 20000, "how many distinct orders (M) to publish")
	flag.Uint64Var(&o.seed, "seed", 1, "the `seed` of every random choice (which orders are sent again, which faults, when)")
	flag.DurationVar(&o.timeout, "timeout", 20*time.Minute, "the bound on the whole run; past it the soak stops everything and fails")
	flag.IntVar(&o.billing, "billing", 3, "billing consumer processes")
	flag.IntVar(&o.notify, "notifications", 2, "notifications consumer processes")
	flag.IntVar(&o.relays, "relays", 2, "relay processes")
	flag.DurationVar(&o.faultEvery, "fault-every", 1500*time.Millisecond, "mean time between two faults")
	flag.Float64Var(&o.dupShare, "dup-share", 0.1, "share of the orders published more than once (each 2 or 3 times)")
	flag.IntVar(&o.hostile, "hostile", 30, "hostile payloads of each kind (undecodable, oversized, reused key)")
	flag.StringVar(&o.reportPath, "report", "", "also write the report as Markdown to this `file`")
	flag.BoolVar(&o.failover, "failover", false, "run PostgreSQL as a primary and a synchronous standby, and fail it over -failovers times among the faults")
	flag.IntVar(&o.failovers, "failovers", 3, "with -failover: how many failovers")
	flag.Parse()
	if flag.NArg() > 0 || o.messages < 1 || (o.broker != "rabbitmq" && o.broker != "jetstream") || o.failovers < 1 {
		fmt.Fprintln(os.Stderr, "usage: go run ./bench/soak [-broker rabbitmq|jetstream] [-messages M] [-seed N] [-timeout D] [-failover [-failovers N]]")
		flag.PrintDefaults()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, o))
}

type options struct {
	broker                  string
	messages                int
	seed                    uint64
	timeout                 time.Duration
	billing, notify, relays int
	faultEvery              time.Duration
	dupShare                float64
	hostile                 int
	reportPath              string
	failover                bool
	failovers               int
}

// accounts is how many accounts the orders are spread over: Charge updates
// the account's balance, and one account would serialize every charge.
const accounts = 64

func orderID(i int) string { return "ord-" + strconv.Itoa(i) }

func accountOf(i int) string { return fmt.Sprintf("acc-%02d", i%accounts) }

func orderBody(i int) []byte {
	b, _ := json.Marshal(billing.OrderPlaced{OrderID: orderID(i), AccountID: accountOf(i), AmountCents: int64(100 + i%1000)})
	return b
}

// soak is one run.
type soak struct {
	o options
	// pubRnd decides what is published, faultRnd which faults come when:
	// both from -seed, each used by one goroutine.
	pubRnd, faultRnd *mrand.Rand
	started          time.Time
	dir              string // logs of the child processes
	pg               *database
	pool             *pgxpool.Pool
	end              endpoint        // what children use
	ctl              broker          // the parent's own connection
	nats             *netproxy.Proxy // between the children and NATS, to cut their connections
	exe              string

	mu       sync.Mutex
	procs    map[string]*proc // by slot name
	faults   map[string]int
	injected int // extra copies published
	sent     int // messages published, copies and hostile ones included
	hostile  []string
	out      io.Writer

	closing     atomic.Bool    // a broker-connection fault is running
	bg          sync.WaitGroup // background faults
	brokerConns int            // broker connections closed
	failovers   []failoverRecord
	// pgFaultsLeft counts the PostgreSQL faults of the plan not done yet:
	// the restart and the failovers.
	pgFaultsLeft atomic.Int32
}

// proc is a child process slot: the incarnation running now and the stats
// of those that ended (a SIGKILL loses at most statsEvery of them).
type proc struct {
	role, name string
	cmd        *exec.Cmd
	cur        [5]int64
	done       [5]int64
	exited     chan struct{}
	starts     int
}

func run(ctx context.Context, o options) int {
	s := &soak{o: o, pubRnd: mrand.New(mrand.NewPCG(o.seed, 1)), faultRnd: mrand.New(mrand.NewPCG(o.seed, 2)), procs: map[string]*proc{}, faults: map[string]int{}, out: os.Stdout}
	s.pgFaultsLeft.Store(1)
	if o.failover {
		s.pgFaultsLeft.Add(int32(o.failovers))
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	code, err := s.run(ctx)
	if err != nil {
		fmt.Fprintf(os.Stderr, "soak: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

func (s *soak) logf(format string, args ...any) {
	fmt.Fprintf(s.out, "[%6.1fs] %s\n", time.Since(s.started).Seconds(), fmt.Sprintf(format, args...))
}

func (s *soak) run(ctx context.Context) (int, error) {
	s.started = time.Now()
	var err error
	if s.exe, err = os.Executable(); err != nil {
		return 1, err
	}
	if s.dir, err = os.MkdirTemp("", "idemgen-soak."); err != nil {
		return 1, err
	}
	defer os.RemoveAll(s.dir)

	s.pg, err = startDatabase(s.o.failover)
	if err != nil {
		return 1, err
	}
	defer s.pg.remove()
	s.logf("PostgreSQL: %s", s.pg.describe())
	if err := s.setupDB(ctx); err != nil {
		return 1, err
	}
	defer s.pool.Close()

	if err := s.setupBroker(ctx); err != nil {
		return 1, err
	}
	defer s.ctl.close()
	defer func() {
		c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := s.ctl.remove(c); err != nil {
			fmt.Fprintf(os.Stderr, "soak: remove the run's topology: %v\n", err)
		}
	}()
	if s.nats != nil {
		defer s.nats.Close()
	}

	for i := range s.o.billing {
		s.spawn(roleBilling, fmt.Sprintf("billing-%d", i+1))
	}
	for i := range s.o.relays {
		s.spawn(roleRelay, fmt.Sprintf("relay-%d", i+1))
	}
	for i := range s.o.notify {
		s.spawn(roleNotify, fmt.Sprintf("notifications-%d", i+1))
	}
	defer s.stopAll()

	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	var wg sync.WaitGroup
	pubErr := make(chan error, 1)
	wg.Add(2)
	go func() { defer wg.Done(); pubErr <- s.publishAll(runCtx) }()
	go func() { defer wg.Done(); s.injectFaults(runCtx) }()

	waitErr := s.waitDone(ctx, pubErr)
	stopRun()
	wg.Wait()
	if waitErr == nil {
		// Faults are over: whatever a fault left behind (a redelivery, a
		// row the relay has to publish again) arrives now.
		waitErr = s.settle(context.WithoutCancel(ctx))
	}
	s.stopAll()
	// The report also when the run did not finish: it says how far it got.
	rep, ok, err := s.check(context.WithoutCancel(ctx))
	if err != nil {
		return 1, errors.Join(waitErr, err)
	}
	if waitErr != nil {
		rep += fmt.Sprintf("\nNOT FINISHED: %v\n", waitErr)
		ok = false
	}
	fmt.Fprint(s.out, rep)
	if s.o.reportPath != "" {
		if err := os.WriteFile(s.o.reportPath, []byte(rep), 0o644); err != nil {
			return 1, err
		}
	}
	if !ok {
		s.logTails()
		return 1, fmt.Errorf("the checks failed (above)")
	}
	return 0, nil
}

func (s *soak) setupDB(ctx context.Context) error {
	cfg, err := pgxpool.ParseConfig(s.pg.URL())
	if err != nil {
		return err
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = "soak-parent"
	// Bounded in time: no query of the soak's own may hang it.
	cfg.ConnConfig.RuntimeParams["statement_timeout"] = "120s"
	cfg.MaxConns = 4
	if s.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return err
	}
	db := stdlib.OpenDBFromPool(s.pool)
	defer db.Close()
	for _, svc := range []struct {
		name  string
		fsys  fs.FS
		table string
	}{{"billing", billing.Migrations(), goose.DefaultTablename},
		{"notifications", notifications.Migrations(), "goose_db_version_notifications"}} {
		p, err := goose.NewProvider(goose.DialectPostgres, db, svc.fsys, goose.WithDisableGlobalRegistry(true), goose.WithTableName(svc.table))
		if err == nil {
			_, err = p.Up(ctx)
		}
		if err != nil {
			return fmt.Errorf("migrate %s: %w", svc.name, err)
		}
	}
	for i := range accounts {
		if _, err := s.pool.Exec(ctx, `INSERT INTO accounts (id, owner) VALUES ($1, 'soak')`, accountOf(i)); err != nil {
			return fmt.Errorf("open account: %w", err)
		}
	}
	return nil
}

func (s *soak) setupBroker(ctx context.Context) error {
	suffix := make([]byte, 4)
	rand.Read(suffix)
	s.end = endpoint{kind: s.o.broker, prefix: "soak-" + hex.EncodeToString(suffix)}
	var target string
	switch s.o.broker {
	case "rabbitmq":
		if err := tbCall("soak", func(t testing.TB) { target = brokertest.RabbitMQURL(t) }); err != nil {
			return err
		}
		s.end.url = target
	case "jetstream":
		if err := tbCall("soak", func(t testing.TB) { target = brokertest.NATSURL(t) }); err != nil {
			return err
		}
		u, err := url.Parse(target)
		if err != nil {
			return err
		}
		if s.nats, err = netproxy.Start(netproxy.TCP(u.Host), 0); err != nil {
			return err
		}
		s.end.url = "nats://" + s.nats.Addr()
	}
	ctl, err := dial(endpoint{kind: s.end.kind, url: target, prefix: s.end.prefix}, "soakctl "+s.end.prefix)
	if err != nil {
		return err
	}
	s.ctl = ctl
	s.logf("%s: %s, names %s.*", s.o.broker, redact(target), s.end.prefix)
	return s.ctl.declare(ctx)
}

func redact(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(a URL)"
	}
	return u.Redacted()
}

// spawn starts (or restarts) the child process of a slot.
func (s *soak) spawn(role, name string) {
	s.mu.Lock()
	p := s.procs[name]
	if p == nil {
		p = &proc{role: role, name: name}
		s.procs[name] = p
	}
	s.mu.Unlock()
	logf, err := os.OpenFile(filepath.Join(s.dir, name+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		fmt.Fprintf(os.Stderr, "soak: %v\n", err)
		return
	}
	cmd := exec.Command(s.exe, "child", "-role", role, "-db", s.pg.URL(), "-broker", s.end.kind, "-url", s.end.url,
		"-prefix", s.end.prefix, "-name", s.end.prefix+" "+name)
	cmd.Stderr = logf
	// The children die with the soak, however it ends.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		logf.Close()
		fmt.Fprintf(os.Stderr, "soak: start %s: %v\n", name, err)
		return
	}
	exited := make(chan struct{})
	s.mu.Lock()
	p.cmd, p.exited, p.cur = cmd, exited, [5]int64{}
	p.starts++
	s.mu.Unlock()
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) != 6 || f[0] != "stats" {
				continue
			}
			var v [5]int64
			for i := range v {
				v[i], _ = strconv.ParseInt(f[i+1], 10, 64)
			}
			s.mu.Lock()
			p.cur = v
			s.mu.Unlock()
		}
		cmd.Wait()
		logf.Close()
		s.mu.Lock()
		for i := range p.cur {
			p.done[i] += p.cur[i]
		}
		p.cur = [5]int64{}
		s.mu.Unlock()
		close(exited)
	}()
}

// kill SIGKILLs a slot's process and waits until it is gone.
func (s *soak) kill(name string) {
	s.mu.Lock()
	p := s.procs[name]
	s.mu.Unlock()
	if p == nil || p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

// stopAll stops every child with SIGTERM (a clean stop), SIGKILL after 20s.
func (s *soak) stopAll() {
	s.mu.Lock()
	ps := make([]*proc, 0, len(s.procs))
	for _, p := range s.procs {
		ps = append(ps, p)
	}
	s.mu.Unlock()
	for _, p := range ps {
		if p.cmd != nil {
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	for _, p := range ps {
		if p.cmd == nil {
			continue
		}
		select {
		case <-p.exited:
		case <-time.After(20 * time.Second):
			_ = p.cmd.Process.Signal(syscall.SIGKILL)
			<-p.exited
		}
	}
}

// totals sums the stats of every process of a role.
func (s *soak) totals(role string) (t [5]int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.procs {
		if p.role != role {
			continue
		}
		for i := range t {
			t[i] += p.done[i] + p.cur[i]
		}
	}
	return t
}

func (s *soak) names(role string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ns []string
	for n, p := range s.procs {
		if p.role == role {
			ns = append(ns, n)
		}
	}
	sort.Strings(ns)
	return ns
}

// logTails prints the end of each child's log, for a failed run.
func (s *soak) logTails() {
	for _, role := range []string{roleBilling, roleRelay, roleNotify} {
		for _, n := range s.names(role) {
			b, _ := os.ReadFile(filepath.Join(s.dir, n+".log"))
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			if len(lines) > 5 {
				lines = lines[len(lines)-5:]
			}
			fmt.Fprintf(os.Stderr, "--- last lines of %s's log:\n%s\n", n, strings.Join(lines, "\n"))
		}
	}
}

func (s *soak) queryInt(ctx context.Context, sql string, args ...any) (int, error) {
	var n int
	err := s.pool.QueryRow(ctx, sql, args...).Scan(&n)
	return n, err
}

func (s *soak) queryKeys(ctx context.Context, sql string, args ...any) ([]string, error) {
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}
