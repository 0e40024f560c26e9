package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	wmsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemgen/idemgen/bench/internal/mdtable"
	"github.com/idemgen/idemgen/bench/internal/stats"
	"github.com/idemgen/idemgen/bench/ledger"
	"github.com/idemgen/idemgen/idem/consumer"
	"github.com/idemgen/idemgen/idem/rabbitmq"
	"github.com/idemgen/idemgen/idem/relay"
)

// The peer comparison: the outbox a Go team would otherwise pick, Watermill's
// (github.com/ThreeDotsLabs/watermill-sql publishing inside the business
// transaction through a forwarder.Publisher, and the forwarder component
// relaying the table to RabbitMQ through watermill-amqp), against idemgen's
// (the business write and idem.Outbox's row in the wrapper's transaction,
// relay.New publishing through idem/rabbitmq), the same messages to the
// same RabbitMQ, received by the same plain amqp091 consumer.
//
// Each side runs a burst (as many messages as -peermsgs, the producers
// committing as fast as they can while the relay runs: throughput from the
// first commit to the last delivery), a backlog (the same messages committed
// before the relay starts: the relay's own throughput, from its start to the
// last delivery) and a steady rate (-obxrate messages per second for the
// warm-up and -duration: latency from each commit to its receipt).

// peerSide is one outbox under comparison.
type peerSide struct {
	name      string
	watermill bool
	poll      time.Duration // watermill's subscriber PollInterval
}

// peerSides are the outboxes compared, in table order: idemgen with its
// defaults, Watermill with its defaults, and Watermill with a short poll.
var peerSides = []peerSide{
	{name: "idemgen (relay.New, defaults)"},
	{name: "Watermill (forwarder, defaults: 1s poll)", watermill: true, poll: time.Second},
	{name: "Watermill (forwarder, 10ms poll)", watermill: true, poll: 10 * time.Millisecond},
}

// wmForwarderTopic is the SQL topic the forwarder reads (a table in each
// run's fresh schema).
const wmForwarderTopic = "idembench_forward"

// peerMode is how a run's messages are committed.
type peerMode int

const (
	modeBurst peerMode = iota
	modeBacklog
	modeSteady
)

var peerModes = []peerMode{modeBurst, modeBacklog, modeSteady}

func (m peerMode) String() string {
	return [...]string{"burst", "backlog", "steady"}[m]
}

type peerKey struct {
	side int
	mode peerMode
}

// peerRun is one run of one side.
type peerRun struct {
	msgs    int           // measured messages
	elapsed time.Duration // from the first measured commit (for a backlog: the relay's start) to the last receipt
	commits time.Duration // from the first measured commit to the last
	lat     []time.Duration
	dups    int // receipts of a message received before
}

func (r peerRun) rate() float64 { return float64(r.msgs) / r.elapsed.Seconds() }

type peerResults struct {
	runs      map[peerKey][]peerRun
	burst     int
	rate      int
	producers int
	warmup    time.Duration
	duration  time.Duration
}

func newPeerResults(cfg *config) *peerResults {
	// The steady runs go at the first rate of -obxrate.
	rate := cfg.obxRates[0]
	return &peerResults{runs: map[peerKey][]peerRun{}, burst: cfg.peerMsgs, rate: rate, producers: latencyProducers(rate),
		warmup: cfg.warmup, duration: cfg.duration}
}

func (p *peerResults) runsPerRound() int { return len(peerModes) * len(peerSides) }

// runRound runs every side in every mode, the order of the modes and of the
// sides rotating.
func (p *peerResults) runRound(ctx context.Context, cfg *config, round int, step func(string, ...any)) ([]string, error) {
	var order []string
	for mi := range peerModes {
		mode := peerModes[(mi+round)%len(peerModes)]
		for i := range peerSides {
			si := (i + round) % len(peerSides)
			side := peerSides[si]
			step("round %d, outbox peer, %s, %s", round+1, side.name, mode)
			run, err := runPeer(ctx, cfg, side, mode)
			if err != nil {
				return nil, fmt.Errorf("brokers round %d, %s, %s: %w", round+1, side.name, mode, err)
			}
			lat := slices.Sorted(slices.Values(run.lat))
			logf("    %d messages at %s msgs/s: p50 %s, p99 %s", run.msgs, mdtable.Thousands(run.rate()), mdtable.Dur(stats.Percentile(lat, 50)), mdtable.Dur(stats.Percentile(lat, 99)))
			k := peerKey{si, mode}
			p.runs[k] = append(p.runs[k], run)
			order = append(order, fmt.Sprintf("%s %s", side.name, mode))
		}
	}
	return order, nil
}

// runPeer runs one side once: producers commit deposits that each publish
// one ledger.Credited through the side's outbox, its relay publishes them to
// a fresh durable queue, and a plain amqp091 consumer receives them.
func runPeer(ctx context.Context, cfg *config, side peerSide, mode peerMode) (peerRun, error) {
	newSchemaFor := newOutboxSchema
	if side.watermill {
		newSchemaFor = newSchema // watermill creates its own tables
	}
	s, err := newSchemaFor(ctx, cfg.db, cfg.accounts)
	if err != nil {
		return peerRun{}, err
	}
	defer s.drop()
	nProducers := latencyProducers(cfg.obxRates[0])
	producers, relayPool, err := s.latencyPools(ctx, nProducers)
	if err != nil {
		return peerRun{}, err
	}
	defer producers.Close()
	defer relayPool.Close()

	tag := uniqueTag("w")
	rk, err := newRabbit(cfg.amqpURL)
	if err != nil {
		return peerRun{}, err
	}
	defer rk.close()
	if err := rk.declareQueue(tag); err != nil {
		return peerRun{}, err
	}
	defer rk.deleteQueue(tag)

	var total, warm int
	var interval time.Duration
	if mode == modeSteady {
		interval = time.Second / time.Duration(cfg.obxRates[0])
		warm = int(cfg.warmup / interval)
		total = warm + int(cfg.duration/interval)
	} else {
		total = cfg.peerMsgs
	}
	recv, err := startReceiver(cfg.amqpURL, tag, total)
	if err != nil {
		return peerRun{}, err
	}
	defer recv.stop()

	// The relay.
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var startRelay func() (stop func() error, err error)
	var produce func(ctx context.Context, d ledger.Deposit) error
	if side.watermill {
		if err := initWatermill(relayPool); err != nil {
			return peerRun{}, err
		}
		startRelay = func() (func() error, error) {
			return startForwarder(rctx, relayPool, cfg.amqpURL, side.poll)
		}
		produce = func(ctx context.Context, d ledger.Deposit) error { return watermillDeposit(ctx, producers, tag, d) }
	} else {
		pub := rabbitmq.NewPublisher(cfg.amqpURL, rabbitmq.WithRoute(func(string) (string, string) { return "", tag }),
			consumer.WithLogger(quietLog), rabbitmq.WithConnectionName("idem bench peer relay"))
		defer pub.Close()
		startRelay = func() (func() error, error) {
			relay := relay.New(relayPool, pub, relay.WithID(tag), relay.WithLogger(quietLog))
			errc := make(chan error, 1)
			go func() { errc <- relay.Run(rctx) }()
			return func() error { cancel(); return <-errc }, nil
		}
		in := ledger.NewPublishingPost(producers, 1)
		produce = func(ctx context.Context, d ledger.Deposit) error {
			return processed(in.Handle(ctx, d))
		}
	}
	var stopRelay func() error
	defer func() {
		if stopRelay != nil {
			_ = stopRelay()
		}
	}()
	if mode != modeBacklog {
		if stopRelay, err = startRelay(); err != nil {
			return peerRun{}, err
		}
	}

	commits := make([]time.Time, total)
	var (
		next  atomic.Int64
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	start := time.Now()
	for p := range nProducers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(p), uint64(start.UnixNano())))
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= total {
					return
				}
				if mode == modeSteady {
					if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
						time.Sleep(d)
					}
				}
				d := ledger.Deposit{MessageID: tag + "-" + strconv.Itoa(i), Account: rng.Int64N(int64(cfg.accounts)) + 1, Amount: 1}
				if err := produce(ctx, d); err != nil {
					mu.Lock()
					first = keepFirst(first, err)
					mu.Unlock()
					return
				}
				commits[i] = time.Now()
			}
		})
	}
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	if first != nil {
		return peerRun{}, first
	}
	lastCommit := slices.MaxFunc(commits, func(a, b time.Time) int { return a.Compare(b) })
	var relayStart time.Time
	if mode == modeBacklog {
		relayStart = time.Now()
		if stopRelay, err = startRelay(); err != nil {
			return peerRun{}, err
		}
		lastCommit = time.Now() // the backlog's wait runs from the relay's start
	}
	wait := 3*max(side.poll, relay.DefaultPoll) + time.Duration(total)*time.Millisecond + 30*time.Second
	if err := recv.wait(ctx, lastCommit.Add(wait)); err != nil {
		return peerRun{}, fmt.Errorf("%w by %s after the last commit", err, wait)
	}
	stop := stopRelay
	stopRelay = nil
	if err := stop(); err != nil && !errors.Is(err, context.Canceled) {
		return peerRun{}, fmt.Errorf("stop the relay: %w", err)
	}
	recv.stop()
	recv.mu.Lock()
	defer recv.mu.Unlock()

	run := peerRun{msgs: total - warm, dups: recv.dups}
	firstCommit := slices.MinFunc(commits[warm:], func(a, b time.Time) int { return a.Compare(b) })
	var lastReceipt time.Time
	for i := warm; i < total; i++ {
		r := recv.at[i]
		run.lat = append(run.lat, r.Sub(commits[i]))
		if r.After(lastReceipt) {
			lastReceipt = r
		}
	}
	run.elapsed = lastReceipt.Sub(firstCommit)
	if mode == modeBacklog {
		run.elapsed = lastReceipt.Sub(relayStart)
	}
	run.commits = slices.MaxFunc(commits[warm:], func(a, b time.Time) int { return a.Compare(b) }).Sub(firstCommit)
	return run, nil
}

// watermillDeposit is the Watermill side's business transaction, as
// Watermill's documentation writes it: the business write and the
// watermill-sql publish (through forwarder.NewPublisher, so that the
// forwarder relays it to the queue) in one pgx transaction.
func watermillDeposit(ctx context.Context, pool *pgxpool.Pool, queue string, d ledger.Deposit) (err error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback(ctx)
		}
	}()
	if _, err = ledger.Apply(ctx, tx, d); err != nil {
		return err
	}
	pub, err := wmsql.NewPublisher(wmsql.TxFromPgx(tx), wmsql.PublisherConfig{SchemaAdapter: wmsql.DefaultPostgreSQLSchema{}}, nil)
	if err != nil {
		return err
	}
	body, err := json.Marshal(ledger.Credited{MessageID: d.MessageID, Seq: 0, Account: d.Account, Amount: d.Amount})
	if err != nil {
		return err
	}
	fp := forwarder.NewPublisher(pub, forwarder.PublisherConfig{ForwarderTopic: wmForwarderTopic})
	if err = fp.Publish(queue, message.NewMessage(watermill.NewUUID(), body)); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// initWatermill creates the forwarder topic's table and offsets table, as the
// forwarder's subscriber does when it subscribes, for the backlog that is
// written before the forwarder starts.
func initWatermill(pool *pgxpool.Pool) error {
	sub, err := wmsql.NewSubscriber(wmsql.BeginnerFromPgx(pool), wmsql.SubscriberConfig{
		SchemaAdapter: wmsql.DefaultPostgreSQLSchema{}, OffsetsAdapter: wmsql.DefaultPostgreSQLOffsetsAdapter{},
	}, watermill.NopLogger{})
	if err != nil {
		return err
	}
	defer sub.Close()
	return sub.SubscribeInitialize(wmForwarderTopic)
}

// startForwarder runs Watermill's forwarder: a watermill-sql subscriber of
// the forwarder topic (PostgreSQL schema and offsets adapters, the schema
// initialised on subscribing) and a watermill-amqp publisher to durable
// queues with delivery confirmation on (the default is off: without it the
// forwarder would mark rows done before RabbitMQ took them). It returns
// once the forwarder runs and its table exists, with what stops it (the
// forwarder, then the AMQP publisher, which the forwarder does not close).
func startForwarder(ctx context.Context, pool *pgxpool.Pool, amqpURL string, poll time.Duration) (stop func() error, err error) {
	sub, err := wmsql.NewSubscriber(wmsql.BeginnerFromPgx(pool), wmsql.SubscriberConfig{
		SchemaAdapter:    wmsql.DefaultPostgreSQLSchema{},
		OffsetsAdapter:   wmsql.DefaultPostgreSQLOffsetsAdapter{},
		InitializeSchema: true,
		PollInterval:     poll,
	}, watermill.NopLogger{})
	if err != nil {
		return nil, err
	}
	acfg := wmamqp.NewDurableQueueConfig(amqpURL)
	acfg.Publish.ConfirmDelivery = true
	pub, err := wmamqp.NewPublisher(acfg, watermill.NopLogger{})
	if err != nil {
		return nil, err
	}
	fwd, err := forwarder.NewForwarder(sub, pub, watermill.NopLogger{}, forwarder.Config{ForwarderTopic: wmForwarderTopic})
	if err != nil {
		_ = pub.Close()
		return nil, err
	}
	stop = func() error { return errors.Join(fwd.Close(), pub.Close()) }
	errc := make(chan error, 1)
	go func() { errc <- fwd.Run(ctx) }()
	select {
	case <-fwd.Running():
	case err := <-errc:
		_ = pub.Close()
		return nil, fmt.Errorf("the forwarder stopped: %v", err)
	case <-time.After(30 * time.Second):
		_ = stop()
		return nil, fmt.Errorf("the forwarder did not start in 30s")
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var ok bool
		if err := pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, `"watermill_`+wmForwarderTopic+`"`).Scan(&ok); err != nil {
			_ = stop()
			return nil, err
		}
		if ok {
			return stop, nil
		}
		if time.Now().After(deadline) {
			_ = stop()
			return nil, fmt.Errorf("the forwarder's subscriber did not create its table in 30s")
		}
	}
}

// receiver is the plain amqp091 consumer at the end of both outboxes: it
// records when each message (by the index in its MessageID) first arrived.
type receiver struct {
	conn     *amqp.Connection
	mu       sync.Mutex
	at       []time.Time
	got      int
	dups     int
	bad      error
	finished chan struct{}
	once     sync.Once
}

func startReceiver(url, queue string, total int) (*receiver, error) {
	conn, err := amqp.DialConfig(url, amqp.Config{Properties: amqp.Table{"connection_name": "idem bench receiver"}})
	if err != nil {
		return nil, err
	}
	ch, err := conn.Channel()
	if err == nil {
		err = ch.Qos(1000, 0, false)
	}
	var deliveries <-chan amqp.Delivery
	if err == nil {
		deliveries, err = ch.Consume(queue, "", true, false, false, false, nil)
	}
	if err != nil {
		conn.Close()
		return nil, err
	}
	r := &receiver{conn: conn, at: make([]time.Time, total), finished: make(chan struct{})}
	go func() {
		for d := range deliveries {
			now := time.Now()
			var c ledger.Credited
			err := json.Unmarshal(d.Body, &c)
			i := -1
			if err == nil {
				i, err = strconv.Atoi(c.MessageID[strings.LastIndex(c.MessageID, "-")+1:])
			}
			r.mu.Lock()
			switch {
			case err != nil || i < 0 || i >= total:
				r.bad = keepFirst(r.bad, fmt.Errorf("unexpected message %q", d.Body))
			case !r.at[i].IsZero():
				r.dups++
			default:
				r.at[i] = now
				r.got++
				if r.got == total {
					r.once.Do(func() { close(r.finished) })
				}
			}
			r.mu.Unlock()
		}
	}()
	return r, nil
}

// wait waits until every message arrived, or deadline.
func (r *receiver) wait(ctx context.Context, deadline time.Time) error {
	select {
	case <-r.finished:
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Until(deadline)):
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.bad != nil {
		return r.bad
	}
	if r.got < len(r.at) {
		return fmt.Errorf("the receiver got %d of %d messages", r.got, len(r.at))
	}
	return nil
}

func (r *receiver) stop() { _ = r.conn.Close() }
