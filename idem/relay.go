package idem

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/idemgen/idemgen/generated/outboxdb"
	"github.com/idemgen/idemgen/idem/internal/obs"
	"github.com/idemgen/idemgen/idem/internal/outage"
	"github.com/idemgen/idemgen/idem/internal/pgutil"
)

// OutboxChannel is the channel of the NOTIFY that a committing transaction
// which wrote outbox rows sends, one per transaction; a [Relay] listens on it.
const OutboxChannel = "idem_outbox"

// Relay publishes the committed rows of the outbox table, idem_outbox (the
// migrations in github.com/idemgen/idemgen/migrations), through a
// [Publisher], at least once each, with the row's stable id as the message id.
//
// Each round claims a batch of due rows in one short statement (FOR UPDATE
// SKIP LOCKED, a fresh claim token and a lease), publishes it with no
// transaction open, and deletes the rows the broker confirmed and the token
// still holds: a published row is not kept. A failed row is tried again
// after an exponential backoff, with its error in last_error, and
// dead-lettered after the maximum number of attempts: kept and visible
// (dead_at), never published, holding back no other row. Any number of
// relays can run on one table and share the work.
//
// The relay wakes on the NOTIFY of [OutboxChannel], through a connection of
// its own that it reconnects with a backoff (and then looks for rows
// committed while it was not listening), and polls as a fallback; in
// poll-only mode ([WithRelayPollOnly]) it only polls.
type Relay struct {
	db  DB
	q   *outboxdb.Queries
	pub Publisher
	o   relayOptions

	ins *obs.Instruments
	// outages keeps a failure that lasts to one record per interval, per
	// destination (and "idem_outbox" for the database).
	outages *outage.Log

	running atomic.Bool
	// beforeListen, when set (by tests), runs before each attempt to open the
	// listening connection.
	beforeListen func()
}

// NewRelay returns a relay that publishes the outbox rows of db's database
// through pub. db is what the inboxes take (a *pgxpool.Pool, or any [DB]):
// each of the relay's statements runs on a connection acquired for it. With no options it claims batches of 100 rows, polls at least
// every second, renews 30-second leases while it publishes, and dead-letters a
// row after 10 attempts, with backoffs from a second up to five minutes.
// NewRelay panics on an option value that cannot work (a batch size below 1,
// a lease shorter than 30ms, a backoff whose maximum is below its base).
//
// The listening connection is taken out of db (acquired and hijacked), so it
// has db's settings and, once taken, does not count against its size.
func NewRelay(db DB, pub Publisher, opts ...RelayOption) *Relay {
	o := defaultRelayOptions()
	for _, opt := range opts {
		opt(&o)
	}
	o.validate()
	if db == nil || pub == nil {
		panic(fmt.Sprintf("idem.NewRelay (relay %s): the db and the publisher must not be nil", o.id))
	}
	return &Relay{db: db, q: outboxdb.New(acquiringDB{db}), pub: pub, o: o, ins: obs.New(o.meter), outages: outage.New(0)}
}

// ID is the relay's name, as given to [WithRelayID] or chosen by NewRelay.
func (r *Relay) ID() string { return r.o.id }

// Run publishes outbox rows until ctx ends, then returns nil. It returns an
// error at once when it is already running, or when the outbox table is not
// there (the migrations are not applied); a database that cannot be reached
// is logged and tried again with a backoff.
//
// On stop, rows claimed but not confirmed are released (due at once for the
// other relays, their attempt given back): an in-flight publish has its
// context cancelled, the rows the broker confirmed by then are marked, and
// the others handed back. Only if the database cannot be reached for that is
// a row left to its lease to lapse.
func (r *Relay) Run(ctx context.Context) error {
	if !r.running.CompareAndSwap(false, true) {
		return fmt.Errorf("idem: relay %s: Run called while it is running", r.o.id)
	}
	defer r.running.Store(false)

	if err := r.checkLayout(ctx); err != nil || ctx.Err() != nil {
		return err
	}
	gauges, err := r.registerGauges()
	if err != nil {
		return fmt.Errorf("idem: relay %s: register the outbox gauges: %w", r.o.id, err)
	}
	defer func() { _ = gauges.Unregister() }()

	wake := make(chan struct{}, 1)
	var listener sync.WaitGroup
	// Whatever Run returns, the listener stops at once: it never delays an
	// error (a missing table) or the stop.
	lctx, stopListener := context.WithCancel(ctx)
	defer func() {
		stopListener()
		listener.Wait()
	}()
	if !r.o.pollOnly {
		listener.Add(1)
		go func() {
			defer listener.Done()
			r.listen(lctx, wake)
		}()
	}

	r.o.logger.LogAttrs(ctx, slog.LevelInfo, "idem relay started", slog.String("relay", r.o.id),
		slog.Bool("ordered", r.o.ordered), slog.Bool("poll_only", r.o.pollOnly))
	failures := 0
	for {
		if ctx.Err() != nil {
			return nil
		}
		n, err := r.round(ctx)
		switch {
		case err != nil && pgutil.HasSQLState(err, pgerrcode.UndefinedTable, pgerrcode.UndefinedColumn):
			return r.outOfDate(err)
		case errors.Is(err, errPublishTimedOut):
			// Step back so that another relay takes the rows.
			if !sleep(ctx, r.o.publishBound()) {
				return nil
			}
			continue
		case err != nil:
			if ctx.Err() != nil {
				return nil
			}
			failures++
			delay := retryDelay(failures, r.o.poll)
			r.outages.Fail(ctx, r.o.logger, slog.LevelWarn, outboxTable, 1, err, "idem relay round failed",
				"relay", r.o.id, "failures", failures, "retry_in", delay)
			if !sleep(ctx, delay) {
				return nil
			}
			continue
		}
		failures = 0
		r.outages.OK(ctx, r.o.logger, outboxTable, "idem relay rounds succeed again")
		if n > 0 {
			// A full or partial batch: there may be more (and in ordered mode
			// the next row of each key is due now).
			continue
		}
		timer := time.NewTimer(r.o.poll)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-wake:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// errOutboxOutOfDate is what Run returns for an outbox table without the
// migration 00002 (rows deleted on publish).
var errOutboxOutOfDate = errors.New("the table still has published_at: apply the migration 00002_idem_outbox_delete_on_publish")

// checkLayout refuses an outbox table that is missing or still has the
// layout of the migration 00001, whose published rows this release's claim
// would take again. A database that cannot be reached is logged and tried
// again with a backoff, as the rounds do, until ctx ends (then it returns
// nil, and Run returns).
func (r *Relay) checkLayout(ctx context.Context) error {
	for failures := 1; ; failures++ {
		current, err := r.q.OutboxLayout(ctx)
		switch {
		case err == nil && current:
			return nil
		case err == nil:
			return r.outOfDate(errOutboxOutOfDate)
		case pgutil.HasSQLState(err, pgerrcode.UndefinedTable, pgerrcode.UndefinedColumn):
			return r.outOfDate(err)
		case ctx.Err() != nil:
			return nil
		}
		delay := retryDelay(failures, r.o.poll)
		r.outages.Fail(ctx, r.o.logger, slog.LevelWarn, outboxTable, 1, err, "idem relay could not read the outbox table's layout",
			"relay", r.o.id, "failures", failures, "retry_in", delay)
		if !sleep(ctx, delay) {
			return nil
		}
	}
}

func (r *Relay) outOfDate(err error) error {
	return fmt.Errorf("idem: relay %s: the outbox table idem_outbox is missing or out of date (apply the migrations of github.com/idemgen/idemgen/migrations): %w", r.o.id, err)
}

// round claims one batch, publishes it and records the outcome. It returns
// how many rows it claimed.
func (r *Relay) round(ctx context.Context) (int, error) {
	token := pgtype.UUID{Bytes: uuid.New(), Valid: true}
	claimedAt := time.Now()
	rows, err := r.claim(ctx, token)
	if err != nil || len(rows) == 0 {
		return 0, err
	}
	ids := rowIDs(rows)
	// The claim committed; from here on every row goes back or forward,
	// whatever ctx does: the bookkeeping runs on a context of its own.
	bookkeeping := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.WithoutCancel(ctx), bookkeepingTimeout)
	}
	if ctx.Err() != nil {
		book, cancel := bookkeeping()
		defer cancel()
		r.release(book, token, ids)
		return len(rows), nil
	}

	msgs := make([]OutgoingMessage, 0, len(rows))
	sent := make([]claimedRow, 0, len(rows))
	var failed []claimedRow
	var failedErrs []string
	for _, row := range rows {
		m, err := row.message()
		if err != nil {
			failed = append(failed, row)
			failedErrs = append(failedErrs, err.Error())
			continue
		}
		msgs = append(msgs, m)
		sent = append(sent, row)
	}

	var errs []error
	timedOut := false
	if len(msgs) > 0 {
		errs, timedOut = r.publish(ctx, token, sent, msgs, claimedAt)
	}
	book, cancelBook := bookkeeping()
	defer cancelBook()
	var ok []string
	var okRows []claimedRow
	for i, row := range sent {
		if errs[i] == nil {
			ok = append(ok, row.MessageID.String())
			okRows = append(okRows, row)
			continue
		}
		failed = append(failed, row)
		failedErrs = append(failedErrs, errs[i].Error())
	}
	if len(ok) > 0 {
		if err := r.markPublished(book, token, ok); err != nil {
			return len(rows), err
		}
		countByDestination(okRows, func(dest string, n int64) {
			r.ins.Published(book, dest, n)
			r.outages.OK(book, r.o.logger, dest, "idem relay publishes again")
		})
	}
	if len(failed) == 0 {
		return len(rows), nil
	}
	if ctx.Err() != nil {
		// Stopping: the failures are the cancelled publish's, not the broker's.
		r.release(book, token, rowIDs(failed))
		return len(rows), nil
	}
	if err := r.recordFailure(book, token, failed, failedErrs); err != nil {
		return len(rows), err
	}
	if timedOut {
		return len(rows), errPublishTimedOut
	}
	return len(rows), nil
}

// bookkeepingTimeout bounds each statement that records the outcome of a
// publish (mark, record the failure, release): they run to their end even
// when the relay is stopping.
const bookkeepingTimeout = 10 * time.Second

// claimedRow is a row as Claim and ClaimOrdered return it (their rows have
// the same fields).
type claimedRow outboxdb.ClaimRow

func (row claimedRow) message() (OutgoingMessage, error) {
	m := OutgoingMessage{
		ID:          row.MessageID.String(),
		Destination: row.Destination,
		OrderingKey: row.OrderingKey,
		Payload:     row.Payload,
		Attempt:     int(row.Attempts),
	}
	if len(row.Headers) > 0 && string(row.Headers) != "{}" {
		if err := json.Unmarshal(row.Headers, &m.Headers); err != nil {
			return m, fmt.Errorf("idem: outbox message %s: its headers are not a JSON object of strings: %w", m.ID, err)
		}
	}
	return m, nil
}

// rowIDs returns the message ids of rows, in text form: the relay's
// statements after the claim name rows by their message id, the outbox's
// primary key.
func rowIDs(rows []claimedRow) []string {
	ids := make([]string, len(rows))
	for i, row := range rows {
		ids[i] = row.MessageID.String()
	}
	return ids
}

// claim runs the claim statement to its end even when ctx is cancelled
// meanwhile (bounded by the lease), so that a stop never leaves a claim the
// relay does not know of. The rows come in the order of their ids, the
// order they were written in: the statement names them by their message id
// (the primary key), whose order is none.
func (r *Relay) claim(ctx context.Context, token pgtype.UUID) ([]claimedRow, error) {
	rows, err := r.claimRows(ctx, token)
	slices.SortFunc(rows, func(a, b claimedRow) int { return cmp.Compare(a.ID, b.ID) })
	return rows, err
}

func (r *Relay) claimRows(ctx context.Context, token pgtype.UUID) ([]claimedRow, error) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.o.lease)
	defer cancel()
	var rows []claimedRow
	if r.o.ordered {
		got, err := r.q.ClaimOrdered(cctx, outboxdb.ClaimOrderedParams{
			ClaimToken: token, LeaseSeconds: r.o.lease.Seconds(), BatchSize: int32(r.o.batchSize),
		})
		if err != nil {
			return nil, fmt.Errorf("idem: relay %s: claim (ordered): %w", r.o.id, err)
		}
		for _, g := range got {
			rows = append(rows, claimedRow(g))
		}
		return rows, nil
	}
	got, err := r.q.Claim(cctx, outboxdb.ClaimParams{
		ClaimToken: token, LeaseSeconds: r.o.lease.Seconds(), BatchSize: int32(r.o.batchSize),
	})
	if err != nil {
		return nil, fmt.Errorf("idem: relay %s: claim: %w", r.o.id, err)
	}
	for _, g := range got {
		rows = append(rows, claimedRow(g))
	}
	return rows, nil
}

// errLeaseLost and errLeaseLapsing are the causes of a publish cancelled
// because the relay no longer holds, or may soon no longer hold, its rows.
var (
	errLeaseLost      = errors.New("idem: relay: the claim of the batch was lost (its lease lapsed and another relay took a row)")
	errLeaseLapsing   = errors.New("idem: relay: the lease of the batch could not be renewed and is about to lapse")
	errPublishTimeout = errors.New("idem: relay: the publish was not confirmed within WithRelayPublishTimeout")
	// errPublishTimedOut is what round returns after a publish timed out.
	errPublishTimedOut = errors.New("idem: relay: a publish timed out; stepping back so that another relay takes the rows")
)

// abandonGrace is how long the relay waits, after a publish's context was
// cancelled, for a publisher that does not watch its context: then it takes
// none of the batch as confirmed and goes on.
const abandonGrace = time.Second

// publish hands msgs to the publisher while it keeps the batch's lease: it
// renews the lease every third of it, and cancels the publish a tenth of the
// lease before it would lapse if it cannot, or at once if a row was taken by
// another relay. The lease is counted from before the claim was sent, on this
// machine's clock, so the deadline here is never later than the database's.
// The publish is bounded by WithRelayPublishTimeout. It returns one error
// per message, and whether the publish timed out.
func (r *Relay) publish(ctx context.Context, token pgtype.UUID, rows []claimedRow, msgs []OutgoingMessage, claimedAt time.Time) ([]error, bool) {
	pctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	margin := r.o.lease / 10
	ids := rowIDs(rows)
	done := make(chan struct{})
	var keeper sync.WaitGroup
	keeper.Add(1)
	go func() {
		defer keeper.Done()
		deadline := claimedAt.Add(r.o.lease - margin)
		lapse := time.NewTimer(time.Until(deadline))
		defer lapse.Stop()
		renew := time.NewTicker(r.o.lease / 3)
		defer renew.Stop()
		for {
			select {
			case <-done:
				return
			case <-pctx.Done():
				return
			case <-lapse.C:
				cancel(errLeaseLapsing)
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
					cancel(errLeaseLost)
					return
				}
				deadline = sentAt.Add(r.o.lease - margin)
				lapse.Reset(time.Until(deadline))
			}
		}
	}()
	timeout := time.AfterFunc(r.o.publishBound(), func() { cancel(errPublishTimeout) })
	defer timeout.Stop()
	var errs []error
	returned := make(chan []error, 1)
	go func() { returned <- r.pub.Publish(pctx, msgs) }()
	select {
	case errs = <-returned:
		timeout.Stop()
	case <-pctx.Done():
		select {
		case errs = <-returned:
		case <-time.After(abandonGrace):
			errs = make([]error, len(msgs))
			for i := range errs {
				errs[i] = fmt.Errorf("idem: relay %s: the publisher did not return within %v of its context ending", r.o.id, abandonGrace)
			}
		}
	}
	close(done)
	keeper.Wait()
	if len(errs) != len(msgs) {
		err := fmt.Errorf("idem: relay %s: the publisher returned %d errors for %d messages; taking none as confirmed", r.o.id, len(errs), len(msgs))
		errs = make([]error, len(msgs))
		for i := range errs {
			errs[i] = err
		}
	}
	cause := context.Cause(pctx)
	if cause != nil && ctx.Err() == nil {
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
	return errs, failed && errors.Is(cause, errPublishTimeout) && ctx.Err() == nil
}

// markPublished deletes the rows ids that the broker confirmed, where the
// token still holds them.
func (r *Relay) markPublished(ctx context.Context, token pgtype.UUID, ids []string) error {
	n, err := r.q.MarkPublished(ctx, outboxdb.MarkPublishedParams{MessageIds: ids, ClaimToken: token})
	if err != nil {
		// The rows stay claimed until the lease lapses, then they are
		// published again: at least once.
		return fmt.Errorf("idem: relay %s: delete %d published rows: %w", r.o.id, len(ids), err)
	}
	r.o.logger.LogAttrs(ctx, slog.LevelDebug, "idem relay published", slog.String("relay", r.o.id), slog.Int("rows", len(ids)))
	if n < int64(len(ids)) {
		r.o.logger.LogAttrs(ctx, slog.LevelWarn, "idem relay lost the claim of published rows before deleting them; they will be published again",
			slog.String("relay", r.o.id), slog.Int64("lost", int64(len(ids))-n))
	}
	return nil
}

func (r *Relay) recordFailure(ctx context.Context, token pgtype.UUID, rows []claimedRow, errs []string) error {
	_, err := r.q.RecordFailure(ctx, outboxdb.RecordFailureParams{
		ClaimToken:         token,
		MessageIds:         rowIDs(rows),
		Errors:             errs,
		BackoffBaseSeconds: r.o.backoffBase.Seconds(),
		BackoffMaxSeconds:  r.o.backoffMax.Seconds(),
		MaxAttempts:        int32(r.o.maxAttempts),
	})
	if err != nil {
		return fmt.Errorf("idem: relay %s: record %d failed rows: %w", r.o.id, len(rows), err)
	}
	countByDestination(rows, func(dest string, n int64) { r.ins.PublishFailures(ctx, dest, n) })
	// One record for a failing batch per destination, then a summary per
	// interval while the failure lasts (outage.Log); a dead-lettered row
	// has a record of its own.
	first := map[string]int{}
	for i, row := range rows {
		if int(row.Attempts) >= r.o.maxAttempts {
			r.o.logger.LogAttrs(ctx, slog.LevelError, "idem relay dead-lettered an outbox message", slog.String("relay", r.o.id),
				slog.String("message_id", row.MessageID.String()), slog.String("destination", row.Destination),
				slog.Int("attempt", int(row.Attempts)), slog.String("error", errs[i]))
		}
		if _, seen := first[row.Destination]; !seen {
			first[row.Destination] = i
		}
	}
	countByDestination(rows, func(dest string, n int64) {
		i := first[dest]
		r.outages.Fail(ctx, r.o.logger, slog.LevelWarn, dest, int(n), errors.New(errs[i]), "idem relay publish failed; will retry",
			"relay", r.o.id, "rows", n, "message_id", rows[i].MessageID.String(), "attempt", int(rows[i].Attempts))
	})
	return nil
}

// release hands claimed rows back; if it fails, their lease lapses instead.
func (r *Relay) release(ctx context.Context, token pgtype.UUID, ids []string) {
	if _, err := r.q.Release(ctx, outboxdb.ReleaseParams{MessageIds: ids, ClaimToken: token}); err != nil {
		r.o.logger.LogAttrs(ctx, slog.LevelWarn, "idem relay could not release its rows on stop; they are free again when the lease lapses",
			slog.String("relay", r.o.id), slog.Int("rows", len(ids)), slog.Duration("lease", r.o.lease), slog.String("error", err.Error()))
	}
}

// Purge deleted the rows published more than olderThan ago. Since the
// outbox migration 00002 the relay deletes a row once the broker has
// confirmed it, so there is none to delete: Purge returns 0, or an error for
// a negative retention. Pending and dead rows were never purged, and are
// not.
//
// Deprecated: published rows are deleted when they are published; there is
// nothing to purge.
func (r *Relay) Purge(ctx context.Context, olderThan time.Duration) (int64, error) {
	if olderThan < 0 {
		return 0, fmt.Errorf("idem: relay %s: purge: negative retention %v", r.o.id, olderThan)
	}
	return 0, nil
}

// OutboxBacklog is what is waiting in the outbox.
type OutboxBacklog struct {
	// Pending counts the rows neither published nor dead.
	Pending int64
	// Dead counts the dead-lettered rows.
	Dead int64
	// OldestAge is the age of the oldest pending row; 0 when none is.
	OldestAge time.Duration
}

// Backlog reads what is waiting in the outbox, for metrics and alerts: the
// statement of the outbox gauges (idem.outbox.backlog, idem.outbox.oldest_age,
// idem.outbox.dead), which reads the unpublished rows only, through the
// outbox's partial indexes.
func (r *Relay) Backlog(ctx context.Context) (OutboxBacklog, error) {
	b, err := r.q.Backlog(ctx)
	if err != nil {
		return OutboxBacklog{}, fmt.Errorf("idem: relay %s: read the outbox backlog: %w", r.o.id, err)
	}
	return OutboxBacklog{Pending: b.Pending, Dead: b.Dead, OldestAge: time.Duration(b.OldestSeconds * float64(time.Second))}, nil
}

// retryDelay is the wait before the n-th retry (n >= 1) of something that
// failed: 50ms doubled per failure up to max, with up to a fifth of jitter so
// that relays that failed together do not retry together.
func retryDelay(n int, max time.Duration) time.Duration {
	d := 50 * time.Millisecond
	for i := 1; i < n && d < max; i++ {
		d *= 2
	}
	d = min(d, max)
	return d - time.Duration(rand.Int64N(int64(d)/5+1))
}

// sleep waits d or until ctx ends; it reports whether ctx is still live.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
