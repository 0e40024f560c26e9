package consume

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/internal/obs"
	"github.com/idemgen/idemgen/idem/internal/outage"
	"github.com/idemgen/idemgen/idem/internal/pgutil"
	idemwait "github.com/idemgen/idemgen/idem/internal/wait"
)

// Core is the policy of one adapter's consumer: it decodes deliveries,
// delivers them to the handler (alone, or in one DeliverBatch call), decides
// what each result means and hands the decision to the adapter's transport,
// then counts and logs what the transport did.
type Core[M any] struct {
	system  string // the adapter: "rabbitmq", "jetstream", "kafka"
	metrics string // messaging.system: obs.SystemRabbitMQ...
	handler idem.Handler[M]
	batch   idem.BatchHandler[M] // the handler, when it takes batches and batching is on
	cfg     Config
	ins     *obs.Instruments
	delay   func(attempt int) time.Duration
	outages *outage.Log
	now     func() time.Time
}

// New returns the Core of an adapter's consumer. system names the adapter
// in errors and log records, metrics is its messaging.system, batchLimit
// bounds a batch (the prefetch, a poll's records), and delay is the
// adapter's retry delay after a failed attempt.
func New[M any](system, metrics string, h idem.Handler[M], cfg Config, batchLimit int, delay func(attempt int) time.Duration) *Core[M] {
	c := &Core[M]{system: system, metrics: metrics, handler: h, cfg: cfg, ins: obs.New(cfg.Meter), delay: delay,
		outages: outage.New(0), now: time.Now}
	if bh, ok := h.(idem.BatchHandler[M]); ok && cfg.BatchSize(batchLimit) > 1 {
		c.batch = bh
	}
	return c
}

// Config returns the consumer's shared options.
func (c *Core[M]) Config() *Config { return &c.cfg }

// Batch reports how many deliveries a worker collects for one call: 1 when
// the handler takes no batches or batching is off.
func (c *Core[M]) Batch(limit int) int {
	if c.batch == nil {
		return 1
	}
	return c.cfg.BatchSize(limit)
}

// Delivery is one delivery as the transport hands it to the Core.
type Delivery struct {
	Body    []byte
	ID      string
	Attempt int // the attempts counted so far, this one included: waits for a key in progress are not
	Headers func() map[string]string
	// Waiting is when the delivery's key was first found in progress, zero
	// when it never was: the bound of MaxWait counts from it.
	Waiting time.Time
	// Destination is what is consumed (queue, stream, topic): the metrics'
	// and outage records' destination.
	Destination string
	Log         *slog.Logger
}

// Decision is what the transport does with a delivery.
type Decision struct {
	Action  idem.Action
	Outcome idem.Outcome
	// Err is the handler's error; for DeadLetter, the reason.
	Err error
	// Wait marks a Retry of a delivery whose key is in progress
	// (idem.RetryAfter): it counts no attempt, and its Delay is no shorter
	// than what RetryAfter said.
	Wait bool
	// Delay is how long a Retry waits at least.
	Delay time.Duration
	// Stopping marks a Retry while the consumer stops: the transport gives
	// the delivery back to the broker as it is, counting nothing.
	Stopping bool
}

// ErrSkip is what a transport's settle returns for a delivery it did not
// settle and leaves to come again (Kafka's records after one to retry):
// nothing is logged or counted for it.
var ErrSkip = errors.New("consume: not settled")

// Settle is the transport's half: it acts on ds[i] as d says (ack; retry
// after d.Delay; dead-letter with d.Err as the reason) and returns an error
// when it could not. It is called in the order of the deliveries.
type Settle func(ctx context.Context, i int, d Decision) error

// Handle decodes ds, delivers them (one DeliverBatch call when the handler
// takes batches and batching is on, else one Deliver each), decides and settles each in order, and returns the first error of
// settle (ErrSkip aside).
func (c *Core[M]) Handle(ctx context.Context, ds []Delivery, settle Settle) error {
	var (
		first error
		msgs  []M
		index []int // of msgs in ds
	)
	done := func(i int, outcome idem.Outcome, err error) {
		if serr := c.settle(ctx, i, ds[i], outcome, err, settle); serr != nil && first == nil {
			first = serr
		}
	}
	results := make([]idem.Result[idem.None], len(ds))
	for i, d := range ds {
		msg, err := Decode[M](d.Body, c.cfg.MaxBody, c.cfg.Decode, d.ID, d.Attempt, d.Headers)
		if err != nil {
			results[i].Err = err
			continue
		}
		msgs = append(msgs, msg)
		index = append(index, i)
	}
	switch {
	case c.batch == nil:
		for k, msg := range msgs {
			results[index[k]].Outcome, results[index[k]].Err = c.handler.Deliver(ctx, msg)
		}
	case len(msgs) > 0:
		rs := c.batch.DeliverBatch(ctx, msgs)
		if len(rs) != len(msgs) {
			err := fmt.Errorf("%s: DeliverBatch returned %d results for %d messages", c.system, len(rs), len(msgs))
			rs = make([]idem.Result[idem.None], len(msgs))
			for k := range rs {
				rs[k].Err = err
			}
		}
		for k, r := range rs {
			results[index[k]] = r
		}
		ds[0].Log.Debug(c.system+" consumer: batch delivered", "messages", len(msgs))
	}
	c.hold(ctx, ds, msgs, index, results)
	for i := range ds {
		done(i, results[i].Outcome, results[i].Err)
	}
	return first
}

// holdMax bounds the wait between two tries of deliveries held while no
// primary can be reached: the time they lose after it is back.
const holdMax = time.Second

// outageKey is the outage log's destination for a database that cannot be
// reached.
const outageKey = "database"

// hold delivers again, in place, the deliveries whose database could not
// be reached (pgutil.Unreachable), with a backoff of at most holdMax. It
// stops when none is left or ctx ends. A failover or a restart of the
// database is no fault of the message. So the deliveries stay in hand,
// unsettled: the outage spends none of their attempts, dead-letters none,
// and sends none through the broker's retry path. A connection lost in the
// middle of a delivery is not held. It may be the message's doing (a
// statement that crashes the server): it takes the retry path, counting
// an attempt.
func (c *Core[M]) hold(ctx context.Context, ds []Delivery, msgs []M, index []int, results []idem.Result[idem.None]) {
	held := make([]int, 0, len(msgs)) // positions in msgs
	for n := 1; ; n++ {
		held = held[:0]
		for k := range msgs {
			if pgutil.Unreachable(results[index[k]].Err) {
				held = append(held, k)
			}
		}
		log := ds[0].Log
		if len(held) == 0 {
			if n > 1 {
				c.outages.OK(context.WithoutCancel(ctx), log, outageKey, c.system+" consumer: the database is reachable again; held deliveries go on")
			}
			return
		}
		delay := idemwait.Backoff(n, holdMax)
		c.outages.Fail(context.WithoutCancel(ctx), log, slog.LevelWarn, outageKey, len(held), results[index[held[0]]].Err,
			c.system+" consumer: the database cannot be reached; holding the deliveries (no attempt counted) and trying again", "retry_in", delay)
		if !idemwait.Sleep(ctx, delay) {
			return // stopping: the held deliveries are given back
		}
		if c.batch == nil {
			for _, k := range held {
				results[index[k]].Outcome, results[index[k]].Err = c.handler.Deliver(ctx, msgs[k])
			}
			continue
		}
		again := make([]M, len(held))
		for j, k := range held {
			again[j] = msgs[k]
		}
		rs := c.batch.DeliverBatch(ctx, again)
		for j, k := range held {
			if j < len(rs) {
				results[index[k]] = rs[j]
			} else {
				results[index[k]].Err = fmt.Errorf("%s: DeliverBatch returned %d results for %d messages", c.system, len(rs), len(again))
			}
		}
	}
}

// Decide says what a delivery's result means: idem.ActionFor, then
// WithMaxAttempts for a failure, and for a key in progress a wait of at
// least idem.RetryAfter that counts no attempt, bounded by WithMaxWait.
func (c *Core[M]) Decide(ctx context.Context, d Delivery, outcome idem.Outcome, err error) Decision {
	dec := Decision{Action: idem.ActionFor(err), Outcome: outcome, Err: err}
	if dec.Action != idem.Retry {
		return dec
	}
	if ctx.Err() != nil {
		dec.Stopping = true
		return dec
	}
	if after, ok := idem.RetryAfter(err); ok {
		since := d.Waiting
		if since.IsZero() {
			since = c.now()
		}
		if waited := c.now().Sub(since); waited >= c.cfg.MaxWait {
			dec.Action = idem.DeadLetter
			dec.Err = fmt.Errorf("%s: the key stayed in progress for %v, longer than WithMaxWait (%v): %w", c.system, waited.Round(time.Second), c.cfg.MaxWait, err)
			return dec
		}
		dec.Wait, dec.Delay = true, max(after, c.delay(1))
		return dec
	}
	if d.Attempt >= c.cfg.MaxAttempts {
		dec.Action = idem.DeadLetter
		dec.Err = fmt.Errorf("%s: gave up after %d attempts (WithMaxAttempts): %w", c.system, d.Attempt, err)
		return dec
	}
	dec.Delay = c.delay(d.Attempt)
	return dec
}

// settle decides, has the transport settle, and counts and logs the result.
func (c *Core[M]) settle(ctx context.Context, i int, d Delivery, outcome idem.Outcome, err error, settle Settle) error {
	dec := c.Decide(ctx, d, outcome, err)
	serr := settle(ctx, i, dec)
	if errors.Is(serr, ErrSkip) {
		return nil
	}
	log := d.Log
	// Counting and logging run on after ctx ended: what was settled was.
	mctx := context.WithoutCancel(ctx)
	what := c.system + " consumer: "
	if serr != nil {
		if dec.Action == idem.Ack && !dec.Stopping {
			log.Warn(what+"committed but the ack failed; the broker delivers it again and the redelivery is a duplicate", "outcome", dec.Outcome, "err", dec.Err, "ack_err", serr)
			return serr
		}
		log.Error(what+"cannot "+verb(dec)+"; not settled, the broker delivers it again", "err", dec.Err, "settle_err", serr)
		return serr
	}
	switch {
	case dec.Stopping:
		log.Info(what+"stopping; not acked, the delivery comes again", "err", dec.Err)
	case dec.Action == idem.Ack:
		c.outages.OK(mctx, log, d.Destination, what+"deliveries succeed again")
		log.Debug(what+"acked", "outcome", dec.Outcome, "err", dec.Err)
	case dec.Action == idem.Retry && dec.Wait:
		c.ins.Retry(mctx, c.metrics, d.Destination)
		log.Info(what+"the key is in progress; retried once it can be claimed, not counted as an attempt", "delay", dec.Delay, "waiting_since", d.Waiting, "err", dec.Err)
	case dec.Action == idem.Retry:
		c.ins.Retry(mctx, c.metrics, d.Destination)
		c.outages.Fail(mctx, log, slog.LevelWarn, d.Destination, 1, dec.Err, what+"retry after the delay", "delay", dec.Delay)
	default:
		c.ins.DeadLetter(mctx, c.metrics, d.Destination)
		log.Error(what+"dead-lettered", "err", dec.Err)
	}
	return nil
}

func verb(d Decision) string {
	switch {
	case d.Stopping:
		return "give the delivery back"
	case d.Action == idem.Retry:
		return "route the delivery to its retry"
	}
	return "dead-letter"
}

// Stopped returns the decision for deliveries the consumer did not start
// because it stops.
func Stopped() Decision { return Decision{Action: idem.Retry, Stopping: true} }
