package relay

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgerrcode"

	"github.com/idemgen/idemgen/generated/outboxdb"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/internal/obs"
	"github.com/idemgen/idemgen/idem/internal/outage"
	"github.com/idemgen/idemgen/idem/internal/pgutil"
	"github.com/idemgen/idemgen/idem/internal/wait"
)

// Relay publishes the committed rows of the outbox table, idem_outbox (the
// migrations in github.com/idemgen/idemgen/migrations), through a
// [idem.Publisher], at least once each, with the row's stable id as the message id.
//
// It claims a batch of due rows in one short statement (FOR UPDATE SKIP
// LOCKED, a fresh claim token and a lease), publishes it with no
// transaction open, and deletes the rows the broker confirmed and the token
// still holds: a published row is not kept. While a full batch is at the
// broker, one round trip deletes the batch before it and claims the next, so
// that the broker's confirms and the database's work overlap; it goes on
// while it finds rows. A failed row is tried again after an exponential
// backoff, with its error in last_error, and dead-lettered after the maximum
// number of attempts: kept and visible (dead_at), never published, holding
// back no other row. Any number of relays can run on one table and share the
// work.
//
// The relay wakes on the NOTIFY of [idem.OutboxChannel], through a connection of
// its own that it reconnects with a backoff (and then looks for rows
// committed while it was not listening), and polls as a fallback; in
// poll-only mode ([WithPollOnly]) it only polls.
type Relay struct {
	db  idem.DB
	q   *outboxdb.Queries
	pub idem.Publisher
	o   options

	ins *obs.Instruments
	// outages keeps a failure that lasts to one record per interval, per
	// destination (and "idem_outbox" for the database).
	outages *outage.Log

	// unmarked are the confirmed rows whose mark failed, to be marked
	// before the next claim (markLeft); only Run's goroutine uses it.
	unmarked []*confirmed
	// lostClaims are the tokens of claims whose answer the relay did not
	// get, to be released before the next claim (releaseLost); only Run's
	// goroutine uses it.
	lostClaims []claimToken
	// recent are the marks of the last recentMarks, and redo those to do
	// again before the next claim after a round failed (markLeft); only
	// Run's goroutine uses them.
	recent []recentMark
	redo   []*confirmed
	// listenerLost is set by the listener when its connection breaks: the
	// database may have been lost, and Run does its recent marks again
	// before the next round. An idle relay has no failed round to tell it.
	listenerLost atomic.Bool

	running atomic.Bool
	// beforeListen, when set (by tests), runs before each attempt to open the
	// listening connection.
	beforeListen func()
}

// New returns a relay that publishes the outbox rows of db's database
// through pub. db is what the inboxes take (a *pgxpool.Pool, or any [idem.DB]):
// each of the relay's statements runs on a connection acquired for it. With no options it claims batches of 100 rows, polls at least
// every second, renews 30-second leases while it publishes, and dead-letters a
// row after 10 attempts, with backoffs from a second up to five minutes.
// New panics on an option value that cannot work (a batch size below 1,
// a lease shorter than 30ms, a backoff whose maximum is below its base).
//
// The listening connection is taken out of db (acquired and hijacked), so it
// has db's settings and, once taken, does not count against its size.
func New(db idem.DB, pub idem.Publisher, opts ...Option) *Relay {
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	o.validate()
	if db == nil || pub == nil {
		panic(fmt.Sprintf("relay.New (relay %s): the db and the publisher must not be nil", o.id))
	}
	return &Relay{db: db, q: outboxdb.New(acquiringDB{db}), pub: pub, o: o, ins: obs.New(o.meter), outages: outage.New(0)}
}

// ID is the relay's name, as given to [WithID] or chosen by New.
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
	// On the way out, a last try at what the database refused.
	defer func() {
		if r.markLeft(ctx) == nil {
			_ = r.releaseLost(ctx)
		}
	}()
	failures := 0
	for {
		if ctx.Err() != nil {
			return nil
		}
		if r.listenerLost.Swap(false) {
			r.redoRecent()
		}
		err := r.drain(ctx)
		switch {
		case err != nil && pgutil.HasSQLState(err, pgerrcode.UndefinedTable, pgerrcode.UndefinedColumn):
			return r.outOfDate(err)
		case errors.Is(err, errPublishTimedOut):
			// Step back so that another relay takes the rows.
			if !wait.Sleep(ctx, r.o.publishBound()) {
				return nil
			}
			continue
		case err != nil:
			if ctx.Err() != nil {
				return nil
			}
			failures++
			r.redoRecent()
			delay := wait.Backoff(failures, r.o.poll)
			r.outages.Fail(ctx, r.o.logger, slog.LevelWarn, outboxTable, 1, err, "idem relay round failed",
				"relay", r.o.id, "failures", failures, "retry_in", delay)
			if !wait.Sleep(ctx, delay) {
				return nil
			}
			continue
		}
		failures = 0
		r.outages.OK(ctx, r.o.logger, outboxTable, "idem relay rounds succeed again")
		// drain's last claim, sent after its last mark, found no row: wait
		// for a NOTIFY or the poll.
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

// errOutboxBeforeCompactClaim is what Run returns for an outbox table
// without the migration 00003 (a bigint claim token, the claim's columns
// last), which this release's statements need: its uuid claim_token does
// not take the relay's token.
var errOutboxBeforeCompactClaim = errors.New("the table's claim_token is not a bigint: apply the migration 00003_idem_outbox_compact_claim")

// claimToken names one claim of the relay's: the rows it took carry it, and
// the statements after the claim act only on the rows that still carry it.
type claimToken = int64

// newClaimToken draws a claim's token: 63 random bits (math/rand/v2's
// generator, seeded from the system's entropy), so that two claims that
// overlap share one with a probability of about 2⁻⁶³; never 0, a value no
// claim uses.
func newClaimToken() claimToken {
	for {
		if t := rand.Int64(); t != 0 {
			return t
		}
	}
}

// checkLayout refuses an outbox table that is missing or still has the
// layout of the migration 00001, whose published rows this release's claim
// would take again. A database that cannot be reached is logged and tried
// again with a backoff, as the rounds do, until ctx ends (then it returns
// nil, and Run returns).
func (r *Relay) checkLayout(ctx context.Context) error {
	for failures := 1; ; failures++ {
		missing, err := r.q.OutboxLayout(ctx)
		switch {
		case err == nil && missing == "":
			return nil
		case err == nil && strings.HasPrefix(missing, "00002"):
			return r.outOfDate(errOutboxOutOfDate)
		case err == nil:
			return r.outOfDate(errOutboxBeforeCompactClaim)
		case pgutil.HasSQLState(err, pgerrcode.UndefinedTable, pgerrcode.UndefinedColumn):
			return r.outOfDate(err)
		case ctx.Err() != nil:
			return nil
		}
		delay := wait.Backoff(failures, r.o.poll)
		r.outages.Fail(ctx, r.o.logger, slog.LevelWarn, outboxTable, 1, err, "idem relay could not read the outbox table's layout",
			"relay", r.o.id, "failures", failures, "retry_in", delay)
		if !wait.Sleep(ctx, delay) {
			return nil
		}
	}
}

func (r *Relay) outOfDate(err error) error {
	return fmt.Errorf("idem: relay %s: the outbox table idem_outbox is missing or out of date (apply the migrations of github.com/idemgen/idemgen/migrations): %w", r.o.id, err)
}

// bookkeepingTimeout bounds each statement that records the outcome of a
// publish (mark, record the failure, release): they run to their end even
// when the relay is stopping.
const bookkeepingTimeout = 10 * time.Second

// claimedRow is a row as Claim and ClaimOrdered return it (their rows have
// the same fields).
type claimedRow outboxdb.ClaimRow

func (row claimedRow) message() (idem.OutgoingMessage, error) {
	m := idem.OutgoingMessage{
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

// claimWith runs the claim of the relay's mode through q. The rows come in
// the order of their ids, the order they were written in: the statement
// names them by their message id (the primary key), whose order is none.
func (r *Relay) claimWith(ctx context.Context, q *outboxdb.Queries, token claimToken) ([]claimedRow, error) {
	rows, err := r.claimRowsWith(ctx, q, token)
	slices.SortFunc(rows, func(a, b claimedRow) int { return cmp.Compare(a.ID, b.ID) })
	return rows, err
}

func (r *Relay) claimRowsWith(ctx context.Context, q *outboxdb.Queries, token claimToken) ([]claimedRow, error) {
	var rows []claimedRow
	if r.o.ordered {
		got, err := q.ClaimOrdered(ctx, outboxdb.ClaimOrderedParams{
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
	got, err := q.Claim(ctx, outboxdb.ClaimParams{
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
	errPublishTimeout = errors.New("idem: relay: the publish was not confirmed within WithPublishTimeout")
	// errPublishTimedOut is what drain returns after a publish timed out.
	errPublishTimedOut = errors.New("idem: relay: a publish timed out; stepping back so that another relay takes the rows")
)

// markPublished deletes c's rows, which the broker confirmed, where c's
// token still holds them, in a statement of its own; retried as for
// markedRows.
func (r *Relay) markPublished(ctx context.Context, c *confirmed, retried bool) error {
	n, err := r.q.MarkPublished(ctx, outboxdb.MarkPublishedParams{MessageIds: c.ids(), ClaimToken: c.token})
	if err != nil {
		return r.markFailed(c, err)
	}
	r.markedRows(ctx, c, n, retried)
	return nil
}

// markFailed explains a failed mark: the rows stay claimed until the lease
// lapses, then they are published again (at least once).
func (r *Relay) markFailed(c *confirmed, err error) error {
	return fmt.Errorf("idem: relay %s: delete %d published rows: %w", r.o.id, len(c.rows), err)
}

// markedRows records that n of c's rows were deleted as published: the
// idem.relay.published counts and the outage records by destination, and a
// warning for the rows whose claim was lost before the mark. retried says
// the mark is the retry of one that failed (markLeft), which may have
// deleted them already: then the missing rows are only noted.
func (r *Relay) markedRows(ctx context.Context, c *confirmed, n int64, retried bool) {
	r.o.logger.LogAttrs(ctx, slog.LevelDebug, "idem relay published", slog.String("relay", r.o.id), slog.Int("rows", len(c.rows)))
	r.remember(c)
	switch {
	case n < int64(len(c.rows)) && retried:
		r.o.logger.LogAttrs(ctx, slog.LevelInfo, "idem relay found published rows gone when it deleted them again: the failed deletion had committed, or another relay took them",
			slog.String("relay", r.o.id), slog.Int64("gone", int64(len(c.rows))-n))
	case n < int64(len(c.rows)):
		r.o.logger.LogAttrs(ctx, slog.LevelWarn, "idem relay lost the claim of published rows before deleting them; they will be published again",
			slog.String("relay", r.o.id), slog.Int64("lost", int64(len(c.rows))-n))
	}
	countByDestination(c.rows, func(dest string, k int64) {
		r.ins.Published(ctx, dest, k)
		r.outages.OK(ctx, r.o.logger, dest, "idem relay publishes again")
	})
}

func (r *Relay) recordFailure(ctx context.Context, token claimToken, rows []claimedRow, errs []string) error {
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
func (r *Relay) release(ctx context.Context, token claimToken, ids []string) {
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

// Backlog is what is waiting in the outbox.
type Backlog struct {
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
func (r *Relay) Backlog(ctx context.Context) (Backlog, error) {
	b, err := r.q.Backlog(ctx)
	if err != nil {
		return Backlog{}, fmt.Errorf("idem: relay %s: read the outbox backlog: %w", r.o.id, err)
	}
	return Backlog{Pending: b.Pending, Dead: b.Dead, OldestAge: time.Duration(b.OldestSeconds * float64(time.Second))}, nil
}
