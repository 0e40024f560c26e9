package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/idemgen/idemgen/generated/outboxdb"
	"github.com/idemgen/idemgen/idem"
)

// The relay's pipeline: a batch at the broker while the database marks the
// batch before it and claims the one after it.
//
// A batch is claimed, then held (its lease renewed) until its publish
// returns. While a full batch is at the broker, one round trip marks the
// rows the broker confirmed of the batch before it and claims the next, in
// one transaction (the claim sees the marks: in ordered mode it takes each
// key's next row at once). When the batch at the broker returns, the next
// one goes out at once. So each batch costs what the slower of the broker
// and that round trip costs, not the sum of a claim, a publish and a mark.
// A partial batch at the broker means the backlog is drained: the next
// claim waits for it, so that a relay does not hold rows that another,
// idle relay could publish.

// flight is one claimed batch on its way.
type flight struct {
	token     claimToken
	rows      []claimedRow
	claimedAt time.Time // before the claim was sent: the lease counts from it
	// point is where the claim was in the WAL, under WithReplicated: the
	// rows are published once a standby has flushed it.
	point replicationPoint

	// sent are the rows handed to the publisher, msgs their messages;
	// failed the rows that could not be made into a message, and after the
	// publish those the broker did not confirm, with failedErrs their errors.
	sent       []claimedRow
	msgs       []idem.OutgoingMessage
	failed     []claimedRow
	failedErrs []string

	// ctx is the publish's: it ends with Run's, or with a cause when the
	// lease is lost or about to lapse (the keeper), or the publish bound
	// passed.
	ctx    context.Context
	cancel context.CancelCauseFunc
	run    context.Context // Run's
	stop   chan struct{}   // closed to stop the keeper
	keeper sync.WaitGroup
	ended  sync.Once

	done     chan struct{} // closed when the publish returned
	errs     []error       // one per msgs, once done
	timedOut bool          // the publish bound passed with messages unconfirmed
}

// confirmed are the rows of a batch that the broker confirmed, to be marked.
type confirmed struct {
	token claimToken
	rows  []claimedRow
}

func (c *confirmed) ids() []string { return rowIDs(c.rows) }

// drain first marks the rows an earlier round could not (markLeft) and
// releases the claims whose answer it did not get (releaseLost). Then it
// claims, publishes and marks batches until one of three things. A claim
// that came after every mark finds no row: it returns nil. Run's ctx ends:
// nil too, once what was claimed is marked or handed back. A statement
// fails: its error.
func (r *Relay) drain(ctx context.Context) error {
	if err := r.markLeft(ctx); err != nil {
		return err
	}
	if err := r.releaseLost(ctx); err != nil {
		return err
	}
	var (
		atBroker *flight    // the batch being published
		toMark   *confirmed // confirmed rows not marked yet
	)
	for {
		idle := atBroker == nil
		claim := ctx.Err() == nil && (idle || len(atBroker.rows) == r.o.batchSize)
		var next *flight
		if claim || toMark != nil {
			var err error
			next, err = r.markAndClaim(ctx, toMark, claim)
			if err != nil {
				// Nothing of the round trip took effect.
				r.abandon(ctx, atBroker, toMark)
				return err
			}
			toMark = nil
		}
		if next != nil && ctx.Err() != nil {
			r.giveBack(ctx, next)
			next = nil
		}
		if atBroker != nil {
			done, err := r.settle(ctx, atBroker)
			atBroker = nil
			if err != nil {
				// The publish timed out (Run steps back so that another relay
				// takes the rows), or its failures could not be recorded.
				r.giveBack(ctx, next)
				r.markNow(ctx, done)
				return err
			}
			toMark = done
		}
		switch {
		case next != nil:
			r.launch(next)
			atBroker = next
		case ctx.Err() != nil:
			r.markNow(ctx, toMark)
			return nil
		case claim && idle:
			// The claim came after every mark and found nothing.
			return nil
		}
	}
}

// bookkeeping is the context of a statement that records what happened to
// claimed rows: it runs to its end even when the relay is stopping.
func bookkeeping(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), bookkeepingTimeout)
}

// markAndClaim marks the rows of c (nil: none) and, when claim, claims the
// next batch, in one round trip and one transaction (pipelined). It returns the claimed
// batch, held, or nil when it claimed nothing.
func (r *Relay) markAndClaim(ctx context.Context, c *confirmed, claim bool) (*flight, error) {
	book, cancel := bookkeeping(ctx)
	defer cancel()
	if !claim {
		return nil, r.markPublished(book, c, false)
	}
	token := newClaimToken()
	claimedAt := time.Now()
	var rows []claimedRow
	var point replicationPoint
	var err error
	if c == nil {
		// Run to its end even when ctx is cancelled meanwhile (bounded by
		// the lease), so that a stop never leaves a claim the relay does
		// not know of.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.o.lease)
		defer cancel()
		_, rows, point, err = r.pipelined(cctx, nil, token)
	} else {
		var marked int64
		marked, rows, point, err = r.pipelined(book, c, token)
		if err == nil {
			r.markedRows(book, c, marked, false)
		}
	}
	if err != nil || len(rows) == 0 {
		return nil, err
	}
	return r.hold(ctx, token, rows, claimedAt, point), nil
}

// hold starts the keeper of a claimed batch: it renews the lease every third
// of it, and cancels the batch's context a tenth of the lease before it
// would lapse if it cannot, or at once if a row was taken by another relay.
// The lease is counted from before the claim was sent, on the relay's own
// clock, so the deadline here is never later than the database's. The keeper
// runs until the batch's publish returns or the batch is handed back (end).
func (r *Relay) hold(ctx context.Context, token claimToken, rows []claimedRow, claimedAt time.Time, point replicationPoint) *flight {
	f := &flight{token: token, rows: rows, claimedAt: claimedAt, point: point, stop: make(chan struct{}), done: make(chan struct{})}
	for _, row := range rows {
		m, err := row.message()
		if err != nil {
			f.failed = append(f.failed, row)
			f.failedErrs = append(f.failedErrs, err.Error())
			continue
		}
		f.msgs = append(f.msgs, m)
		f.sent = append(f.sent, row)
	}
	f.ctx, f.cancel = context.WithCancelCause(ctx)
	f.run = ctx
	margin := r.o.lease / 10
	ids := rowIDs(rows)
	f.keeper.Add(1)
	go func() {
		defer f.keeper.Done()
		deadline := claimedAt.Add(r.o.lease - margin)
		lapse := time.NewTimer(time.Until(deadline))
		defer lapse.Stop()
		renew := time.NewTicker(r.o.lease / 3)
		defer renew.Stop()
		for {
			select {
			case <-f.stop:
				return
			case <-f.ctx.Done():
				return
			case <-lapse.C:
				f.cancel(errLeaseLapsing)
				return
			case <-renew.C:
				sentAt := time.Now()
				ectx, ecancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
				held, err := r.q.ExtendLease(ectx, outboxdb.ExtendLeaseParams{
					LeaseSeconds: r.o.lease.Seconds(), MessageIds: ids, ClaimToken: token,
				})
				ecancel()
				if err != nil {
					r.o.logger.LogAttrs(ctx, slog.LevelWarn, "idem relay could not renew a lease", slog.String("relay", r.o.id),
						slog.Int("rows", len(ids)), slog.String("error", err.Error()))
					continue
				}
				if len(held) < len(ids) {
					f.cancel(errLeaseLost)
					return
				}
				deadline = sentAt.Add(r.o.lease - margin)
				lapse.Reset(time.Until(deadline))
			}
		}
	}()
	return f
}

// end stops the batch's keeper and waits for it.
func (f *flight) end() {
	f.ended.Do(func() {
		close(f.stop)
		f.keeper.Wait()
		f.cancel(nil)
	})
}

// launch publishes f in a goroutine of its own; f.done is closed when the
// publish returned.
func (r *Relay) launch(f *flight) {
	go func() {
		defer close(f.done)
		f.errs, f.timedOut = r.publish(f)
	}()
}

// abandonGrace is how long the relay waits, after a publish's context was
// cancelled, for a publisher that does not watch its context: then it takes
// none of the batch as confirmed and goes on.
const abandonGrace = time.Second

// publish hands f's messages to the publisher, bounded by
// WithPublishTimeout, while the keeper holds the lease (a batch whose
// lease was lost or is lapsing before its turn is not handed over at all).
// It returns one error per message, and whether the publish timed out; the
// keeper is stopped when it returns.
func (r *Relay) publish(f *flight) ([]error, bool) {
	defer f.end()
	if len(f.msgs) == 0 {
		return nil, false
	}
	var errs []error
	var held error // why the rows were not handed over
	if r.o.replicated && f.ctx.Err() == nil {
		held = r.waitReplicated(f.ctx, f)
	}
	if f.ctx.Err() == nil && held == nil {
		timeout := time.AfterFunc(r.o.publishBound(), func() { f.cancel(errPublishTimeout) })
		defer timeout.Stop()
		returned := make(chan []error, 1)
		go func() { returned <- r.pub.Publish(f.ctx, f.msgs) }()
		select {
		case errs = <-returned:
			timeout.Stop()
		case <-f.ctx.Done():
			select {
			case errs = <-returned:
			case <-time.After(abandonGrace):
				errs = make([]error, len(f.msgs))
				for i := range errs {
					errs[i] = fmt.Errorf("idem: relay %s: the publisher did not return within %v of its context ending", r.o.id, abandonGrace)
				}
			}
		}
	} else {
		if held == nil {
			held = errors.New("idem: relay: not handed to the publisher")
		}
		errs = make([]error, len(f.msgs))
		for i := range errs {
			errs[i] = held
		}
	}
	if len(errs) != len(f.msgs) {
		err := fmt.Errorf("idem: relay %s: the publisher returned %d errors for %d messages; taking none as confirmed", r.o.id, len(errs), len(f.msgs))
		errs = make([]error, len(f.msgs))
		for i := range errs {
			errs[i] = err
		}
	}
	// The cause of a cancelled publish, unless Run is stopping (then the
	// failures are the stop's, and the rows are handed back).
	cause := context.Cause(f.ctx)
	if cause != nil && f.run.Err() == nil {
		for i, err := range errs {
			if err != nil {
				errs[i] = fmt.Errorf("%w: %w", err, cause)
			}
		}
	}
	failed := false
	for _, err := range errs {
		failed = failed || err != nil
	}
	return errs, failed && errors.Is(cause, errPublishTimeout) && f.run.Err() == nil
}

// settle waits for f's publish and records its outcome: the rows the broker
// did not confirm are recorded as failed (retried after their backoff, or
// dead-lettered), or handed back if Run is stopping. It returns the rows the
// broker confirmed, to be marked (nil if none), and errPublishTimedOut after
// a publish that timed out.
func (r *Relay) settle(ctx context.Context, f *flight) (*confirmed, error) {
	<-f.done
	var ok *confirmed
	failed, failedErrs := f.failed, f.failedErrs
	for i, row := range f.sent {
		if f.errs[i] == nil {
			if ok == nil {
				ok = &confirmed{token: f.token}
			}
			ok.rows = append(ok.rows, row)
			continue
		}
		failed = append(failed, row)
		failedErrs = append(failedErrs, f.errs[i].Error())
	}
	if len(failed) == 0 {
		return ok, nil
	}
	book, cancel := bookkeeping(ctx)
	defer cancel()
	if ctx.Err() != nil {
		// Stopping: the failures are the cancelled publish's, not the broker's.
		r.release(book, f.token, rowIDs(failed))
		return ok, nil
	}
	if err := r.recordFailure(book, f.token, failed, failedErrs); err != nil {
		return ok, err
	}
	if f.timedOut {
		return ok, errPublishTimedOut
	}
	return ok, nil
}

// giveBack hands a claimed batch that was not published back (nil: none).
func (r *Relay) giveBack(ctx context.Context, f *flight) {
	if f == nil {
		return
	}
	f.end()
	book, cancel := bookkeeping(ctx)
	defer cancel()
	r.release(book, f.token, rowIDs(f.rows))
}

// markNow marks c's rows (nil: none) on their own; if it fails, they are
// kept to be marked before the next claim (markLeft).
func (r *Relay) markNow(ctx context.Context, c *confirmed) {
	if c == nil {
		return
	}
	book, cancel := bookkeeping(ctx)
	defer cancel()
	if err := r.markPublished(book, c, false); err != nil {
		r.unmarked = append(r.unmarked, c)
		r.o.logger.LogAttrs(book, slog.LevelWarn, "idem relay could not delete published rows; it deletes them once the database answers (if it stops first, they are published again when their lease lapses)",
			slog.String("relay", r.o.id), slog.Int("rows", len(c.rows)), slog.String("error", err.Error()))
	}
}

// releaseLost releases the rows of the claims whose answer the relay did
// not get (pipelined kept their tokens). Such a claim may have committed
// though its connection broke before the answer came. Its rows, which the
// relay does not know, would wait for their lease to lapse.
func (r *Relay) releaseLost(ctx context.Context) error {
	if len(r.lostClaims) == 0 {
		return nil
	}
	tokens := make([]string, len(r.lostClaims))
	for i, t := range r.lostClaims {
		tokens[i] = strconv.FormatInt(t, 10)
	}
	book, cancel := bookkeeping(ctx)
	defer cancel()
	n, err := r.q.ReleaseClaims(book, tokens)
	if err != nil {
		return fmt.Errorf("idem: relay %s: release %d claims whose answer was lost: %w", r.o.id, len(tokens), err)
	}
	if n > 0 {
		r.o.logger.LogAttrs(book, slog.LevelInfo, "idem relay released the rows of claims whose answer it did not get",
			slog.String("relay", r.o.id), slog.Int("claims", len(tokens)), slog.Int64("rows", n))
	}
	r.lostClaims = nil
	return nil
}

// markLeft marks the confirmed rows whose mark failed (the database was
// down, or failed over), oldest first, then does the recent marks again
// after a failed round (redoRecent), and stops at the first failure.
// Marked before their lease lapses, they are neither held back for the
// rest of the lease nor published again: a failover or a restart costs
// the relay no lease and no second publish. The mark names the rows with
// their claim's token, so a row another relay took meanwhile is left to
// it.
func (r *Relay) markLeft(ctx context.Context) error {
	for len(r.unmarked) > 0 {
		book, cancel := bookkeeping(ctx)
		err := r.markPublished(book, r.unmarked[0], true)
		cancel()
		if err != nil {
			return err
		}
		r.unmarked = r.unmarked[1:]
	}
	r.unmarked = nil
	for len(r.redo) > 0 {
		c := r.redo[0]
		book, cancel := bookkeeping(ctx)
		n, err := r.q.MarkPublished(book, outboxdb.MarkPublishedParams{MessageIds: c.ids(), ClaimToken: c.token})
		cancel()
		if err != nil {
			return r.markFailed(c, err)
		}
		if n > 0 {
			r.o.logger.LogAttrs(ctx, slog.LevelInfo, "idem relay deleted again published rows whose deletion the database had lost",
				slog.String("relay", r.o.id), slog.Int64("rows", n))
		}
		r.redo = r.redo[1:]
	}
	r.redo = nil
	return nil
}

// recentMarks is how long the relay keeps its marks to do them again after
// a round failed. A mark commits without waiting for its WAL flush
// (relaxedCommit): the WAL writer flushes it within three times
// wal_writer_delay (200ms by default), and a crash or a failover before
// that loses it, even with a synchronous standby. Its rows, published
// already, would be published again once their lease lapsed.
const recentMarks = 2 * time.Second

// recentMark is a mark and when it was done.
type recentMark struct {
	at time.Time
	c  *confirmed
}

// remember keeps c among the recent marks, and forgets those older than
// recentMarks.
func (r *Relay) remember(c *confirmed) {
	now := time.Now()
	keep := r.recent[:0]
	for _, m := range r.recent {
		if now.Sub(m.at) < recentMarks {
			keep = append(keep, m)
		}
	}
	r.recent = append(keep, recentMark{at: now, c: c})
}

// redoRecent has markLeft do the recent marks again: a round that failed
// may mean the database was lost (a crash, a failover), and with it the
// marks whose commit was not flushed yet. Deleting a row again is
// harmless: the mark names the row with its claim's token.
func (r *Relay) redoRecent() {
	for _, m := range r.recent {
		r.redo = append(r.redo, m.c)
	}
	r.recent = nil
}

// abandon is what drain does when a round trip failed: it waits for the
// batch at the broker (nil: none), records its outcome, and tries to mark
// what was confirmed on its own statements.
func (r *Relay) abandon(ctx context.Context, atBroker *flight, toMark *confirmed) {
	r.markNow(ctx, toMark)
	if atBroker == nil {
		return
	}
	done, _ := r.settle(ctx, atBroker)
	r.markNow(ctx, done)
}
