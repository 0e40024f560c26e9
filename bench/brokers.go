package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemgen/idemgen/bench/internal/mdtable"
	"github.com/idemgen/idemgen/bench/internal/procstat"
	"github.com/idemgen/idemgen/bench/ledger"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/relay"
)

// The brokers part puts the generated wrapper between real brokers and the
// database, through idem's adapters (idem/rabbitmq, idem/jetstream,
// idem/kafka), and measures each against the same broker library with no
// database, side by side, the rounds interleaved:
//
//   - consume: a backlog of ledger.Deposit messages consumed through the
//     adapter into the generated wrapper (ledger.PostIdem: decode, claim,
//     UPDATE, commit, then ack), at each concurrency of -workers, against a
//     plain consumer of the same library that decodes and acks the same
//     messages at the same concurrency (the ceiling);
//   - relay: an outbox backlog published by relay.New through the
//     adapter's publisher, against a plain publisher of the same library
//     sending the same messages in batches of the relay's size, each
//     confirmed (RabbitMQ publisher confirms, JetStream PubAcks, Kafka
//     produce acks from the idempotent producer), and against the same relay
//     with the outbox part's recording publisher, which confirms at once
//     (once a round: what the relay does with a broker that costs nothing);
//   - the Watermill comparison (watermill.go).
//
// RabbitMQ and NATS are the servers at -amqp and -nats; Kafka is kfake, an
// in-process cluster (no Kafka server runs here), one per cell.

// brokerNames are the brokers of the part, in the order of the tables.
var brokerNames = []string{"rabbitmq", "jetstream", "kafka"}

// wireMsg is one message of a source's backlog: the broker's message id and
// the JSON body.
type wireMsg struct {
	id   string
	body []byte
}

// brokerKind is one broker under test.
type brokerKind interface {
	name() string
	// source creates a fresh work queue (stream, topic) holding msgs,
	// spread over partitions where the broker has them.
	source(ctx context.Context, tag string, msgs []wireMsg, partitions int) (source, error)
	// sink creates a fresh destination for published messages.
	sink(ctx context.Context, tag string, partitions int) (sink, error)
	close()
}

// source is a work queue with its backlog.
type source interface {
	// consumeIdem runs the adapter's consumer with h until ctx ends.
	consumeIdem(ctx context.Context, h idem.Handler[ledger.Deposit], workers int) error
	// consumeRaw consumes with the broker library alone until ctx ends:
	// decode each message, ack it, then call done.
	consumeRaw(ctx context.Context, workers int, done func()) error
	// settled says whether every message was acknowledged (after the
	// consumer stopped).
	settled(ctx context.Context) error
	close()
}

// sink is a destination the relay and the raw publisher publish to.
type sink interface {
	// publisher is the adapter's publisher for relay.Relay, routing every
	// outbox message to the sink.
	publisher() (idem.Publisher, func())
	// rawPublish publishes msgs with the broker library alone, batch at a
	// time, each confirmed, and returns once all are.
	rawPublish(ctx context.Context, msgs []idem.OutgoingMessage, batch int) error
	// count is how many messages the sink holds.
	count(ctx context.Context) (int, error)
	close()
}

// brokersResults is what the brokers part measured.
type brokersResults struct {
	brokers    []string
	workers    []int
	msgs       int // backlog of each consume cell
	relayRows  int // backlog of each relay cell
	partitions int // Kafka partitions (and the number of workers it can use)
	consume    map[brkKey]*cell
	relay      map[brkKey]*cell
	peer       *peerResults
	order      [][]string
	amqpURL    string
	natsURL    string
}

// brkKey is one cell: a broker, a concurrency (0 for the relay cells), and
// whether it is the raw library (the ceiling) or idem's adapter.
type brkKey struct {
	broker  string
	workers int
	raw     bool
}

func (r *brokersResults) consumeCell(b string, workers int, raw bool) *cell {
	return r.consume[brkKey{b, workers, raw}]
}
func (r *brokersResults) relayCell(b string, raw bool) *cell { return r.relay[brkKey{b, 0, raw}] }

// quietLog discards the adapters' and the relays' log lines.
var quietLog = slog.New(slog.DiscardHandler)

func newBroker(ctx context.Context, cfg *config, name string) (brokerKind, error) {
	switch name {
	case "rabbitmq":
		return newRabbit(cfg.amqpURL)
	case "jetstream":
		return newJetStream(ctx, cfg.natsURL)
	case "kafka":
		return kafkaKind{}, nil
	}
	return nil, fmt.Errorf("unknown broker %q", name)
}

func runBrokers(ctx context.Context, cfg *config) (*brokersResults, error) {
	res := &brokersResults{
		brokers: cfg.brokers, workers: cfg.workers, msgs: roundUp(cfg.brkMsgs, fillMessages), partitions: slices.Max(cfg.workers),
		consume: map[brkKey]*cell{}, relay: map[brkKey]*cell{}, amqpURL: cfg.amqpURL, natsURL: cfg.natsURL,
	}
	res.relayRows = res.msgs
	res.relay[brkKey{recordingName, 0, false}] = &cell{}
	kinds := map[string]brokerKind{}
	for _, name := range cfg.brokers {
		k, err := newBroker(ctx, cfg, name)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		defer k.close()
		kinds[name] = k
		for _, n := range cfg.workers {
			res.consume[brkKey{name, n, false}] = &cell{}
			res.consume[brkKey{name, n, true}] = &cell{}
		}
		res.relay[brkKey{name, 0, false}] = &cell{}
		res.relay[brkKey{name, 0, true}] = &cell{}
	}
	peer := slices.Contains(cfg.brokers, "rabbitmq")
	if peer {
		res.peer = newPeerResults(cfg)
	}
	total := cfg.rounds * (len(cfg.brokers)*(2*len(cfg.workers)+2) + 1)
	if peer {
		total += cfg.rounds * res.peer.runsPerRound()
	}
	done := 0
	step := func(format string, args ...any) {
		done++
		logf("brokers %d/%d: %s", done, total, fmt.Sprintf(format, args...))
	}
	for round := range cfg.rounds {
		var order []string
		recording := func() error {
			step("round %d, publish, relay.Relay with the recording publisher", round+1)
			smp, err := runPublishCell(ctx, cfg, recordingKind{}, res.partitions, res.relayRows, false)
			if err != nil {
				return fmt.Errorf("brokers round %d, publish, relay.Relay with the recording publisher: %w", round+1, err)
			}
			logf("    %s msgs/s", mdtable.Thousands(smp.rate()))
			c := res.relayCell(recordingName, false)
			c.samples = append(c.samples, smp)
			order = append(order, "relay.Relay, recording publisher")
			return nil
		}
		if round%2 == 0 {
			if err := recording(); err != nil {
				return nil, err
			}
		}
		for bi := range cfg.brokers {
			name := cfg.brokers[(bi+round)%len(cfg.brokers)]
			k := kinds[name]
			for wi, n := range cfg.workers {
				for _, raw := range pairOrder(round + wi) {
					step("round %d, %s, consume, %d worker(s), %s", round+1, name, n, rawName(raw))
					smp, err := runConsumeCell(ctx, cfg, k, n, res.partitions, res.msgs, raw)
					if err != nil {
						return nil, fmt.Errorf("brokers round %d, %s, consume at %d, %s: %w", round+1, name, n, rawName(raw), err)
					}
					logf("    %s msgs/s", mdtable.Thousands(smp.rate()))
					c := res.consumeCell(name, n, raw)
					c.samples = append(c.samples, smp)
					order = append(order, fmt.Sprintf("%s consume %s at %d", name, rawName(raw), n))
				}
			}
			for _, raw := range pairOrder(round) {
				step("round %d, %s, publish, %s", round+1, name, relayName(raw))
				smp, err := runPublishCell(ctx, cfg, k, res.partitions, res.relayRows, raw)
				if err != nil {
					return nil, fmt.Errorf("brokers round %d, %s, publish, %s: %w", round+1, name, relayName(raw), err)
				}
				logf("    %s msgs/s", mdtable.Thousands(smp.rate()))
				c := res.relayCell(name, raw)
				c.samples = append(c.samples, smp)
				order = append(order, fmt.Sprintf("%s %s", name, relayName(raw)))
			}
		}
		if round%2 == 1 {
			if err := recording(); err != nil {
				return nil, err
			}
		}
		if peer {
			o, err := res.peer.runRound(ctx, cfg, round, step)
			if err != nil {
				return nil, err
			}
			order = append(order, o...)
		}
		res.order = append(res.order, order)
	}
	return res, nil
}

// recordingName keys the relay cell whose publisher is the outbox part's
// recording publisher (recordingKind).
const recordingName = "recording"

// recordingKind is the destination of the relay cell against which the
// adapters' relay cells are set: the recording publisher, which confirms
// every message at once. It has no source and no raw publisher.
type recordingKind struct{}

func (recordingKind) name() string { return recordingName }

func (recordingKind) source(context.Context, string, []wireMsg, int) (source, error) {
	return nil, fmt.Errorf("the recording publisher has no source")
}

func (recordingKind) sink(_ context.Context, tag string, _ int) (sink, error) {
	return recordingSink{rec: newRecorder(), tag: tag}, nil
}

func (recordingKind) close() {}

type recordingSink struct {
	rec *recorder
	tag string
}

func (s recordingSink) publisher() (idem.Publisher, func()) { return s.rec.publisher(s.tag), func() {} }

func (recordingSink) rawPublish(context.Context, []idem.OutgoingMessage, int) error {
	return fmt.Errorf("the recording publisher has no raw publisher")
}

func (s recordingSink) count(context.Context) (int, error) { return s.rec.distinct(), nil }

func (recordingSink) close() {}

// pairOrder alternates which of a pair runs first from round to round.
func pairOrder(i int) []bool {
	if i%2 == 0 {
		return []bool{false, true}
	}
	return []bool{true, false}
}

func rawName(raw bool) string {
	if raw {
		return "raw"
	}
	return "wrapper"
}

func relayName(raw bool) string {
	if raw {
		return "raw publisher"
	}
	return "relay.Relay"
}

// uniqueTag names a cell's queues, streams, topics and groups: no other run
// on the machine uses it.
func uniqueTag(prefix string) string {
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	return "idembench_" + prefix + "_" + strconv.Itoa(os.Getpid()) + "_" + hex.EncodeToString(b)
}

// deposits are the backlog of a consume cell: n new deposits, each with its
// own message id, on accounts spread over the ledger's.
func deposits(tag string, n, accounts int) []wireMsg {
	msgs := make([]wireMsg, n)
	for i := range msgs {
		d := ledger.Deposit{MessageID: tag + "-" + strconv.Itoa(i), Account: int64(i*7919%accounts) + 1, Amount: 1}
		body, _ := json.Marshal(d) // a struct of strings and integers always marshals
		msgs[i] = wireMsg{id: d.MessageID, body: body}
	}
	return msgs
}

// progress counts the messages a consumer finished and times the measured
// ones: from the one after the warm-up (the first tenth) to the last.
type progress struct {
	n, warm, total int64
	mu             sync.Mutex
	tWarm, tEnd    time.Time
	failed         error
	done           chan struct{}
	once           sync.Once
}

func newProgress(total int) *progress {
	return &progress{warm: int64(total / 10), total: int64(total), done: make(chan struct{})}
}

func (p *progress) add() {
	k := atomic.AddInt64(&p.n, 1)
	if k == p.warm || k == p.total {
		now := time.Now()
		p.mu.Lock()
		if k == p.warm {
			p.tWarm = now
		}
		if k == p.total {
			p.tEnd = now
		}
		p.mu.Unlock()
	}
	if k == p.total {
		p.once.Do(func() { close(p.done) })
	}
}

func (p *progress) fail(err error) {
	p.mu.Lock()
	if p.failed == nil {
		p.failed = err
	}
	p.mu.Unlock()
	p.once.Do(func() { close(p.done) })
}

func (p *progress) count() int64 { return atomic.LoadInt64(&p.n) }

// runConsumeCell consumes a fresh backlog of msgs deposits from k at the
// given concurrency: through the adapter into the generated wrapper, in a
// fresh schema (raw false), or with the broker library alone (raw true).
func runConsumeCell(ctx context.Context, cfg *config, k brokerKind, workers, partitions, msgs int, raw bool) (sample, error) {
	tag := uniqueTag("c")
	backlog := deposits(tag, msgs, cfg.accounts)
	src, err := k.source(ctx, tag, backlog, partitions)
	if err != nil {
		return sample{}, fmt.Errorf("create the backlog: %w", err)
	}
	defer src.close()

	prog := newProgress(msgs)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	var s *schema
	if raw {
		go func() { errc <- src.consumeRaw(cctx, workers, prog.add) }()
	} else {
		if s, err = newSchema(ctx, cfg.db, cfg.accounts); err != nil {
			return sample{}, err
		}
		defer s.drop()
		pool, _, err := s.pool(ctx, workers)
		if err != nil {
			return sample{}, err
		}
		defer pool.Close()
		h := counted{gen: ledger.NewPostIdem(pool), prog: prog}
		go func() { errc <- src.consumeIdem(cctx, h, workers) }()
	}
	meter := procstat.Start()
	timeout := time.NewTimer(5 * time.Minute)
	defer timeout.Stop()
	select {
	case <-prog.done:
	case err := <-errc:
		return sample{}, fmt.Errorf("the consumer stopped after %d of %d messages: %v", prog.count(), msgs, err)
	case <-timeout.C:
		cancel()
		<-errc
		return sample{}, fmt.Errorf("consumed %d of %d messages in 5 minutes", prog.count(), msgs)
	case <-ctx.Done():
		return sample{}, ctx.Err()
	}
	clientCPU, busy := meter.Stop()
	cancel()
	if err := <-errc; err != nil {
		return sample{}, fmt.Errorf("the consumer's Run: %w", err)
	}
	if prog.failed != nil {
		return sample{}, prog.failed
	}
	if s != nil {
		pool, _, err := s.pool(ctx, 1)
		if err != nil {
			return sample{}, err
		}
		defer pool.Close()
		var rows int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM idem_bench_ledger`).Scan(&rows); err != nil {
			return sample{}, err
		}
		if rows != msgs {
			return sample{}, fmt.Errorf("the inbox holds %d keys after %d messages", rows, msgs)
		}
	}
	if err := src.settled(ctx); err != nil {
		return sample{}, fmt.Errorf("after the consumer stopped: %w", err)
	}
	prog.mu.Lock()
	defer prog.mu.Unlock()
	return sample{msgs: prog.total - prog.warm, elapsed: prog.tEnd.Sub(prog.tWarm), clientCPU: clientCPU, serverCPU: -1, busy: busy}, nil
}

// runPublishCell publishes rows messages to a fresh sink of k: an outbox
// backlog written beforehand through the publishing wrapper, published by
// one relay.Relay through the adapter's publisher (raw false), or the same
// messages (the same ids and bodies) through the broker library alone, in
// batches of the relay's size (raw true). The time runs from the start of
// the relay (of the first publish) until every message was confirmed and,
// for the relay, marked published.
func runPublishCell(ctx context.Context, cfg *config, k brokerKind, partitions, rows int, raw bool) (sample, error) {
	tag := uniqueTag("p")
	dst, err := k.sink(ctx, tag, partitions)
	if err != nil {
		return sample{}, fmt.Errorf("create the destination: %w", err)
	}
	defer dst.close()
	deliveries := rows / fillMessages
	var elapsed time.Duration
	var clientCPU time.Duration
	var busy float64
	if raw {
		msgs, err := outgoing(tag, deliveries, cfg.accounts)
		if err != nil {
			return sample{}, err
		}
		meter := procstat.Start()
		start := time.Now()
		if err := dst.rawPublish(ctx, msgs, relay.DefaultBatchSize); err != nil {
			return sample{}, err
		}
		elapsed = time.Since(start)
		clientCPU, busy = meter.Stop()
	} else {
		s, err := newOutboxSchema(ctx, cfg.db, cfg.accounts)
		if err != nil {
			return sample{}, err
		}
		defer s.drop()
		pool, _, err := s.pool(ctx, fillWorkers)
		if err != nil {
			return sample{}, err
		}
		defer pool.Close()
		if err := fillBacklogTagged(ctx, pool, tag, deliveries, cfg.accounts); err != nil {
			return sample{}, fmt.Errorf("write the backlog: %w", err)
		}
		if _, err := pool.Exec(ctx, `VACUUM ANALYZE idem_outbox`); err != nil {
			return sample{}, err
		}
		relayPool, _, err := s.pool(ctx, 3)
		if err != nil {
			return sample{}, err
		}
		defer relayPool.Close()
		pub, closePub := dst.publisher()
		defer closePub()
		var confirmed atomic.Int64
		counted := idem.PublisherFunc(func(ctx context.Context, msgs []idem.OutgoingMessage) []error {
			errs := pub.Publish(ctx, msgs)
			for _, err := range errs {
				if err == nil {
					confirmed.Add(1)
				}
			}
			return errs
		})
		rctx, cancel := context.WithCancel(ctx)
		defer cancel()
		relay := relay.New(relayPool, counted, relay.WithID(tag), relay.WithLogger(quietLog))
		errc := make(chan error, 1)
		meter := procstat.Start()
		start := time.Now()
		go func() { errc <- relay.Run(rctx) }()
		deadline := start.Add(5 * time.Minute)
		for {
			if confirmed.Load() >= int64(rows) {
				var pending int
				if err := pool.QueryRow(ctx, `SELECT count(*) FROM idem_outbox`).Scan(&pending); err != nil {
					return sample{}, err
				}
				if pending == 0 {
					break
				}
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				return sample{}, keepFirst(ctx.Err(), fmt.Errorf("the relay published %d of %d rows in 5 minutes", confirmed.Load(), rows))
			}
			select {
			case err := <-errc:
				return sample{}, fmt.Errorf("the relay stopped after %d of %d rows: %v", confirmed.Load(), rows, err)
			case <-time.After(time.Millisecond):
			}
		}
		elapsed = time.Since(start)
		clientCPU, busy = meter.Stop()
		cancel()
		if err := <-errc; err != nil {
			return sample{}, fmt.Errorf("the relay's Run: %w", err)
		}
	}
	n, err := dst.count(ctx)
	if err != nil {
		return sample{}, fmt.Errorf("count the published messages: %w", err)
	}
	if n != rows {
		return sample{}, fmt.Errorf("the destination holds %d messages after %d were published", n, rows)
	}
	return sample{msgs: int64(rows), elapsed: elapsed, clientCPU: clientCPU, serverCPU: -1, busy: busy}, nil
}

// outgoing are the messages the relay publishes for a backlog of deliveries
// written by fillBacklogTagged: the same stable ids, destinations and
// bodies, for the raw publisher.
func outgoing(tag string, deliveries, accounts int) ([]idem.OutgoingMessage, error) {
	var msgs []idem.OutgoingMessage
	for i := range deliveries {
		d := backlogDeposit(tag, i, accounts)
		for seq := range fillMessages {
			id, err := ledger.OutgoingID(d, seq)
			if err != nil {
				return nil, err
			}
			body, err := json.Marshal(ledger.Credited{MessageID: d.MessageID, Seq: seq, Account: d.Account, Amount: d.Amount})
			if err != nil {
				return nil, err
			}
			msgs = append(msgs, idem.OutgoingMessage{ID: id, Destination: ledger.CreditedDestination, Payload: body, Attempt: 1})
		}
	}
	return msgs, nil
}

// backlogDeposit is the i-th delivery of a publish cell's backlog.
func backlogDeposit(tag string, i, accounts int) ledger.Deposit {
	return ledger.Deposit{MessageID: tag + "-" + strconv.Itoa(i), Account: int64(i%accounts) + 1, Amount: 1}
}

// fillBacklogTagged is fillBacklog with the deliveries of backlogDeposit, so
// that outgoing knows the messages they publish.
func fillBacklogTagged(ctx context.Context, pool idem.DB, tag string, deliveries, accounts int) error {
	in := ledger.NewPublishingPost(pool, fillMessages, idem.WithoutNotify())
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for g := range fillWorkers {
		wg.Go(func() {
			for i := g; i < deliveries; i += fillWorkers {
				if _, _, err := in.Handle(ctx, backlogDeposit(tag, i, accounts)); err != nil {
					mu.Lock()
					first = keepFirst(first, err)
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	return first
}

// counted is the generated wrapper with each processed message counted. It
// is an idem.BatchHandler, as the wrapper is, so the adapters deliver what
// their broker hands them at once through DeliverBatch (their default).
type counted struct {
	gen  *ledger.PostIdem
	prog *progress
}

func (c counted) Deliver(ctx context.Context, msg ledger.Deposit) (idem.Outcome, error) {
	o, err := c.gen.Deliver(ctx, msg)
	c.note(msg, o, err)
	return o, err
}

func (c counted) DeliverBatch(ctx context.Context, msgs []ledger.Deposit) []idem.Result[idem.None] {
	results := c.gen.DeliverBatch(ctx, msgs)
	for i, r := range results {
		c.note(msgs[i], r.Outcome, r.Err)
	}
	return results
}

func (c counted) note(msg ledger.Deposit, o idem.Outcome, err error) {
	switch {
	case err != nil:
	case o == idem.Processed:
		c.prog.add()
	default:
		c.prog.fail(fmt.Errorf("message %s: outcome %v, want processed (a redelivery in a clean run)", msg.MessageID, o))
	}
}
