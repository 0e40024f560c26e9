package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/internal/batches"
	"github.com/idemgen/idemgen/idem/internal/obs"
)

// Headers the consumer reads, and sets on the dead-letter copies it produces.
const (
	// HeaderMessageID carries the message id: idem.Message.ID. The
	// [Publisher] sets it to the outbox's stable id. Without it, the
	// record key is the ID.
	HeaderMessageID = "idem-message-id"
	// HeaderAttempt is the attempt a record starts at (1 without it); on a
	// dead-letter copy, the attempt that was dead-lettered.
	HeaderAttempt = "idem-attempt"
	// HeaderReason is why a dead-letter copy was dead-lettered: the error.
	HeaderReason = "idem-reason"
	// HeaderTopic, HeaderPartition and HeaderOffset say where a dead-letter
	// copy was consumed.
	HeaderTopic     = "idem-topic"
	HeaderPartition = "idem-partition"
	HeaderOffset    = "idem-offset"
)

// maxReason bounds the idem-reason header.
const maxReason = 1024

// Consumer feeds the records of a consumer group's topics to an idem.Handler
// and acts on each as idem.ActionFor says; see the package documentation.
// Create it with NewConsumer, run it with Run.
type Consumer[M any] struct {
	brokers []string
	group   string
	topics  []string
	handler idem.Handler[M]
	batch   idem.BatchHandler[M] // the handler, when it takes batches and batching is on
	o       options
	ins     *obs.Instruments
	err     error

	mu      sync.Mutex
	retries map[position]int // failed attempts at a record, in this process
}

type position struct {
	topic     string
	partition int32
	offset    int64
}

// NewConsumer returns a Consumer in group of topics on the brokers (seed
// addresses, host:port) that delivers each record to h: a generated wrapper,
// an idemimpl.Inbox, or any idem.Handler. M is the handler's message type; for an
// idem.Message[T] the value is decoded into T and ID, Attempt and Headers come
// from the record. When h is also an idem.BatchHandler (a generated tx-mode
// wrapper, an idemimpl.Inbox), a partition's records of a poll are delivered
// with DeliverBatch calls of up to WithBatch records. Options: WithWorkers,
// WithMaxPollRecords, WithBatch, WithMaxAttempts, WithMaxBodySize,
// WithRetryDelay, WithDecoder, WithDeadLetterTopic, WithLogger,
// WithClientOptions.
func NewConsumer[M any](brokers []string, group string, topics []string, h idem.Handler[M], opts ...Option) *Consumer[M] {
	c := &Consumer[M]{brokers: brokers, group: group, topics: topics, handler: h, o: newOptions(opts), retries: map[position]int{}}
	if bh, ok := h.(idem.BatchHandler[M]); ok && c.o.batchSize() > 1 {
		c.batch = bh
	}
	c.ins = obs.New(c.o.meter)
	what := fmt.Sprintf("consumer group %q", group)
	switch {
	case len(brokers) == 0:
		c.err = fmt.Errorf("kafka: %s: no seed brokers", what)
	case group == "":
		c.err = errors.New("kafka: consumer: no group")
	case len(topics) == 0:
		c.err = fmt.Errorf("kafka: %s: no topics", what)
	case h == nil:
		c.err = fmt.Errorf("kafka: %s: no handler", what)
	default:
		c.err = c.o.validate(what)
	}
	return c
}

// Consume runs a Consumer until ctx ends: NewConsumer(brokers, group,
// topics, h, opts...).Run(ctx).
func Consume[M any](ctx context.Context, brokers []string, group string, topics []string, h idem.Handler[M], opts ...Option) error {
	return NewConsumer(brokers, group, topics, h, opts...).Run(ctx)
}

// Run consumes until ctx ends and returns nil once it did: the offsets of the
// records whose transactions committed are committed, nothing else, and the
// client leaves the group. franz-go reconnects to the brokers itself; Run
// returns an error at once only for a configuration that can never work.
func (c *Consumer[M]) Run(ctx context.Context) error {
	if c.err != nil {
		return c.err
	}
	opts := append(append([]kgo.Opt(nil), c.o.client...),
		kgo.SeedBrokers(c.brokers...),
		kgo.ConsumerGroup(c.group),
		kgo.ConsumeTopics(c.topics...),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
	)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("kafka: consumer group %q: %w", c.group, err)
	}
	defer cl.Close()
	log := c.o.logger.With("group", c.group)
	batch := 1
	if c.batch != nil {
		batch = c.o.batchSize()
	}
	log.Info("kafka consumer: consuming", "topics", c.topics, "workers", c.o.workers, "batch", batch)
	for {
		fetches := cl.PollRecords(ctx, c.o.maxPoll)
		if fetches.IsClientClosed() || ctx.Err() != nil {
			cl.AllowRebalance()
			log.Info("kafka consumer: stopped; offsets committed only for what the database committed")
			return nil
		}
		fetches.EachError(func(topic string, partition int32, err error) {
			log.Warn("kafka consumer: fetch error; the client retries", "topic", topic, "partition", partition, "err", err)
		})
		if err := c.poll(ctx, log, cl, fetches); err != nil {
			cl.AllowRebalance()
			return err
		}
		cl.AllowRebalance()
	}
}

// poll processes one poll's records, its partitions at once (at most
// WithWorkers of them), each in order, and commits per partition the offset
// after the last record done; a partition to retry is sought back to the
// record and paused for the retry delay. Rebalances wait for it.
func (c *Consumer[M]) poll(ctx context.Context, log *slog.Logger, cl *kgo.Client, fetches kgo.Fetches) error {
	var parts []kgo.FetchTopicPartition
	fetches.EachPartition(func(p kgo.FetchTopicPartition) {
		if len(p.Records) > 0 {
			parts = append(parts, p)
		}
	})
	done := make([]*kgo.Record, len(parts))
	retry := make([]*kgo.Record, len(parts))
	sem := make(chan struct{}, c.o.workers)
	var wg sync.WaitGroup
	for i, p := range parts {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			done[i], retry[i] = c.partition(ctx, log, cl, p.Records)
		}()
	}
	wg.Wait()

	var commit []*kgo.Record
	for _, r := range done {
		if r != nil {
			commit = append(commit, r)
		}
	}
	if len(commit) > 0 {
		// The transactions committed: commit their offsets even when ctx
		// ended, so that a clean stop does not redeliver them.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		err := cl.CommitRecords(cctx, commit...)
		cancel()
		if err != nil {
			log.Warn("kafka consumer: offset commit failed; the records come again and are duplicates", "err", err)
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	seek := map[string]map[int32]kgo.EpochOffset{}
	pause := map[string][]int32{}
	for _, r := range retry {
		if r == nil {
			continue
		}
		if seek[r.Topic] == nil {
			seek[r.Topic] = map[int32]kgo.EpochOffset{}
		}
		seek[r.Topic][r.Partition] = kgo.EpochOffset{Epoch: r.LeaderEpoch, Offset: r.Offset}
		pause[r.Topic] = append(pause[r.Topic], r.Partition)
	}
	if len(seek) > 0 {
		cl.PauseFetchPartitions(pause)
		cl.SetOffsets(seek)
		time.AfterFunc(c.o.retryDelay, func() { cl.ResumeFetchPartitions(pause) })
	}
	return nil
}

// partition processes one partition's records in order until one is to be
// retried: one at a time, or in batches of WithBatch records for a
// BatchHandler. It returns the last record done (nil for none) and the
// record to retry (nil for none).
func (c *Consumer[M]) partition(ctx context.Context, log *slog.Logger, cl *kgo.Client, recs []*kgo.Record) (last, retry *kgo.Record) {
	if c.batch != nil {
		size := c.o.batchSize()
		for start := 0; start < len(recs); start += size {
			if ctx.Err() != nil {
				return last, nil
			}
			done, r := c.records(ctx, log, cl, recs[start:min(start+size, len(recs))])
			if done != nil {
				last = done
			}
			if r != nil {
				return last, r
			}
		}
		return last, nil
	}
	for _, r := range recs {
		if ctx.Err() != nil {
			return last, nil
		}
		if !c.record(ctx, log, cl, r) {
			return last, r
		}
		last = r
	}
	return last, nil
}

// record handles one record and reports whether it is done (its offset may
// be committed).
func (c *Consumer[M]) record(ctx context.Context, log *slog.Logger, cl *kgo.Client, r *kgo.Record) bool {
	pos := position{r.Topic, r.Partition, r.Offset}
	id := messageID(r)
	attempt := c.attempt(r, pos)
	log = log.With("topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "message_id", id, "attempt", attempt)
	var (
		outcome idem.Outcome
		err     error
	)
	msg, err := c.decode(r, id, attempt)
	if err == nil {
		outcome, err = c.handler.Deliver(ctx, msg)
	}
	return c.settle(ctx, log, cl, r, pos, attempt, outcome, err)
}

// records handles a batch of one partition's records, in offset order: those
// that do not decode are dead-lettered on their own, the others go to one
// DeliverBatch call, and then each, in order, is done or retried by its own
// result. It returns the last record done (nil for none) and the record to
// retry (nil for none), like partition.
func (c *Consumer[M]) records(ctx context.Context, log *slog.Logger, cl *kgo.Client, recs []*kgo.Record) (last, retry *kgo.Record) {
	type pending struct {
		r       *kgo.Record
		pos     position
		attempt int
		log     *slog.Logger
		msg     int   // the index of its message in the batch, or -1
		err     error // why it did not decode
	}
	ps := make([]pending, len(recs))
	var msgs []M
	for k, r := range recs {
		p := &ps[k]
		p.r, p.pos = r, position{r.Topic, r.Partition, r.Offset}
		id := messageID(r)
		p.attempt = c.attempt(r, p.pos)
		p.log = log.With("topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "message_id", id, "attempt", p.attempt)
		msg, err := c.decode(r, id, p.attempt)
		if err != nil {
			p.msg, p.err = -1, err
			continue
		}
		p.msg = len(msgs)
		msgs = append(msgs, msg)
	}
	var results []idem.Result[idem.None]
	if len(msgs) > 0 {
		results = batches.Deliver(ctx, "kafka", c.batch, msgs)
		log.Debug("kafka consumer: batch delivered", "topic", recs[0].Topic, "partition", recs[0].Partition, "from_offset", recs[0].Offset, "messages", len(msgs))
	}
	for _, p := range ps {
		outcome, err := idem.Outcome(0), p.err
		if p.msg >= 0 {
			outcome, err = results[p.msg].Outcome, results[p.msg].Err
		}
		if !c.settle(ctx, p.log, cl, p.r, p.pos, p.attempt, outcome, err) {
			// The offsets before p.r are committed and the partition is
			// sought back to it: the records after it in this batch come
			// again. Those whose transactions committed are Duplicates
			// then (acked, no second effect); the others are tried again,
			// their failure here not counted as an attempt, as if the
			// one-at-a-time path had stopped at p.r before them.
			return last, p.r
		}
		last = p.r
	}
	return last, nil
}

// settle acts on a record's result as idem.ActionFor says and reports
// whether the record is done (its offset may be committed).
func (c *Consumer[M]) settle(ctx context.Context, log *slog.Logger, cl *kgo.Client, r *kgo.Record, pos position, attempt int, outcome idem.Outcome, err error) bool {
	action := idem.ActionFor(err)
	if action == idem.Retry && ctx.Err() != nil {
		log.Info("kafka consumer: stopping; not committed, the record comes again", "err", err)
		return false
	}
	if action == idem.Retry && attempt >= c.o.maxAttempts {
		err = fmt.Errorf("kafka: gave up after %d attempts (WithMaxAttempts): %w", attempt, err)
		action = idem.DeadLetter
	}
	switch action {
	case idem.Ack:
		c.forget(pos)
		log.Debug("kafka consumer: done", "outcome", outcome, "err", err)
		return true
	case idem.Retry:
		c.failed(pos)
		c.ins.Retry(ctx, obs.SystemKafka, r.Topic)
		log.Warn("kafka consumer: retry after the delay; offset not committed, partition sought back", "delay", c.o.retryDelay, "err", err)
		return false
	default:
		dlq := c.o.deadLetter(r.Topic)
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		perr := cl.ProduceSync(pctx, deadLetterCopy(r, dlq, attempt, err)).FirstErr()
		cancel()
		if perr != nil {
			c.failed(pos)
			log.Error("kafka consumer: cannot produce to the dead-letter topic; not committed, retried after the delay", "dead_letter_topic", dlq, "err", err, "produce_err", perr)
			return false
		}
		c.forget(pos)
		c.ins.DeadLetter(ctx, obs.SystemKafka, r.Topic)
		log.Error("kafka consumer: dead-lettered", "dead_letter_topic", dlq, "err", err)
		return true
	}
}

func (c *Consumer[M]) attempt(r *kgo.Record, pos position) int {
	base := 1
	for _, h := range r.Headers {
		if h.Key == HeaderAttempt {
			if n, err := strconv.Atoi(string(h.Value)); err == nil && n >= 1 {
				base = n
			}
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	// base comes from a producer's header: saturate rather than wrap around
	// to a negative attempt, which would never reach WithMaxAttempts.
	if n := c.retries[pos]; n > 0 && base > math.MaxInt-n {
		return math.MaxInt
	}
	return base + c.retries[pos]
}

func (c *Consumer[M]) failed(pos position) {
	c.mu.Lock()
	c.retries[pos]++
	c.mu.Unlock()
}

func (c *Consumer[M]) forget(pos position) {
	c.mu.Lock()
	delete(c.retries, pos)
	c.mu.Unlock()
}

// decode turns a record into the handler's message (idem.DecodeDelivery).
func (c *Consumer[M]) decode(r *kgo.Record, id string, attempt int) (M, error) {
	return idem.DecodeDelivery[M](r.Value, c.o.maxBody, c.o.decode, id, attempt, func() map[string]string { return headerStrings(r.Headers) })
}

// messageID is the idem-message-id header, or else the record key.
func messageID(r *kgo.Record) string {
	for _, h := range r.Headers {
		if h.Key == HeaderMessageID {
			return string(h.Value)
		}
	}
	return string(r.Key)
}

func headerStrings(hs []kgo.RecordHeader) map[string]string {
	if len(hs) == 0 {
		return nil
	}
	out := make(map[string]string, len(hs))
	for _, h := range hs {
		out[h.Key] = string(h.Value)
	}
	return out
}

func deadLetterCopy(r *kgo.Record, topic string, attempt int, reason error) *kgo.Record {
	text := fmt.Sprint(reason)
	if len(text) > maxReason {
		text = text[:maxReason]
	}
	headers := make([]kgo.RecordHeader, 0, len(r.Headers)+5)
	for _, h := range r.Headers {
		switch h.Key {
		case HeaderAttempt, HeaderReason, HeaderTopic, HeaderPartition, HeaderOffset:
		default:
			headers = append(headers, h)
		}
	}
	headers = append(headers,
		kgo.RecordHeader{Key: HeaderAttempt, Value: []byte(strconv.Itoa(attempt))},
		kgo.RecordHeader{Key: HeaderReason, Value: []byte(text)},
		kgo.RecordHeader{Key: HeaderTopic, Value: []byte(r.Topic)},
		kgo.RecordHeader{Key: HeaderPartition, Value: []byte(strconv.Itoa(int(r.Partition)))},
		kgo.RecordHeader{Key: HeaderOffset, Value: []byte(strconv.FormatInt(r.Offset, 10))},
	)
	return &kgo.Record{Topic: topic, Key: r.Key, Value: r.Value, Headers: headers}
}
