package kafka

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/internal/consume"
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

// Consumer feeds the records of a consumer group's topics to an idem.Handler
// and acts on each as idem.ActionFor says; see the package documentation.
// Create it with NewConsumer, run it with Run.
type Consumer[M any] struct {
	brokers []string
	group   string
	topics  []string
	core    *consume.Core[M]
	o       options
	err     error

	mu      sync.Mutex
	retries map[position]int // failed attempts at a record, in this process
	waits   *consume.Waits[position]
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
// with DeliverBatch calls of up to consumer.WithBatch records. Options: those
// of idem/consumer, WithMaxPollRecords, WithRetryDelay, WithDeadLetterTopic,
// WithClientOptions.
func NewConsumer[M any](brokers []string, group string, topics []string, h idem.Handler[M], opts ...Option) *Consumer[M] {
	c := &Consumer[M]{brokers: brokers, group: group, topics: topics, o: newOptions(opts),
		retries: map[position]int{}, waits: consume.NewWaits[position]()}
	c.core = consume.New("kafka", obs.SystemKafka, h, c.o.Config, c.o.maxPoll, func(int) time.Duration { return c.o.retryDelay })
	what := fmt.Sprintf("consumer group %q", group)
	switch {
	case len(brokers) == 0:
		c.err = fmt.Errorf("kafka: %s: no seed brokers", what)
	case group == "":
		c.err = fmt.Errorf("kafka: consumer: no group")
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
// returns an error at once only for a configuration that can never work and
// for a handler whose Check finds its tables missing or different
// (idem.ErrNotMigrated, checked before it joins the group: nothing is
// consumed).
func (c *Consumer[M]) Run(ctx context.Context) error {
	if c.err != nil {
		return c.err
	}
	if err := c.core.CheckTables(ctx, c.o.Logger.With("group", c.group)); err != nil {
		return fmt.Errorf("kafka: consumer group %q: %w", c.group, err)
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
	log := c.o.Logger.With("group", c.group)
	log.Info("kafka consumer: consuming", "topics", c.topics, "workers", c.o.Workers, "batch", c.core.Batch(c.o.maxPoll))
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
// record and paused for its delay (the retry delay, or for a key in
// progress no less than idem.RetryAfter). Rebalances wait for it.
func (c *Consumer[M]) poll(ctx context.Context, log *slog.Logger, cl *kgo.Client, fetches kgo.Fetches) error {
	var parts []kgo.FetchTopicPartition
	fetches.EachPartition(func(p kgo.FetchTopicPartition) {
		if len(p.Records) > 0 {
			parts = append(parts, p)
		}
	})
	done := make([]*kgo.Record, len(parts))
	retry := make([]*kgo.Record, len(parts))
	delay := make([]time.Duration, len(parts))
	sem := make(chan struct{}, c.o.Workers)
	var wg sync.WaitGroup
	for i, p := range parts {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			done[i], retry[i], delay[i] = c.partition(ctx, log, cl, p.Records)
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
		for i, r := range retry {
			if r != nil {
				one := map[string][]int32{r.Topic: {r.Partition}}
				time.AfterFunc(delay[i], func() { cl.ResumeFetchPartitions(one) })
			}
		}
	}
	return nil
}

// partition processes one partition's records in order until one is to be
// retried: one at a time, or in batches of consumer.WithBatch records for a
// BatchHandler. It returns the last record done (nil for none), the record
// to retry (nil for none) and how long to wait before it.
func (c *Consumer[M]) partition(ctx context.Context, log *slog.Logger, cl *kgo.Client, recs []*kgo.Record) (last, retry *kgo.Record, delay time.Duration) {
	size := c.core.Batch(c.o.maxPoll)
	for start := 0; start < len(recs); start += size {
		if ctx.Err() != nil {
			return last, nil, 0
		}
		done, r, d := c.records(ctx, log, cl, recs[start:min(start+size, len(recs))])
		if done != nil {
			last = done
		}
		if r != nil {
			return last, r, d
		}
	}
	return last, nil, 0
}

// records hands a partition's records, in offset order, to the consumer's
// core and settles them in that order until one is to be retried. The
// records after it are not settled: the partition is sought back to it, so
// they come again, as Duplicates where they committed (no second effect),
// their failure here not counted as an attempt. It returns what partition
// does.
func (c *Consumer[M]) records(ctx context.Context, log *slog.Logger, cl *kgo.Client, recs []*kgo.Record) (last, retry *kgo.Record, delay time.Duration) {
	ds := make([]consume.Delivery, len(recs))
	for k, r := range recs {
		pos := position{r.Topic, r.Partition, r.Offset}
		id := messageID(r)
		attempt := c.attempt(r, pos)
		_, waiting := c.waits.Of(pos)
		ds[k] = consume.Delivery{
			Body: r.Value, ID: id, Attempt: attempt, Waiting: waiting, Destination: r.Topic,
			Headers: func() map[string]string { return headerStrings(r.Headers) },
			Log:     log.With("topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "message_id", id, "attempt", attempt),
		}
	}
	_ = c.core.Handle(ctx, ds, func(ctx context.Context, i int, dec consume.Decision) error {
		if retry != nil {
			return consume.ErrSkip
		}
		r := recs[i]
		pos := position{r.Topic, r.Partition, r.Offset}
		switch {
		case dec.Stopping:
			retry = r // not committed: it comes again
			return nil
		case dec.Action == idem.Ack:
			c.forget(pos)
			last = r
			return nil
		case dec.Action == idem.Retry:
			if dec.Wait {
				now := time.Now()
				c.waits.Wait(pos, now)
				c.waits.Prune(now.Add(-2 * c.o.MaxWait))
			} else {
				c.failed(pos)
			}
			retry, delay = r, dec.Delay
			return nil
		}
		dlq := c.o.deadLetter(r.Topic)
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		perr := cl.ProduceSync(pctx, deadLetterCopy(r, dlq, ds[i].Attempt, dec.Err)).FirstErr()
		cancel()
		if perr != nil {
			// Not committed: retried after the delay, and dead-lettered then.
			c.failed(pos)
			retry, delay = r, c.o.retryDelay
			return fmt.Errorf("produce to the dead-letter topic %s: %w", dlq, perr)
		}
		c.forget(pos)
		last = r
		return nil
	})
	return last, retry, delay
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
	return consume.AddAttempts(base, c.retries[pos])
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
	c.waits.Forget(pos)
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
		kgo.RecordHeader{Key: HeaderReason, Value: []byte(consume.Reason(reason))},
		kgo.RecordHeader{Key: HeaderTopic, Value: []byte(r.Topic)},
		kgo.RecordHeader{Key: HeaderPartition, Value: []byte(strconv.Itoa(int(r.Partition)))},
		kgo.RecordHeader{Key: HeaderOffset, Value: []byte(strconv.FormatInt(r.Offset, 10))},
	)
	return &kgo.Record{Topic: topic, Key: r.Key, Value: r.Value, Headers: headers}
}
