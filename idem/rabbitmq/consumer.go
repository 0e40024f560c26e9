package rabbitmq

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/internal/consume"
	"github.com/idemgen/idemgen/idem/internal/obs"
)

// Headers the consumer sets on the copies it routes.
const (
	// HeaderAttempt is the attempt number of the next delivery of a retry
	// copy, and the attempt that failed on a dead-letter copy.
	HeaderAttempt = "x-idem-attempt"
	// HeaderReason is why a dead-letter copy was dead-lettered: the error.
	HeaderReason = "x-idem-reason"
	// HeaderQueue is the work queue a dead-letter copy comes from.
	HeaderQueue = "x-idem-queue"
	// HeaderNotBefore is when (Unix milliseconds) a retry copy of a
	// delivery whose key was in progress may be handled again
	// (idem.RetryAfter): until then the consumer routes it back to the
	// retry queue, without calling the handler or counting an attempt.
	HeaderNotBefore = "x-idem-not-before"
	// HeaderWaiting is when (Unix milliseconds) the delivery's key was
	// first found in progress; consumer.WithMaxWait counts from it.
	HeaderWaiting = "x-idem-waiting-since"
)

// Consumer feeds the deliveries of one work queue to an idem.Handler and acts
// on each as idem.ActionFor says; see the package documentation. Create it
// with NewConsumer, run it with Run.
type Consumer[M any] struct {
	url  string
	top  Topology
	core *consume.Core[M]
	o    options
	err  error // of the configuration; Run returns it
}

// NewConsumer returns a Consumer of top.Queue on the broker at url (an
// amqp:// or amqps:// URL) that delivers each message to h: a generated
// wrapper, an idemimpl.Inbox, or any idem.Handler. M is the handler's message
// type; for an idem.Message[T] the body is decoded into T and ID, Attempt and
// Headers come from the delivery. When h is also an idem.BatchHandler (a
// generated tx-mode wrapper, an idemimpl.Inbox), each worker delivers up to
// consumer.WithBatch deliveries with one DeliverBatch call. Options: those
// of idem/consumer, WithPrefetch, WithBackoff, WithConfig,
// WithConnectionName.
func NewConsumer[M any](url string, top Topology, h idem.Handler[M], opts ...Option) *Consumer[M] {
	c := &Consumer[M]{url: url, top: top, o: newOptions("consumer", opts)}
	c.core = consume.New("rabbitmq", obs.SystemRabbitMQ, h, c.o.Config, c.o.Prefetch, func(int) time.Duration { return top.retryDelay() })
	c.err = top.validate()
	if c.err == nil {
		c.err = c.o.validate("consumer of " + top.Queue)
	}
	if c.err == nil && h == nil {
		c.err = fmt.Errorf("rabbitmq: consumer of %s: no handler", top.Queue)
	}
	if c.err == nil {
		_, c.err = amqp.ParseURI(url)
	}
	return c
}

// Consume runs a Consumer of top.Queue that delivers to h until ctx ends:
// NewConsumer(url, top, h, opts...).Run(ctx).
func Consume[M any](ctx context.Context, url string, top Topology, h idem.Handler[M], opts ...Option) error {
	return NewConsumer(url, top, h, opts...).Run(ctx)
}

// Run consumes until ctx ends, connecting again with backoff whenever the
// connection is lost or cannot be made, and returns nil once ctx ended and
// every delivery in hand was acked (when it committed) or left to return to
// the queue. It returns an error at once only for a configuration that can
// never work (no queue, a URL that does not parse, an invalid option) and
// for a handler whose Check finds its tables missing or different
// (idem.ErrNotMigrated, checked before it connects: nothing is consumed).
func (c *Consumer[M]) Run(ctx context.Context) error {
	if c.err != nil {
		return c.err
	}
	log := c.o.Logger.With("queue", c.top.Queue)
	if err := c.core.CheckTables(ctx, log); err != nil {
		return fmt.Errorf("rabbitmq: consumer of %s: %w", c.top.Queue, err)
	}
	return consume.Sessions(ctx, log, c.o.BackoffMin, c.o.BackoffMax, "rabbitmq consumer: connection lost or refused; connecting again",
		func(ctx context.Context) (bool, error) { return c.session(ctx, log) },
		func(error) error { return nil })
}

// session is one connection: it consumes until ctx ends or the connection,
// the channel or a route fails. consumed reports whether it got as far as
// consuming.
func (c *Consumer[M]) session(ctx context.Context, log *slog.Logger) (consumed bool, err error) {
	conn, err := amqp.DialConfig(c.url, c.o.config)
	if err != nil {
		return false, fmt.Errorf("rabbitmq: connect: %w", err)
	}
	defer conn.Close()
	if err := checkRoutes(conn, c.top); err != nil {
		return false, err
	}
	ch, err := conn.Channel()
	if err != nil {
		return false, fmt.Errorf("rabbitmq: open the consuming channel: %w", err)
	}
	// Closing the channel returns every delivery that was not acked to the
	// queue; it runs after the workers stopped.
	defer ch.Close()
	if err := ch.Qos(c.o.Prefetch, 0, false); err != nil {
		return false, fmt.Errorf("rabbitmq: set the prefetch to %d: %w", c.o.Prefetch, err)
	}
	r, err := newRouter(conn)
	if err != nil {
		return false, err
	}
	defer r.ch.Close()
	deliveries, err := ch.Consume(c.top.Queue, consumerTag(c.top.Queue), false, false, false, false, nil)
	if err != nil {
		return false, fmt.Errorf("rabbitmq: consume %s: %w", c.top.Queue, err)
	}
	batch := c.core.Batch(c.o.Prefetch)
	log.Info("rabbitmq consumer: consuming", "workers", c.o.Workers, "prefetch", c.o.Prefetch, "batch", batch)

	connClosed := conn.NotifyClose(make(chan *amqp.Error, 1))
	chClosed := ch.NotifyClose(make(chan *amqp.Error, 1))
	// stop ends the workers' loop on a lost connection or a failed route;
	// the context ending stops them too.
	stop := make(chan struct{})
	var stopOnce sync.Once
	var stopErr error
	fail := func(err error) {
		stopOnce.Do(func() { stopErr = err; close(stop) })
	}
	var wg sync.WaitGroup
	for range c.o.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-ctx.Done():
					return
				case <-stop:
					return
				case d, ok := <-deliveries:
					if !ok {
						return // the channel or connection closed, or the broker cancelled the consumer
					}
					ds, open := []amqp.Delivery{d}, true
					if batch > 1 {
						ds, open = consume.Collect(ctx, stop, deliveries, d, batch, c.o.BatchLinger)
					}
					if err := c.handle(ctx, log, r, ds); err != nil {
						fail(err)
						return
					}
					if !open {
						return
					}
				}
			}
		}()
	}
	workersDone := make(chan struct{})
	go func() { wg.Wait(); close(workersDone) }()
	closed := func(e *amqp.Error, what string) { fail(fmt.Errorf("rabbitmq: %s closed: %w", what, amqpErr(e))) }
	select {
	case <-ctx.Done():
	case <-stop:
	case e := <-connClosed:
		closed(e, "connection")
	case e := <-chClosed:
		closed(e, "channel")
	case <-workersDone:
		select { // the deliveries end when the connection does: say so
		case e := <-connClosed:
			closed(e, "connection")
		case e := <-chClosed:
			closed(e, "channel")
		case <-time.After(100 * time.Millisecond):
			fail(fmt.Errorf("rabbitmq: the broker cancelled the consumer of %s (was the queue deleted?)", c.top.Queue))
		}
	}
	<-workersDone
	if ctx.Err() != nil {
		log.Info("rabbitmq consumer: stopped; deliveries not acked return to the queue")
		return true, nil
	}
	return true, stopErr
}

// handle hands the deliveries a worker took to the consumer's core, which
// settles each through settle; a delivery whose key was in progress and
// whose time has not come (HeaderNotBefore) goes back to the retry queue
// first. It returns an error only when a delivery could not be routed where
// its action sends it, or acked: the session then ends, and what was not
// acked returns to the queue.
func (c *Consumer[M]) handle(ctx context.Context, log *slog.Logger, r *router, ds []amqp.Delivery) error {
	if ctx.Err() != nil {
		return nil // stopping: not acked, they return to the queue with the channel
	}
	var (
		first error
		ready []*amqp.Delivery
		cds   []consume.Delivery
	)
	now := time.Now()
	for i := range ds {
		d := &ds[i]
		if notBefore, ok := msHeader(d.Headers[HeaderNotBefore]); ok && now.Before(notBefore) {
			if err := c.holdBack(ctx, r, d, notBefore.Sub(now)); err != nil && first == nil {
				first = err
			}
			continue
		}
		attempt := attemptOf(d)
		waiting, _ := msHeader(d.Headers[HeaderWaiting])
		ready = append(ready, d)
		cds = append(cds, consume.Delivery{
			Body: d.Body, ID: d.MessageId, Attempt: attempt, Waiting: waiting, Destination: c.top.Queue,
			Headers: func() map[string]string { return headerStrings(d.Headers) },
			Log:     log.With("message_id", d.MessageId, "attempt", attempt),
		})
	}
	if len(cds) == 0 {
		return first
	}
	err := c.core.Handle(ctx, cds, func(ctx context.Context, i int, dec consume.Decision) error {
		return c.settle(ctx, r, ready[i], cds[i], dec)
	})
	if first == nil {
		first = err
	}
	return first
}

// settle is the transport of a decision: an ack; a retry copy to the retry
// queue (for a key in progress, one that keeps its attempt and comes back
// no earlier than the decision's delay) and an ack; a dead-letter copy to
// the dead-letter exchange and an ack; or, when stopping, nothing: the
// delivery returns to the queue with the channel.
func (c *Consumer[M]) settle(ctx context.Context, r *router, d *amqp.Delivery, cd consume.Delivery, dec consume.Decision) error {
	switch {
	case dec.Stopping:
		return nil
	case dec.Action == idem.Ack:
		return d.Ack(false)
	case dec.Action == idem.Retry:
		p := retryCopy(d, cd.Attempt+1, c.top.retryDelay())
		if dec.Wait {
			since := cd.Waiting
			if since.IsZero() {
				since = time.Now()
			}
			p = waitCopy(d, cd.Attempt, since, time.Now().Add(dec.Delay), min(dec.Delay, c.top.retryDelay()))
		}
		if err := r.publish(ctx, "", c.top.RetryQueue(), p); err != nil {
			return fmt.Errorf("rabbitmq: route %s to the retry queue %s: %w", d.MessageId, c.top.RetryQueue(), err)
		}
		return d.Ack(false)
	default:
		if err := r.publish(ctx, c.top.DeadLetterExchange(), c.top.Queue, deadLetterCopy(d, cd.Attempt, c.top.Queue, dec.Err)); err != nil {
			return fmt.Errorf("rabbitmq: route %s to the dead-letter exchange %s: %w", d.MessageId, c.top.DeadLetterExchange(), err)
		}
		return d.Ack(false)
	}
}

// holdBack routes a delivery whose time has not come back to the retry
// queue, as it is, for left or the retry delay, whichever is shorter.
func (c *Consumer[M]) holdBack(ctx context.Context, r *router, d *amqp.Delivery, left time.Duration) error {
	p := copyOf(d)
	p.Expiration = strconv.FormatInt(max(min(left, c.top.retryDelay()), time.Millisecond).Milliseconds(), 10)
	if err := r.publish(ctx, "", c.top.RetryQueue(), p); err != nil {
		return fmt.Errorf("rabbitmq: route %s back to the retry queue %s: %w", d.MessageId, c.top.RetryQueue(), err)
	}
	return d.Ack(false)
}

// attemptOf returns which attempt at the message d is; see the package
// documentation.
func attemptOf(d *amqp.Delivery) int {
	base, ok := intHeader(d.Headers[HeaderAttempt])
	if !ok || base < 1 {
		base = consume.AddAttempts(1, expiries(d.Headers))
	}
	if n, ok := intHeader(d.Headers["x-delivery-count"]); ok {
		return consume.AddAttempts(base, n)
	}
	if d.Redelivered {
		return consume.AddAttempts(base, 1)
	}
	return base
}

// expiries sums the counts of the x-death entries that record an expiry: the
// trips through a TTL retry queue.
func expiries(h amqp.Table) int {
	deaths, _ := h["x-death"].([]any)
	n := 0
	for _, entry := range deaths {
		t, ok := entry.(amqp.Table)
		if !ok || t["reason"] != "expired" {
			continue
		}
		if c, ok := intHeader(t["count"]); ok && c > 0 {
			n = consume.AddAttempts(n, c)
		}
	}
	return n
}

func intHeader(v any) (int, bool) {
	switch n := v.(type) {
	case int8:
		return int(n), true
	case int16:
		return int(n), true
	case int32:
		return int(n), true
	case int64:
		return int(n), true
	case int:
		return n, true
	case uint8:
		return int(n), true
	case uint16:
		return int(n), true
	case uint32:
		return int(n), true
	case string:
		i, err := strconv.Atoi(n)
		return i, err == nil
	}
	return 0, false
}

// headerStrings returns the headers whose values are text, numbers or
// booleans, as text; tables and arrays (x-death) are left out.
func headerStrings(h amqp.Table) map[string]string {
	if len(h) == 0 {
		return nil
	}
	out := make(map[string]string, len(h))
	for k, v := range h {
		switch v := v.(type) {
		case string:
			out[k] = v
		case []byte:
			out[k] = string(v)
		case bool, int8, int16, int32, int64, int, uint8, uint16, uint32, float32, float64:
			out[k] = fmt.Sprint(v)
		case time.Time:
			out[k] = v.UTC().Format(time.RFC3339)
		}
	}
	return out
}

// copyOf is the delivery as a new publishing, for the retry and dead-letter
// routes. The broker's x-delivery-count belongs to the delivery, not to the
// copy; user_id is dropped because the broker refuses a user_id that is not
// the publishing connection's user.
func copyOf(d *amqp.Delivery) amqp.Publishing {
	headers := make(amqp.Table, len(d.Headers)+3)
	for k, v := range d.Headers {
		if k != "x-delivery-count" {
			headers[k] = v
		}
	}
	return amqp.Publishing{
		Headers:         headers,
		ContentType:     d.ContentType,
		ContentEncoding: d.ContentEncoding,
		DeliveryMode:    d.DeliveryMode,
		Priority:        d.Priority,
		CorrelationId:   d.CorrelationId,
		ReplyTo:         d.ReplyTo,
		MessageId:       d.MessageId,
		Timestamp:       d.Timestamp,
		Type:            d.Type,
		AppId:           d.AppId,
		Body:            d.Body,
	}
}

func retryCopy(d *amqp.Delivery, next int, delay time.Duration) amqp.Publishing {
	p := copyOf(d)
	p.Headers[HeaderAttempt] = int32(next)
	p.Expiration = strconv.FormatInt(delay.Milliseconds(), 10)
	return p
}

// waitCopy is the retry copy of a delivery whose key is in progress: it
// keeps its attempt, and says since when it waits and when it may be
// handled again.
func waitCopy(d *amqp.Delivery, attempt int, since, notBefore time.Time, expiration time.Duration) amqp.Publishing {
	p := copyOf(d)
	p.Headers[HeaderAttempt] = int32(attempt)
	p.Headers[HeaderWaiting] = since.UnixMilli()
	p.Headers[HeaderNotBefore] = notBefore.UnixMilli()
	p.Expiration = strconv.FormatInt(max(expiration, time.Millisecond).Milliseconds(), 10)
	return p
}

// msHeader reads a time in Unix milliseconds.
func msHeader(v any) (time.Time, bool) {
	var ms int64
	switch n := v.(type) {
	case int64:
		ms = n
	case int32:
		ms = int64(n)
	case int:
		ms = int64(n)
	default:
		return time.Time{}, false
	}
	return time.UnixMilli(ms), true
}

func deadLetterCopy(d *amqp.Delivery, attempt int, queue string, reason error) amqp.Publishing {
	p := copyOf(d)
	p.Headers[HeaderAttempt] = int32(attempt)
	p.Headers[HeaderReason] = consume.Reason(reason)
	p.Headers[HeaderQueue] = queue
	p.DeliveryMode = amqp.Persistent // a dead letter waits for an operator
	return p
}

// router publishes the retry and dead-letter copies on a channel of its own
// in confirm mode, one at a time: they are rare, and one at a time a return
// (unroutable) is known to be the current copy's.
type router struct {
	mu      sync.Mutex
	ch      *amqp.Channel
	returns chan amqp.Return
	closed  chan *amqp.Error
}

func newRouter(conn *amqp.Connection) (*router, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("rabbitmq: open the routing channel: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		ch.Close()
		return nil, fmt.Errorf("rabbitmq: put the routing channel in confirm mode: %w", err)
	}
	return &router{
		ch:      ch,
		returns: ch.NotifyReturn(make(chan amqp.Return, 1)),
		closed:  ch.NotifyClose(make(chan *amqp.Error, 1)),
	}, nil
}

// publish publishes p, mandatory, and waits for the broker's confirm.
func (r *router) publish(ctx context.Context, exchange, key string, p amqp.Publishing) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	dc, err := r.ch.PublishWithDeferredConfirmWithContext(ctx, exchange, key, true, false, p)
	if err != nil {
		return err
	}
	var returned *amqp.Return
	for {
		select {
		case ret, ok := <-r.returns:
			if !ok { // closed with the channel: not a return
				return fmt.Errorf("the routing channel closed: %w", amqp.ErrClosed)
			}
			returned = &ret
		case <-dc.Done():
			select { // a return precedes its confirm
			case ret, ok := <-r.returns:
				if ok {
					returned = &ret
				}
			default:
			}
			switch {
			case returned != nil:
				return fmt.Errorf("unroutable (%d %s): no queue is bound for routing key %q on exchange %q", returned.ReplyCode, returned.ReplyText, key, exchange)
			case !dc.Acked():
				return errors.New("the broker did not confirm the copy (nack, or the channel closed)")
			}
			return nil
		case e := <-r.closed:
			return fmt.Errorf("the routing channel closed: %w", amqpErr(e))
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func amqpErr(e *amqp.Error) error {
	if e == nil {
		return amqp.ErrClosed
	}
	return e
}

func consumerTag(queue string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	tag := "idem-" + queue
	if len(tag) > 200 {
		tag = tag[:200]
	}
	return tag + "-" + hex.EncodeToString(b[:])
}
