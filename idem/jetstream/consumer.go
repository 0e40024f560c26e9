package jetstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/internal/consume"
	"github.com/idemgen/idemgen/idem/internal/obs"
)

// Headers the consumer sets on the dead-letter copies.
const (
	// HeaderReason is why the copy was dead-lettered: the error.
	HeaderReason = "Idem-Reason"
	// HeaderAttempt is the attempt (NumDelivered) that was dead-lettered.
	HeaderAttempt = "Idem-Attempt"
	// HeaderStream is the work stream the copy comes from.
	HeaderStream = "Idem-Stream"
	// HeaderSubject is the subject the message was published to.
	HeaderSubject = "Idem-Subject"
	// HeaderSequence is the message's sequence in the work stream.
	HeaderSequence = "Idem-Stream-Seq"
	// HeaderMsgID is the message's own Nats-Msg-Id; the copy's Nats-Msg-Id
	// is "<stream>:<sequence>", so that the dead-letter stream's
	// deduplication drops only a second copy of the same stored message.
	HeaderMsgID = "Idem-Msg-Id"
)

// ackTimeout bounds the DoubleAck and the dead-letter publish, which run
// even after the context ended: a committed message is acked on the way out.
const ackTimeout = 5 * time.Second

// Consumer feeds the messages of one durable pull consumer to an
// idem.Handler and acts on each as idem.ActionFor says; see the package
// documentation. Create it with NewConsumer, run it with Run.
type Consumer[M any] struct {
	js    jetstream.JetStream
	top   Topology
	core  *consume.Core[M]
	waits *consume.Waits[uint64] // by stream sequence
	o     options
	err   error
}

// NewConsumer returns a Consumer of the durable consumer top.Consumer on the
// stream top.Stream that delivers each message to h: a generated wrapper, an
// idemimpl.Inbox, or any idem.Handler. M is the handler's message type; for an
// idem.Message[T] the data is decoded into T, ID is the Nats-Msg-Id header,
// Attempt is NumDelivered and Headers are the message's headers. js's
// connection should reconnect forever (nats.MaxReconnects(-1)): the consumer
// pulls again after every reconnect, and Run returns when the connection is
// closed. When h is also an idem.BatchHandler (a generated tx-mode wrapper,
// an idemimpl.Inbox), each worker delivers up to consumer.WithBatch messages
// with one DeliverBatch call. Options: those of idem/consumer,
// WithPrefetch, WithRetryDelay, WithBackoff.
func NewConsumer[M any](js jetstream.JetStream, top Topology, h idem.Handler[M], opts ...Option) *Consumer[M] {
	c := &Consumer[M]{js: js, top: top, o: newOptions(opts), waits: consume.NewWaits[uint64]()}
	c.core = consume.New("jetstream", obs.SystemNATS, h, c.o.Config, c.o.Prefetch, c.o.retryDelay)
	c.err = top.validate()
	if c.err == nil {
		c.err = c.o.validate("consumer " + top.Consumer)
	}
	if c.err == nil && h == nil {
		c.err = fmt.Errorf("jetstream: consumer %s: no handler", top.Consumer)
	}
	if c.err == nil && js == nil {
		c.err = fmt.Errorf("jetstream: consumer %s: no JetStream", top.Consumer)
	}
	return c
}

// Consume runs a Consumer that delivers to h until ctx ends:
// NewConsumer(js, top, h, opts...).Run(ctx).
func Consume[M any](ctx context.Context, js jetstream.JetStream, top Topology, h idem.Handler[M], opts ...Option) error {
	return NewConsumer(js, top, h, opts...).Run(ctx)
}

// Run consumes until ctx ends and returns nil once every message in hand was
// acked (when it committed) or left for the server to deliver again. When a
// pull fails (the stream or the consumer missing, the server unreachable for
// long) it pulls again with backoff. It returns an error for a configuration
// that can never work, for a handler whose Check finds its tables missing or
// different (idem.ErrNotMigrated, checked before it pulls: nothing is
// consumed), and when the NATS
// connection is closed for good.
func (c *Consumer[M]) Run(ctx context.Context) error {
	if c.err != nil {
		return c.err
	}
	log := c.o.Logger.With("stream", c.top.Stream, "consumer", c.top.Consumer)
	if err := c.core.CheckTables(ctx, log); err != nil {
		return fmt.Errorf("jetstream: consumer %s: %w", c.top.Consumer, err)
	}
	return consume.Sessions(ctx, log, c.o.BackoffMin, c.o.BackoffMax, "jetstream consumer: pulling failed; pulling again",
		func(ctx context.Context) (bool, error) { return c.session(ctx, log) },
		func(err error) error {
			if errors.Is(err, nats.ErrConnectionClosed) || c.js.Conn().IsClosed() {
				return fmt.Errorf("jetstream: consumer %s: the NATS connection is closed: %w", c.top.Consumer, err)
			}
			return nil
		})
}

// session pulls until ctx ends or a pull fails. consumed reports whether it
// got as far as pulling.
//
// It pulls no more than it holds room for (WithPrefetch), and every message
// it pulled is in hand from then on: waiting for a worker, collected for a
// batch or being handled, the heartbeat sends InProgress for it, so that
// none is delivered again while it waits.
//
// Once ctx ended it sends no pull. It gives nothing back (no Nak) while one
// of its pulls may still be answered (see pull). The server would deliver
// what it gives back to that pull, which nobody reads any more.
func (c *Consumer[M]) session(ctx context.Context, log *slog.Logger) (consumed bool, err error) {
	cons, err := c.js.Consumer(ctx, c.top.Stream, c.top.Consumer)
	if err != nil {
		return false, fmt.Errorf("jetstream: look up the consumer %s on the stream %s: %w", c.top.Consumer, c.top.Stream, err)
	}
	info := cons.CachedInfo()
	if info.Config.AckPolicy != jetstream.AckExplicitPolicy {
		return false, fmt.Errorf("jetstream: the consumer %s has ack policy %v; want explicit", c.top.Consumer, info.Config.AckPolicy)
	}
	ackWait := info.Config.AckWait
	if ackWait <= 0 {
		ackWait = defaultAckWaitGuess
	}
	batch := c.core.Batch(c.o.Prefetch)
	log.Info("jetstream consumer: consuming", "workers", c.o.Workers, "prefetch", c.o.Prefetch, "batch", batch, "ack_wait", ackWait)

	held := newHolding(c.o.Prefetch)
	stopBeats := held.heartbeat(ackWait)
	defer stopBeats()
	work := make(chan *inHand, c.o.Prefetch)
	// pulled closes once no pull of the session can be answered any more:
	// what the session gives back after ctx ended waits for it.
	pulled := make(chan struct{})
	var wg sync.WaitGroup
	for range c.o.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for h := range work {
				hs := []*inHand{h}
				if batch > 1 {
					hs, _ = consume.Collect(ctx, nil, work, h, batch, c.o.BatchLinger)
				}
				c.handle(ctx, hs, pulled)
				held.done(hs)
			}
		}()
	}
	defer func() {
		close(work)
		wg.Wait()
	}()
	defer close(pulled) // before the workers are waited for: they wait for it
	for {
		free, ok := held.room(ctx, max(1, c.o.Prefetch/2))
		if !ok {
			log.Info("jetstream consumer: stopped; the messages not acked are delivered again")
			return true, nil
		}
		err := c.pull(ctx, log, cons, held, work, free)
		switch {
		case ctx.Err() != nil:
			return true, nil
		case err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, nats.ErrTimeout):
			return true, fmt.Errorf("jetstream: pull from %s: %w", c.top.Consumer, err)
		}
	}
}

// pull fetches up to free messages (the room reserved for them) and hands
// each to the workers, until the pull ends: all of them came, or it expired.
//
// The pull does not end with ctx. The server answers a pull it holds until
// it expires, also one the client gave up. What goes to an inbox nobody
// reads comes again after the ack wait. Or the server requeues it, and the
// next consumer may get it twice. So when ctx ends, a session that holds
// messages receives the pull to its end. It gives them back (Nak) after
// that, with what the pull brought. On a drained stream this takes until
// the pull expires. A session that holds nothing gives nothing back: it
// drops the pull at once.
func (c *Consumer[M]) pull(ctx context.Context, log *slog.Logger, cons jetstream.Consumer, held *holding, work chan<- *inHand, free int) error {
	pctx, drop := context.WithTimeout(context.WithoutCancel(ctx), defaultPullExpiry)
	defer drop()
	fetched, err := cons.Fetch(free, jetstream.FetchContext(pctx))
	if err != nil {
		held.unreserve(free)
		return err
	}
	n := 0
	defer func() { held.unreserve(free - n) }()
	msgs, stopping, freed := fetched.Messages(), ctx.Done(), (<-chan struct{})(nil)
	for {
		select {
		case msg, ok := <-msgs:
			if !ok {
				return fetched.Error()
			}
			h := c.newInHand(log, msg)
			held.add(h)
			n++
			work <- h // room for it: the holding counts what is in hand
			continue
		case <-stopping:
			stopping, freed = nil, held.freed
		case <-freed:
		}
		if held.empty() {
			drop()
			freed = nil
		}
	}
}

// holding is what a session holds: the messages pulled and not settled,
// which the heartbeat keeps in progress, and the room left for more.
type holding struct {
	mu       sync.Mutex
	size     int
	reserved int // room taken by pulls and messages in hand
	msgs     map[*inHand]struct{}
	freed    chan struct{}
}

func newHolding(size int) *holding {
	return &holding{size: size, msgs: map[*inHand]struct{}{}, freed: make(chan struct{}, 1)}
}

// room waits until at least least (or all the room, when nothing is held)
// is free, reserves it and returns it; ok is false once ctx ended, even
// with room free: no pull starts after the stop.
func (h *holding) room(ctx context.Context, least int) (n int, ok bool) {
	for {
		h.mu.Lock()
		free := h.size - h.reserved
		if ctx.Err() != nil {
			h.mu.Unlock()
			return 0, false
		}
		if free >= least || (free > 0 && h.reserved == 0) {
			h.reserved = h.size
			h.mu.Unlock()
			return free, true
		}
		h.mu.Unlock()
		select {
		case <-ctx.Done():
			return 0, false
		case <-h.freed:
		}
	}
}

// empty reports whether the session holds no message.
func (h *holding) empty() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.msgs) == 0
}

func (h *holding) add(m *inHand) {
	h.mu.Lock()
	h.msgs[m] = struct{}{}
	h.mu.Unlock()
}

// unreserve gives back room a pull reserved and did not fill.
func (h *holding) unreserve(n int) {
	h.mu.Lock()
	h.reserved -= n
	h.mu.Unlock()
	h.signal()
}

// done drops settled messages and gives back their room.
func (h *holding) done(ms []*inHand) {
	h.mu.Lock()
	for _, m := range ms {
		delete(h.msgs, m)
	}
	h.reserved -= len(ms)
	h.mu.Unlock()
	h.signal()
}

func (h *holding) signal() {
	select {
	case h.freed <- struct{}{}:
	default:
	}
}

// heartbeat sends InProgress for each message held and not being settled,
// at a third of the ack wait, until stop is called, so that a message
// waiting for a worker, or a handler (or a batch) longer than the ack wait,
// keeps its messages.
func (h *holding) heartbeat(ackWait time.Duration) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(max(ackWait/3, 10*time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				h.mu.Lock()
				ms := make([]*inHand, 0, len(h.msgs))
				for m := range h.msgs {
					ms = append(ms, m)
				}
				h.mu.Unlock()
				for _, m := range ms {
					if m.settling.Load() {
						continue
					}
					if err := m.msg.InProgress(); err != nil {
						m.log.Warn("jetstream consumer: InProgress failed; the server may deliver the message again", "err", err)
					}
				}
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// inHand is a message the session holds: where it is in the stream, its
// attempt, its logger, and whether it is being settled (then the heartbeat
// leaves it alone).
type inHand struct {
	msg       jetstream.Msg
	seq       uint64
	id        string
	delivered int // NumDelivered
	attempt   int // the attempts counted: NumDelivered less the waits for a key in progress
	waiting   time.Time
	log       *slog.Logger
	settling  atomic.Bool
}

func (c *Consumer[M]) newInHand(log *slog.Logger, msg jetstream.Msg) *inHand {
	h := &inHand{msg: msg, delivered: 1, id: msg.Headers().Get(jetstream.MsgIDHeader)}
	if md, err := msg.Metadata(); err == nil {
		h.delivered, h.seq = int(md.NumDelivered), md.Sequence.Stream
	}
	waits, since := c.waits.Of(h.seq)
	h.attempt, h.waiting = max(h.delivered-waits, 1), since
	h.log = log.With("subject", msg.Subject(), "stream_seq", h.seq, "message_id", h.id, "attempt", h.attempt)
	return h
}

// handle hands the messages a worker took to the consumer's core, which
// settles each through settle. pulled closes once no pull of the session
// can be answered any more.
func (c *Consumer[M]) handle(ctx context.Context, hs []*inHand, pulled <-chan struct{}) {
	if ctx.Err() != nil {
		<-pulled
		for _, h := range hs {
			_ = h.msg.Nak() // never started: delivered again at once
		}
		return
	}
	ds := make([]consume.Delivery, len(hs))
	for i, h := range hs {
		ds[i] = consume.Delivery{
			Body: h.msg.Data(), ID: h.id, Attempt: h.attempt, Waiting: h.waiting, Destination: c.top.Stream,
			Headers: func() map[string]string { return headerStrings(h.msg.Headers()) }, Log: h.log,
		}
	}
	_ = c.core.Handle(ctx, ds, func(ctx context.Context, i int, dec consume.Decision) error {
		return c.settle(ctx, hs[i], dec, pulled)
	})
}

// settle is the transport of a decision: a DoubleAck; a NakWithDelay (for a
// key in progress, remembered as a wait, which counts no attempt); a copy on
// the dead-letter subject and a Term; or, when stopping, a Nak once pulled
// closed.
func (c *Consumer[M]) settle(ctx context.Context, h *inHand, dec consume.Decision, pulled <-chan struct{}) error {
	h.settling.Store(true)
	msg := h.msg
	if dec.Stopping {
		<-pulled
		return msg.Nak()
	}
	// Settling runs on after ctx ended: what committed is acked.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ackTimeout)
	defer cancel()
	switch dec.Action {
	case idem.Ack:
		c.waits.Forget(h.seq)
		return msg.DoubleAck(sctx)
	case idem.Retry:
		if dec.Wait {
			now := time.Now()
			c.waits.Wait(h.seq, now)
			c.waits.Prune(now.Add(-2 * c.o.MaxWait))
		}
		return msg.NakWithDelay(dec.Delay)
	default:
		if _, err := c.js.PublishMsg(sctx, c.deadLetterCopy(msg, h.seq, h.id, h.attempt, dec.Err), jetstream.WithMsgID(c.top.Stream+":"+strconv.FormatUint(h.seq, 10))); err != nil {
			// Not terminated: delivered again after the delay, and
			// dead-lettered then.
			_ = msg.NakWithDelay(c.o.retryDelay(h.attempt))
			return fmt.Errorf("publish to the dead-letter subject %s: %w", c.top.DeadLetterSubjectName(), err)
		}
		c.waits.Forget(h.seq)
		return msg.Term()
	}
}

// headerStrings returns the headers, the first value of each.
func headerStrings(h nats.Header) map[string]string {
	if len(h) == 0 {
		return nil
	}
	out := make(map[string]string, len(h))
	for k, v := range h {
		if len(v) > 0 {
			out[k] = v[0]
		}
	}
	return out
}

func (c *Consumer[M]) deadLetterCopy(msg jetstream.Msg, seq uint64, id string, attempt int, reason error) *nats.Msg {
	h := nats.Header{}
	for k, v := range msg.Headers() {
		if k != jetstream.MsgIDHeader {
			h[k] = append([]string(nil), v...)
		}
	}
	h.Set(HeaderReason, consume.Reason(reason))
	h.Set(HeaderAttempt, strconv.Itoa(attempt))
	h.Set(HeaderStream, c.top.Stream)
	h.Set(HeaderSubject, msg.Subject())
	h.Set(HeaderSequence, strconv.FormatUint(seq, 10))
	if id != "" {
		h.Set(HeaderMsgID, id)
	}
	return &nats.Msg{Subject: c.top.DeadLetterSubjectName(), Header: h, Data: msg.Data()}
}
