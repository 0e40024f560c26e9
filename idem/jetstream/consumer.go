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
	"github.com/idemgen/idemgen/idem/internal/batches"
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

// maxReason bounds the Idem-Reason header.
const maxReason = 1024

// ackTimeout bounds the DoubleAck and the dead-letter publish, which run
// even after the context ended: a committed message is acked on the way out.
const ackTimeout = 5 * time.Second

// Consumer feeds the messages of one durable pull consumer to an
// idem.Handler and acts on each as idem.ActionFor says; see the package
// documentation. Create it with NewConsumer, run it with Run.
type Consumer[M any] struct {
	js      jetstream.JetStream
	top     Topology
	handler idem.Handler[M]
	batch   idem.BatchHandler[M] // the handler, when it takes batches and batching is on
	o       options
	ins     *obs.Instruments
	err     error
}

// NewConsumer returns a Consumer of the durable consumer top.Consumer on the
// stream top.Stream that delivers each message to h: a generated wrapper, an
// idemimpl.Inbox, or any idem.Handler. M is the handler's message type; for an
// idem.Message[T] the data is decoded into T, ID is the Nats-Msg-Id header,
// Attempt is NumDelivered and Headers are the message's headers. js's
// connection should reconnect forever (nats.MaxReconnects(-1)): the consumer
// resumes on every reconnect, and Run returns when the connection is closed.
// When h is also an idem.BatchHandler (a generated tx-mode wrapper, an
// idemimpl.Inbox), each worker delivers up to WithBatch messages with one
// DeliverBatch call. Options: WithWorkers, WithPrefetch, WithBatch,
// WithMaxAttempts, WithMaxBodySize, WithDecoder, WithRetryDelay,
// WithBackoff, WithLogger.
func NewConsumer[M any](js jetstream.JetStream, top Topology, h idem.Handler[M], opts ...Option) *Consumer[M] {
	c := &Consumer[M]{js: js, top: top, handler: h, o: newOptions(opts)}
	if bh, ok := h.(idem.BatchHandler[M]); ok && c.o.batchSize() > 1 {
		c.batch = bh
	}
	c.ins = obs.New(c.o.meter)
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
// long) it pulls again with backoff; across a reconnect of the connection the
// pull resumes by itself. It returns an error for a configuration that can
// never work and when the NATS connection is closed for good.
func (c *Consumer[M]) Run(ctx context.Context) error {
	if c.err != nil {
		return c.err
	}
	log := c.o.logger.With("stream", c.top.Stream, "consumer", c.top.Consumer)
	backoff := c.o.backoffMin
	for {
		started := time.Now()
		consumed, err := c.session(ctx, log)
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, nats.ErrConnectionClosed) || c.js.Conn().IsClosed() {
			return fmt.Errorf("jetstream: consumer %s: the NATS connection is closed: %w", c.top.Consumer, err)
		}
		if consumed && time.Since(started) >= c.o.backoffMax {
			backoff = c.o.backoffMin
		}
		log.Warn("jetstream consumer: pulling failed; pulling again", "err", err, "in", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		backoff = min(2*backoff, c.o.backoffMax)
	}
}

// session pulls through one Messages iterator until ctx ends or the iterator
// fails. consumed reports whether it got as far as pulling.
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
	it, err := cons.Messages(jetstream.PullMaxMessages(c.o.prefetch), jetstream.PullExpiry(defaultPullExpiry))
	if err != nil {
		return false, fmt.Errorf("jetstream: pull from %s: %w", c.top.Consumer, err)
	}
	defer it.Stop()
	batch := 1
	if c.batch != nil {
		batch = c.o.batchSize()
	}
	log.Info("jetstream consumer: consuming", "workers", c.o.workers, "prefetch", c.o.prefetch, "batch", batch, "ack_wait", ackWait)

	work := make(chan jetstream.Msg)
	var wg sync.WaitGroup
	for range c.o.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for msg := range work {
				if c.batch == nil {
					c.deliver(ctx, log, msg, ackWait)
					continue
				}
				ms, _ := batches.Collect(ctx, nil, work, msg, c.o.batchSize(), c.o.batchLinger)
				c.deliverBatch(ctx, log, ms, ackWait)
			}
		}()
	}
	defer wg.Wait()
	defer close(work)
	for {
		msg, err := it.Next(jetstream.NextContext(ctx))
		if ctx.Err() != nil {
			if msg != nil {
				_ = msg.Nak()
			}
			returnBuffered(it, log)
			return true, nil
		}
		if err != nil {
			return true, fmt.Errorf("jetstream: pull from %s: %w", c.top.Consumer, err)
		}
		select {
		case work <- msg:
		case <-ctx.Done():
			_ = msg.Nak() // never started: another consumer may take it at once
			returnBuffered(it, log)
			return true, nil
		}
	}
}

// returnBuffered stops the pull and naks the messages pulled ahead and not
// handed to a handler, so that the server delivers them again at once rather
// than after the ack wait.
func returnBuffered(it jetstream.MessagesContext, log *slog.Logger) {
	it.Drain()
	n := 0
	for {
		msg, err := it.Next(jetstream.NextMaxWait(time.Second))
		if err != nil {
			break
		}
		_ = msg.Nak()
		n++
	}
	log.Info("jetstream consumer: stopped; the messages not acked are delivered again", "returned", n)
}

// inHand is a message a worker holds: where it is in the stream, its
// attempt, its logger, and whether it is being settled (then the heartbeat
// leaves it alone).
type inHand struct {
	msg      jetstream.Msg
	seq      uint64
	id       string
	attempt  int
	log      *slog.Logger
	settling atomic.Bool
}

func newInHand(log *slog.Logger, msg jetstream.Msg) *inHand {
	h := &inHand{msg: msg, attempt: 1, id: msg.Headers().Get(jetstream.MsgIDHeader)}
	if md, err := msg.Metadata(); err == nil {
		h.attempt, h.seq = int(md.NumDelivered), md.Sequence.Stream
	}
	h.log = log.With("subject", msg.Subject(), "stream_seq", h.seq, "message_id", h.id, "attempt", h.attempt)
	return h
}

// deliver handles one message and settles it.
func (c *Consumer[M]) deliver(ctx context.Context, log *slog.Logger, msg jetstream.Msg, ackWait time.Duration) {
	h := newInHand(log, msg)
	if ctx.Err() != nil {
		_ = msg.Nak()
		return
	}
	stopBeats := heartbeat([]*inHand{h}, ackWait)
	defer stopBeats()

	var outcome idem.Outcome
	m, err := c.decode(msg, h.id, h.attempt)
	if err == nil {
		outcome, err = c.handler.Deliver(ctx, m)
	}
	c.settle(ctx, h, outcome, err)
}

// deliverBatch handles the messages one worker collected: those that do not
// decode are dead-lettered on their own, the others go to one DeliverBatch
// call, and each is then settled by its own result. The heartbeat covers
// every message until it is settled.
func (c *Consumer[M]) deliverBatch(ctx context.Context, log *slog.Logger, msgs []jetstream.Msg, ackWait time.Duration) {
	if ctx.Err() != nil {
		for _, msg := range msgs {
			_ = msg.Nak() // never started: delivered again at once
		}
		return
	}
	all := make([]*inHand, len(msgs))
	for i, msg := range msgs {
		all[i] = newInHand(log, msg)
	}
	stopBeats := heartbeat(all, ackWait)
	defer stopBeats()

	var (
		ms    []M
		batch []*inHand
	)
	for _, h := range all {
		m, err := c.decode(h.msg, h.id, h.attempt)
		if err != nil {
			c.settle(ctx, h, 0, err)
			continue
		}
		ms = append(ms, m)
		batch = append(batch, h)
	}
	if len(ms) == 0 {
		return
	}
	results := batches.Deliver(ctx, "jetstream", c.batch, ms)
	log.Debug("jetstream consumer: batch delivered", "messages", len(ms))
	for i, h := range batch {
		c.settle(ctx, h, results[i].Outcome, results[i].Err)
	}
}

// settle acts on a message's result as idem.ActionFor says.
func (c *Consumer[M]) settle(ctx context.Context, h *inHand, outcome idem.Outcome, err error) {
	h.settling.Store(true)
	msg, log, attempt, seq, id := h.msg, h.log, h.attempt, h.seq, h.id
	action := idem.ActionFor(err)
	if action == idem.Retry && ctx.Err() != nil {
		_ = msg.Nak()
		log.Info("jetstream consumer: stopping; not acked, the message is delivered again", "err", err)
		return
	}
	if action == idem.Retry && attempt >= c.o.maxAttempts {
		err = fmt.Errorf("jetstream: gave up after %d attempts (WithMaxAttempts): %w", attempt, err)
		action = idem.DeadLetter
	}
	// Settling runs on after ctx ended: what committed is acked.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ackTimeout)
	defer cancel()
	switch action {
	case idem.Ack:
		if ackErr := msg.DoubleAck(sctx); ackErr != nil {
			log.Warn("jetstream consumer: committed but the ack failed; the server delivers it again and the redelivery is a duplicate", "outcome", outcome, "err", err, "ack_err", ackErr)
			return
		}
		log.Debug("jetstream consumer: acked", "outcome", outcome, "err", err)
	case idem.Retry:
		delay := c.o.retryDelay(attempt)
		if nakErr := msg.NakWithDelay(delay); nakErr != nil {
			log.Warn("jetstream consumer: the nak failed; the server delivers it again after the ack wait", "err", err, "nak_err", nakErr)
			return
		}
		c.ins.Retry(sctx, obs.SystemNATS, c.top.Stream)
		log.Warn("jetstream consumer: retry after the delay", "delay", delay, "err", err)
	default:
		dlq := c.top.DeadLetterSubjectName()
		if _, perr := c.js.PublishMsg(sctx, c.deadLetterCopy(msg, seq, id, attempt, err), jetstream.WithMsgID(c.top.Stream+":"+strconv.FormatUint(seq, 10))); perr != nil {
			delay := c.o.retryDelay(attempt)
			_ = msg.NakWithDelay(delay)
			log.Error("jetstream consumer: cannot publish to the dead-letter subject; not terminated, delivered again after the delay", "dead_letter_subject", dlq, "delay", delay, "err", err, "publish_err", perr)
			return
		}
		if termErr := msg.Term(); termErr != nil {
			log.Warn("jetstream consumer: dead-lettered but the term failed; the server delivers it again and the dead-letter stream drops the second copy", "err", err, "term_err", termErr)
			return
		}
		c.ins.DeadLetter(sctx, obs.SystemNATS, c.top.Stream)
		log.Error("jetstream consumer: dead-lettered", "dead_letter_subject", dlq, "err", err)
	}
}

// heartbeat sends InProgress for each message of hs not being settled, at a
// third of the ack wait, until stop is called, so that a handler (or a
// batch) longer than the ack wait keeps its messages.
func heartbeat(hs []*inHand, ackWait time.Duration) (stop func()) {
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
				for _, h := range hs {
					if h.settling.Load() {
						continue
					}
					if err := h.msg.InProgress(); err != nil {
						h.log.Warn("jetstream consumer: InProgress failed; the server may deliver the message again", "err", err)
					}
				}
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// decode turns a message into the handler's message (idem.DecodeDelivery).
func (c *Consumer[M]) decode(msg jetstream.Msg, id string, attempt int) (M, error) {
	return idem.DecodeDelivery[M](msg.Data(), c.o.maxBody, c.o.decode, id, attempt, func() map[string]string { return headerStrings(msg.Headers()) })
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
	text := fmt.Sprint(reason)
	if len(text) > maxReason {
		text = text[:maxReason]
	}
	h.Set(HeaderReason, text)
	h.Set(HeaderAttempt, strconv.Itoa(attempt))
	h.Set(HeaderStream, c.top.Stream)
	h.Set(HeaderSubject, msg.Subject())
	h.Set(HeaderSequence, strconv.FormatUint(seq, 10))
	if id != "" {
		h.Set(HeaderMsgID, id)
	}
	return &nats.Msg{Subject: c.top.DeadLetterSubjectName(), Header: h, Data: msg.Data()}
}
