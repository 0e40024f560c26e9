package idemtest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemimpl"
	"github.com/idemgen/idemgen/idem/internal/config"
	"github.com/idemgen/idemgen/idem/internal/link"
	"github.com/idemgen/idemgen/idem/internal/partition"
)

// The scenarios of a partitioned inbox (partition= and time=), which run
// when the Suite has a Partition. Every scenario of such a Suite first keeps
// the inbox's partitions as the janitor does (idem.Janitor.RunOnce), so that
// the kept window has them, and gives the message the current time unless
// the fixture gave it one.
const (
	// ScenarioBucketEdge: a message timed one microsecond before the start
	// of a bucket, and one timed exactly at it (each in a schema of its
	// own), each land in their own bucket's partition, are Processed once
	// and then a Duplicate there.
	ScenarioBucketEdge = "bucket_edge"
	// ScenarioBucketEdgeConcurrent: ScenarioConcurrent with the message
	// timed exactly at the start of a bucket: N copies at once give one
	// Processed and N-1 Duplicates, one row, in that bucket's partition.
	ScenarioBucketEdgeConcurrent = "bucket_edge_concurrent"
	// ScenarioRedeliveryAfterDrop: once the janitor dropped the partition
	// of a processed message (its bucket wholly past the retention), a
	// redelivery gets idem.ErrOutsideWindow (dead-letter) and does not run
	// the handler: refused by the window when the consumer's clock says
	// the message is older than the retention, and by the database (no
	// partition holds its bucket) when a clock behind the janitor's lets it
	// through; as a batch too, with a Batch.
	ScenarioRedeliveryAfterDrop = "redelivery_after_drop"
)

// Partition is what a Suite needs of a consumer whose inbox is partitioned
// by the message's own time. The generated tests of such a consumer give
// one.
type Partition[V, M any] struct {
	// Bucket is partition= of the directive.
	Bucket idemimpl.Bucket
	// Time returns the message's time (the field time= names), and SetTime
	// a copy of msg with that time set to at; it must not modify msg.
	Time    func(msg M) time.Time
	SetTime func(msg M, at time.Time) M
	// Maintained builds the consumer on pool, with the fixture's receiver,
	// for the janitor (the generated wrapper); it must pass opts on.
	Maintained func(recv V, pool *pgxpool.Pool, opts ...idem.Option) idem.Maintained
}

// partitionScenarios returns the partition scenarios, when the Suite has a
// Partition.
func (s Suite[V, M, R]) partitionScenarios(seen *fixtureSeen) []Scenario {
	if s.Partition == nil {
		return nil
	}
	always := func() (bool, string) { return true, "" }
	return []Scenario{
		{Name: ScenarioBucketEdge, Run: func(t testing.TB) { s.bucketEdge(t, seen) }, applies: always},
		{Name: ScenarioBucketEdgeConcurrent, Run: func(t testing.TB) { s.bucketEdgeConcurrent(t, seen) }, applies: always},
		{Name: ScenarioRedeliveryAfterDrop, Run: func(t testing.TB) { s.redeliveryAfterDrop(t, seen) }, applies: always},
	}
}

// clock returns the option that sets a consumer's clock, the now its window
// is at.
func clock(now func() time.Time) idem.Option {
	return func(o *config.Options) { o.Now = now }
}

// keepPartitions runs one round of a janitor of the scenario's consumer at
// now and returns its report; the round must not fail.
func (sc *scenario[V, M, R]) keepPartitions(now time.Time) idem.JanitorReport {
	sc.t.Helper()
	m := sc.s.Partition.Maintained(sc.fx.Receiver, sc.db.Pool, WithTestLogger(sc.t))
	j, err := idem.NewJanitor(sc.db.Pool, []idem.Maintained{m},
		link.JanitorClock(func() time.Time { return now }).(idem.JanitorOption))
	if err != nil {
		sc.t.Fatalf("idem.NewJanitor of the partitioned inbox: %v", err)
	}
	rep, err := j.RunOnce(sc.ctx)
	if err != nil {
		sc.t.Fatalf("the janitor's round at %s: %v", now.Format(time.RFC3339), err)
	}
	return rep
}

// partitioned prepares a scenario of a partitioned inbox: the partitions of
// the window at the current time, and the message's time (at, when it is
// not zero; else the fixture's, else the current time).
func (sc *scenario[V, M, R]) partitioned(at time.Time) {
	sc.t.Helper()
	p := sc.s.Partition
	if p.Time == nil || p.SetTime == nil || p.Maintained == nil || !p.Bucket.Valid() {
		sc.t.Fatal("idemtest: a Suite's Partition needs a valid Bucket, Time, SetTime and Maintained")
	}
	sc.keepPartitions(time.Now())
	if at.IsZero() {
		if !p.Time(sc.fx.Message).IsZero() {
			return
		}
		// Microseconds: the time survives the JSON that carries the message
		// to a child process exactly.
		at = time.Now().UTC().Truncate(time.Microsecond)
	}
	sc.fx.Message = p.SetTime(sc.fx.Message, at)
}

// wantPartition checks that the inbox's one row is in the partition of the
// bucket that starts at start.
func (sc *scenario[V, M, R]) wantPartition(start time.Time, when string) {
	sc.t.Helper()
	parent := sc.s.Inbox[strings.LastIndexByte(sc.s.Inbox, '.')+1:]
	want := partition.Name(parent, sc.s.Partition.Bucket, start)
	table := pgx.Identifier(strings.Split(sc.s.Inbox, ".")).Sanitize()
	rows, err := sc.db.Pool.Query(sc.ctx, `SELECT c.relname FROM `+table+` AS t JOIN pg_class c ON c.oid = t.tableoid`)
	if err != nil {
		sc.t.Fatalf("find the partitions of the inbox's rows: %v", err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		sc.t.Fatalf("find the partitions of the inbox's rows: %v", err)
	}
	if !slices.Equal(got, []string{want}) {
		sc.t.Errorf("%s: the inbox's rows are in the partitions %v; want one row, in %s (the %s bucket from %s)",
			when, got, want, sc.s.Partition.Bucket, start.Format(time.RFC3339))
	}
}

// edge is the start of the bucket after the current one: its partition and
// the one before it exist (the janitor creates partition.Ahead buckets).
func (s Suite[V, M, R]) edge() time.Time {
	b := s.Partition.Bucket
	return b.Next(b.Start(time.Now()))
}

func (s Suite[V, M, R]) bucketEdge(t testing.TB, seen *fixtureSeen) {
	t.Helper()
	s.needEffect(t, seen)
	edge := s.edge()
	b := s.Partition.Bucket
	before := edge.Add(-time.Microsecond)
	for _, side := range []struct {
		name   string
		at     time.Time
		bucket time.Time
	}{
		{"one microsecond before the bucket's start", before, b.Start(before)},
		{"at the bucket's start", edge, edge},
	} {
		sc := s.startAt(t, seen, 2, side.at)
		msg := sc.fx.Message
		first := sc.mustProcess("the message "+side.name, msg)
		sc.wantPartition(side.bucket, "after the message "+side.name)
		sc.wantDuplicate("the redelivery of the message "+side.name, sc.deliver(sc.handle, msg), first)
		sc.wantRuns(1, "a Duplicate must not run the handler")
		sc.wantApplied(msg, 1, "after the message "+side.name+" and its redelivery")
	}
}

func (s Suite[V, M, R]) bucketEdgeConcurrent(t testing.TB, seen *fixtureSeen) {
	t.Helper()
	edge := s.edge()
	sc := s.concurrentAt(t, seen, edge)
	sc.wantPartition(edge, "after the concurrent deliveries at the bucket's start")
}

func (s Suite[V, M, R]) redeliveryAfterDrop(t testing.TB, seen *fixtureSeen) {
	t.Helper()
	s.needEffect(t, seen)
	sc := s.start(t, seen, 2)
	b := s.Partition.Bucket
	msg := sc.fx.Message
	at := s.Partition.Time(msg)
	sc.mustProcess("the first delivery", msg)
	retain := s.Partition.Maintained(sc.fx.Receiver, sc.db.Pool).Maintenance().Retain

	// The first moment the janitor drops the message's bucket: the bucket
	// ended a retention ago.
	later := b.Next(b.Start(at)).Add(retain + time.Second)
	rep := sc.keepPartitions(later)
	parent := s.Inbox[strings.LastIndexByte(s.Inbox, '.')+1:]
	dropped := partition.Name(parent, b, b.Start(at))
	if !slices.Contains(rep.Dropped[s.Inbox], dropped) {
		t.Fatalf("the janitor at %s dropped %v; want the partition of the message's bucket, %s", later.Format(time.RFC3339), rep.Dropped, dropped)
	}
	sc.wantInboxRows(0, "after the janitor dropped the message's partition")
	sc.wantEffect(msg, 1, "after the janitor dropped the message's partition (the business change stays)")

	refused := func(what string, d delivery[R]) {
		t.Helper()
		switch {
		case errors.Is(d.err, idem.ErrOutsideWindow):
			if a := idem.ActionFor(d.err); a != idem.DeadLetter {
				t.Errorf("%s: idem.ActionFor(%v) = %v; want DeadLetter", what, d.err, a)
			}
		case d.err == nil:
			t.Errorf("%s: got %v; want idem.ErrOutsideWindow: with its partition gone, a copy processed before cannot be recognised", what, d)
		default:
			t.Errorf("%s: got %v; want idem.ErrOutsideWindow", what, d)
		}
	}
	late := sc.newConsumerAt(sc.pool, func() time.Time { return later })
	refused("the redelivery once its partition was dropped", sc.deliver(late, msg))
	refused("the redelivery through a consumer whose clock is behind the janitor's", sc.deliver(sc.handle, msg))
	if s.Batch != nil {
		for i, d := range sc.batch(sc.newBatch(sc.pool), []M{msg, msg}) {
			refused(fmt.Sprintf("message %d of a batch of the message twice, through a consumer whose clock is behind the janitor's", i+1), d)
		}
	}
	sc.wantRuns(1, "a message outside the kept window must not run the handler")
	sc.wantInboxRows(0, "after the refused redeliveries")
	sc.wantEffect(msg, 1, "after the refused redeliveries")
}

// newConsumerAt is newConsumer with the consumer's clock set to now.
func (sc *scenario[V, M, R]) newConsumerAt(pool *pgxpool.Pool, now func() time.Time) HandleFunc[M, R] {
	saved := sc.s.Options
	sc.s.Options = append(slices.Clip(saved), clock(now))
	defer func() { sc.s.Options = saved }()
	return sc.newConsumer(pool)
}
