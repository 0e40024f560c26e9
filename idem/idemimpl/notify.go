package idemimpl

import (
	"context"
	"errors"
	"log/slog"
	"reflect"
	"sync"
	"time"

	"github.com/jackc/puddle/v2"

	"github.com/idemgen/idemgen/idem"
)

// The NOTIFY that wakes the relays, coalesced.
//
// A transaction that sends NOTIFY takes, at its commit, a lock that is the
// same for every database of the server (PostgreSQL's PreCommit_Notify), and
// holds it until the commit is over, WAL flush included: the commits of
// transactions that notify happen one at a time. Sent in every publishing
// delivery's commit, it made committing deliveries wait on each other.
//
// So no delivery's transaction notifies. A delivery whose commit wrote
// outbox rows tells the notifier of its DB once the commit is acknowledged
// (notifyCommitted), and the notifier sends the NOTIFY on its own, on a
// connection of that DB, in a transaction that writes nothing and does not
// wait for its WAL flush (synchronous_commit off: its commit record protects
// nothing): the lock is held for the time of a commit without a flush, by
// one transaction of the pool at a time. Commits acknowledged while a NOTIFY
// is on its way, or within notifyInterval after it, share the next one,
// sent as soon as the interval is over: at most one NOTIFY per DB per
// interval (plus its round trip), however many deliveries commit, and a
// commit alone in its interval has its NOTIFY at once.
//
// What it guarantees: every commit that wrote rows is followed by a NOTIFY
// sent after the commit was acknowledged (so the relay that hears it sees
// the rows), at most notifyInterval plus a round trip later. A NOTIFY that
// fails is sent again, with a backoff, until it succeeds, the DB's pool is
// closed, or notifyGiveUp has passed (then the relays' poll finds the rows,
// as it finds those committed while a relay's listening connection was down).

// notifyInterval is the least time between two NOTIFYs of one DB.
const notifyInterval = 2 * time.Millisecond

// notifyTimeout bounds one attempt to send the NOTIFY (the connection's
// acquire included).
const notifyTimeout = 5 * time.Second

// notifyGiveUp bounds how long the notifier tries again after failures.
const notifyGiveUp = time.Minute

// notifyStatement is the coalesced NOTIFY: a transaction of its own (a
// statement without arguments goes through the simple protocol in every
// query exec mode, so it is one round trip), that does not wait for its
// commit's WAL flush.
const notifyStatement = "SELECT set_config('synchronous_commit', 'off', true), pg_notify('" + idem.OutboxChannel + "', '')"

// notifier sends the coalesced NOTIFY of one DB. It exists while there is
// something to send or a NOTIFY was sent within the interval: its goroutine
// (run) then removes it, and the next commit starts another.
type notifier struct {
	db  idem.DB
	log *slog.Logger
	// pending: a commit was acknowledged after the last NOTIFY was sent
	// (guarded by notifiers' mutex).
	pending bool
}

// notifiers are the live notifiers by DB (Inbox.flightDB: the DB, or the
// inbox when the DB is not comparable).
var notifiers = struct {
	sync.Mutex
	m map[any]*notifier
}{m: map[any]*notifier{}}

// notifyCommitted tells the notifier of key that a commit which wrote outbox
// rows through db was acknowledged (or may have been: a commit whose
// outcome is unknown counts too, as a NOTIFY too many is harmless). It never
// blocks on the database.
func notifyCommitted(key any, db idem.DB, log *slog.Logger) {
	notifiers.Lock()
	defer notifiers.Unlock()
	if n := notifiers.m[key]; n != nil {
		n.pending = true
		return
	}
	n := &notifier{db: db, log: log, pending: true}
	notifiers.m[key] = n
	go n.run(key)
}

// run sends a NOTIFY for what is pending, waits the interval, and goes on
// while commits came meanwhile; with nothing pending it removes the notifier.
func (n *notifier) run(key any) {
	var failingSince time.Time
	failures := 0
	for {
		notifiers.Lock()
		if !n.pending {
			delete(notifiers.m, key)
			notifiers.Unlock()
			return
		}
		// The NOTIFY about to be sent covers every commit acknowledged up
		// to now; one acknowledged from now on sets pending again.
		n.pending = false
		notifiers.Unlock()

		err := n.send()
		switch {
		case err == nil:
			failures = 0
			time.Sleep(notifyInterval)
			continue
		case errors.Is(err, puddle.ErrClosedPool):
			// Nothing can be sent through a closed pool; the relays' poll
			// finds the rows.
			n.drop(key)
			return
		}
		failures++
		if failures == 1 {
			failingSince = time.Now()
		}
		if time.Since(failingSince) > notifyGiveUp {
			n.log.LogAttrs(context.Background(), slog.LevelWarn, "idem could not send the NOTIFY that wakes the relays; they find the committed outbox rows when they poll",
				slog.String("channel", idem.OutboxChannel), slog.Duration("failing_for", time.Since(failingSince)), slog.String("error", err.Error()))
			n.drop(key)
			return
		}
		notifiers.Lock()
		n.pending = true
		notifiers.Unlock()
		time.Sleep(notifyBackoff(failures))
	}
}

// drop removes the notifier; a later commit starts another.
func (n *notifier) drop(key any) {
	notifiers.Lock()
	if notifiers.m[key] == n {
		delete(notifiers.m, key)
	}
	notifiers.Unlock()
}

// send sends one NOTIFY on a connection of the notifier's DB.
func (n *notifier) send() error {
	ctx, cancel := context.WithTimeout(context.Background(), notifyTimeout)
	defer cancel()
	c, err := n.db.Acquire(ctx)
	if err != nil {
		return err
	}
	defer c.Release()
	_, err = c.Exec(ctx, notifyStatement)
	return err
}

// notifyBackoff is the wait after the n-th failure in a row: 10ms doubled
// per failure, at most a second.
func notifyBackoff(n int) time.Duration {
	d := 10 * time.Millisecond
	for i := 1; i < n && d < time.Second; i++ {
		d *= 2
	}
	return min(d, time.Second)
}

// relayWake is what an inbox of a publishing mode needs to have its commits'
// NOTIFY sent: whether to (not WithoutNotify), its DB, and the key of the
// DB's notifier.
type relayWake struct {
	on  bool
	key any // the DB, or the inbox when the DB is not comparable
	db  idem.DB
	log *slog.Logger
}

// newRelayWake is the relayWake of an inbox (self) on db.
func newRelayWake(on bool, db idem.DB, self any, log *slog.Logger) relayWake {
	w := relayWake{on: on, key: db, db: db, log: log}
	if !reflect.ValueOf(db).Comparable() {
		w.key = self
	}
	return w
}

// committed is called once a commit round trip that wrote published outbox
// rows returned: committed, or with its outcome unknown.
func (w relayWake) committed(published int) {
	if w.on && published > 0 {
		notifyCommitted(w.key, w.db, w.log)
	}
}
