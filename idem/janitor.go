package idem

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"go.opentelemetry.io/otel/metric"

	"github.com/idemgen/idemgen/idem/internal/obs"
	"github.com/idemgen/idemgen/idem/internal/partition"
	"github.com/idemgen/idemgen/idem/internal/pgutil"
	"github.com/idemgen/idemgen/idem/internal/wait"
)

// The janitor's defaults: what NewJanitor uses for an option not given.
const (
	DefaultJanitorInterval  = time.Minute
	DefaultJanitorBatchSize = 500
)

// Janitor keeps the tables of idem from growing without bound: on a
// schedule it purges each consumer's rows past its retention (retain=) and
// resets the expired claims of mode=external consumers (the lease sweeper).
// The inbox of a consumer partitioned by the message's time (partition= and
// time=) it purges by dropping each partition wholly past the retention, and
// it creates the partitions of the kept window and the buckets ahead
// (docs/janitor.md, Partitioned inboxes). The outbox needs no purge: the
// relay deletes each row once the broker has confirmed it.
//
// Every statement is one short autocommit transaction that deletes or
// resets at most one batch ([WithJanitorBatchSize]), found through the
// table's index on created_at (or lease_until) oldest first, so that no
// statement holds its locks for long and none scans the table. The
// statements skip the rows another statement holds (FOR UPDATE SKIP LOCKED),
// so any number of janitors can run at once: each row is purged or reset by
// one of them, and none waits for another.
type Janitor struct {
	db        DB
	consumers []Maintenance
	o         janitorOptions
	inst      *obs.Instruments

	running atomic.Bool
}

// A JanitorOption configures a [Janitor].
type JanitorOption func(*janitorOptions)

type janitorOptions struct {
	interval     time.Duration
	batchSize    int
	outbox       bool
	outboxRetain time.Duration
	horizon      time.Duration
	logger       *slog.Logger
	meter        metric.MeterProvider
	now          func() time.Time // the clock partitions are kept at
}

// WithJanitorInterval sets the time from the start of one round of the
// janitor to the start of the next (default a minute). A round that takes
// longer is followed by the next at once.
func WithJanitorInterval(d time.Duration) JanitorOption {
	return func(o *janitorOptions) { o.interval = d }
}

// WithJanitorBatchSize sets how many rows one statement deletes or resets at
// most (default 500): the bound on how long a statement holds its locks.
func WithJanitorBatchSize(n int) JanitorOption {
	return func(o *janitorOptions) { o.batchSize = n }
}

// WithJanitorOutbox made the janitor purge the rows of idem_outbox
// published more than retain ago. Since the outbox migration 00002 the relay
// deletes a row once the broker has confirmed it, so no published row is
// left to purge: the option is accepted (a negative retention is still
// refused) and the janitor does nothing for the outbox. Pending and dead
// rows were never purged, and are not.
//
// Deprecated: published outbox rows are deleted when they are published;
// drop the option.
func WithJanitorOutbox(retain time.Duration) JanitorOption {
	return func(o *janitorOptions) { o.outbox, o.outboxRetain = true, retain }
}

// WithJanitorRedeliveryHorizon sets how late a message can come back after
// it was first delivered: the broker's redelivery window plus the time within
// which dead letters are replayed. A consumer whose retention is shorter
// would process such a message again, so NewJanitor logs a warning for it
// (it is not refused: the horizon is the operator's estimate).
func WithJanitorRedeliveryHorizon(d time.Duration) JanitorOption {
	return func(o *janitorOptions) { o.horizon = d }
}

// WithJanitorLogger sets the logger of the janitor's records (default
// slog.Default()).
func WithJanitorLogger(l *slog.Logger) JanitorOption {
	return func(o *janitorOptions) { o.logger = l }
}

// WithJanitorMeterProvider sets the OpenTelemetry MeterProvider of the
// janitor's instruments, idem.purged and idem.sweeper.resets (see
// docs/observability.md). nil, or no option, is otel.GetMeterProvider().
func WithJanitorMeterProvider(mp metric.MeterProvider) JanitorOption {
	return func(o *janitorOptions) { o.meter = mp }
}

// NewJanitor returns the janitor of the consumers' tables; each consumer's
// statements run on the db of its inbox. It refuses (an error, nothing started):
//
//   - a consumer whose retention is not positive, or, for mode=external,
//     shorter than its lease: its sweeper and its purge would delete a
//     claim that is still running, and a redelivery would run the handler
//     again;
//   - a Maintenance that no inbox returned, and a table listed twice;
//   - an option value that cannot work.
//
// It logs a warning (level Warn, "idem janitor retention shorter than the
// redelivery horizon") for each consumer whose retention is shorter than
// the horizon of [WithJanitorRedeliveryHorizon].
func NewJanitor(db DB, consumers []Maintained, opts ...JanitorOption) (*Janitor, error) {
	o := janitorOptions{interval: DefaultJanitorInterval, batchSize: DefaultJanitorBatchSize, now: time.Now}
	for _, opt := range opts {
		opt(&o)
	}
	if o.logger == nil {
		o.logger = slog.Default()
	}
	switch {
	case db == nil:
		return nil, errors.New("idem.NewJanitor: the db must not be nil")
	case o.interval <= 0:
		return nil, fmt.Errorf("idem.NewJanitor: idem.WithJanitorInterval(%v): want a positive interval", o.interval)
	case o.batchSize < 1 || o.batchSize > 1<<20:
		return nil, fmt.Errorf("idem.NewJanitor: idem.WithJanitorBatchSize(%d) is out of range: want 1 to %d", o.batchSize, 1<<20)
	case o.outbox && o.outboxRetain < 0:
		return nil, fmt.Errorf("idem.NewJanitor: idem.WithJanitorOutbox(%v): want a retention of 0 or more", o.outboxRetain)
	case o.horizon < 0:
		return nil, fmt.Errorf("idem.NewJanitor: idem.WithJanitorRedeliveryHorizon(%v): want 0 or more", o.horizon)
	case len(consumers) == 0 && !o.outbox:
		return nil, errors.New("idem.NewJanitor: no consumers and no idem.WithJanitorOutbox: nothing to do")
	}
	j := &Janitor{db: db, o: o, inst: obs.New(o.meter)}
	tables := map[string]string{}
	for _, c := range consumers {
		if c == nil {
			return nil, errors.New("idem.NewJanitor: a nil consumer")
		}
		m := c.Maintenance()
		switch {
		case m.t.Purge == "" && m.t.Partitions == nil || m.t.DB == nil:
			return nil, fmt.Errorf("idem.NewJanitor: %T returned a Maintenance that no inbox made (consumer %q); pass the generated wrapper", c, m.Consumer)
		case m.Retain <= 0:
			return nil, fmt.Errorf("idem.NewJanitor: consumer %s: its retention is %v; want a positive retain=", m.Consumer, m.Retain)
		case m.External && m.Retain < m.Lease:
			return nil, fmt.Errorf("idem.NewJanitor: consumer %s: its retention (retain=%v) is shorter than its lease (%v): a claim may run for its whole lease, and the janitor would purge it meanwhile, so that a redelivery ran the handler again; make retain= longer than lease=",
				m.Consumer, m.Retain, m.Lease)
		}
		if other, dup := tables[m.Table]; dup {
			return nil, fmt.Errorf("idem.NewJanitor: the table %s is listed twice (consumers %s and %s)", m.Table, other, m.Consumer)
		}
		tables[m.Table] = m.Consumer
		if o.horizon > 0 && m.Retain < o.horizon {
			o.logger.LogAttrs(context.Background(), slog.LevelWarn, "idem janitor retention shorter than the redelivery horizon",
				slog.String("consumer", m.Consumer), slog.String("table", m.Table),
				slog.Duration("retain", m.Retain), slog.Duration("horizon", o.horizon),
				slog.String("effect", "a message redelivered or replayed after its row was purged is processed again"))
		}
		j.consumers = append(j.consumers, m)
	}
	return j, nil
}

// JanitorReport is what one round of a [Janitor] did.
type JanitorReport struct {
	// Purged counts the rows deleted past their retention, by table;
	// tables with none are left out.
	Purged map[string]int64
	// Reset counts the expired claims the sweeper reset, by consumer;
	// consumers with none are left out.
	Reset map[string]int64
	// Created and Dropped list the partitions of partitioned inboxes the
	// round created and dropped, by table; tables with none are left out.
	// A dropped partition's rows are counted in Purged, by the server's
	// statistics of the partition (an estimate).
	Created, Dropped map[string][]string
	// Statements is the number of statements the round ran, and Longest
	// the duration of the longest one: the longest any of them held its
	// locks.
	Statements int
	Longest    time.Duration
}

func (r *JanitorReport) statement(d time.Duration) {
	r.Statements++
	r.Longest = max(r.Longest, d)
}

// Run runs a round at once and then one every interval until ctx ends,
// then returns nil; a statement in flight is cancelled (its batch rolled
// back). A round's errors are logged, and the next round tries again. Run
// returns an error at once when it is already running.
func (j *Janitor) Run(ctx context.Context) error {
	if !j.running.CompareAndSwap(false, true) {
		return errors.New("idem: janitor: Run called while it is running")
	}
	defer j.running.Store(false)
	j.o.logger.LogAttrs(ctx, slog.LevelInfo, "idem janitor started", slog.Int("consumers", len(j.consumers)),
		slog.Duration("interval", j.o.interval))
	for {
		started := time.Now()
		rep, err := j.RunOnce(ctx)
		if ctx.Err() != nil {
			return nil
		}
		j.logRound(ctx, rep, err, time.Since(started))
		if !wait.Sleep(ctx, j.o.interval-time.Since(started)) {
			return nil
		}
	}
}

func (j *Janitor) logRound(ctx context.Context, rep JanitorReport, err error, took time.Duration) {
	var purged, reset int64
	for _, n := range rep.Purged {
		purged += n
	}
	for _, n := range rep.Reset {
		reset += n
	}
	var created, dropped int
	for _, names := range rep.Created {
		created += len(names)
	}
	for _, names := range rep.Dropped {
		dropped += len(names)
	}
	level := slog.LevelDebug
	if purged > 0 || reset > 0 || created > 0 || dropped > 0 {
		level = slog.LevelInfo
	}
	attrs := []slog.Attr{slog.Int64("purged", purged), slog.Int64("reset", reset),
		slog.Int("partitions_created", created), slog.Int("partitions_dropped", dropped), slog.Int("statements", rep.Statements),
		slog.Duration("longest_statement", rep.Longest), slog.Duration("duration", took)}
	if err != nil {
		level = slog.LevelWarn
		attrs = append(attrs, slog.String("err", err.Error()))
	}
	j.o.logger.LogAttrs(ctx, level, "idem janitor round", attrs...)
}

// RunOnce runs one round: it purges each consumer's table (for a
// partitioned inbox: drops its partitions wholly past the retention and
// creates those of the kept window and the buckets ahead) and sweeps the
// expired claims of each mode=external one, each until no batch is left or
// ctx ends. A task that fails does not stop the
// others; RunOnce returns their errors joined, with what was done.
func (j *Janitor) RunOnce(ctx context.Context) (JanitorReport, error) {
	rep := JanitorReport{Purged: map[string]int64{}, Reset: map[string]int64{},
		Created: map[string][]string{}, Dropped: map[string][]string{}}
	var errs []error
	for _, m := range j.consumers {
		if ctx.Err() != nil {
			break
		}
		if m.t.Partitions != nil {
			if err := j.partitions(ctx, &rep, m); err != nil {
				errs = append(errs, fmt.Errorf("idem: janitor: consumer %s: keep the partitions of %s: %w", m.Consumer, m.Table, err))
			}
			continue
		}
		n, err := j.batches(ctx, &rep, m.t.DB, m.t.Purge, func(ctx context.Context, n int64) {
			j.inst.Purged(ctx, m.Table, m.kind(), n)
		}, m.Retain.Seconds(), j.o.batchSize)
		if n > 0 {
			rep.Purged[m.Table] += n
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("idem: janitor: consumer %s: purge %s: %w", m.Consumer, m.Table, err))
		}
		if !m.External || ctx.Err() != nil {
			continue
		}
		n, err = j.batches(ctx, &rep, m.t.DB, m.t.Sweep, func(ctx context.Context, n int64) {
			j.inst.SweeperResets(ctx, m.Consumer, n)
		}, j.o.batchSize)
		if n > 0 {
			rep.Reset[m.Consumer] += n
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("idem: janitor: consumer %s: sweep %s: %w", m.Consumer, m.Table, err))
		}
	}
	return rep, errors.Join(errs...)
}

// batches runs sql, whose last argument is the batch size, until it affects
// fewer rows than a batch, recording each batch's count with record as soon
// as it committed. It returns how many rows the statements affected.
func (j *Janitor) batches(ctx context.Context, rep *JanitorReport, db DB, sql string, record func(context.Context, int64), args ...any) (int64, error) {
	var total int64
	for ctx.Err() == nil {
		started := time.Now()
		n, err := execAsync(ctx, db, sql, args...)
		rep.statement(time.Since(started))
		if err != nil {
			return total, err
		}
		total += n
		record(ctx, n)
		if n < int64(j.o.batchSize) {
			break
		}
	}
	return total, nil
}

// execAsync runs one statement in a transaction of its own that does not
// wait for its commit record to reach the disk (synchronous_commit off),
// in one round trip, and returns the rows it affected. The wait for the
// flush would only lengthen the time the statement holds its row locks:
// a purge or a reset lost in a crash is done again by the next round, and
// a later commit that depends on it (a claim of the same key) flushes it
// first, as WAL is written in order.
func execAsync(ctx context.Context, db DB, sql string, args ...any) (int64, error) {
	c, err := db.Acquire(ctx)
	if err != nil {
		return 0, err
	}
	defer c.Release()
	b := pgutil.NewBatch(4)
	b.Queue("begin")
	b.Queue("SELECT set_config('synchronous_commit', 'off', true)")
	b.Queue(sql, args...)
	b.Queue("commit")
	br := c.SendBatch(ctx, b)
	var tag pgconn.CommandTag
	_, err = br.Exec()
	if err == nil {
		_, err = br.Exec()
	}
	if err == nil {
		tag, err = br.Exec()
	}
	if err == nil {
		_, err = br.Exec()
	}
	if closeErr := br.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		pgutil.Rollback(ctx, c.Conn())
		return 0, err
	}
	return tag.RowsAffected(), nil
}

// partitions keeps the partitions of m, a partitioned inbox.
func (j *Janitor) partitions(ctx context.Context, rep *JanitorReport, m Maintenance) error {
	started := time.Now()
	res, err := partition.Maintain(ctx, m.t.DB, *m.t.Partitions, j.o.now())
	rep.statement(time.Since(started))
	if len(res.Created) > 0 {
		rep.Created[m.Table] = append(rep.Created[m.Table], res.Created...)
	}
	if len(res.Dropped) > 0 {
		rep.Dropped[m.Table] = append(rep.Dropped[m.Table], res.Dropped...)
		rep.Purged[m.Table] += res.DroppedRows
		j.inst.Purged(ctx, m.Table, m.kind(), res.DroppedRows)
	}
	return err
}
