package idem_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemimpl"
	"github.com/idemgen/idemgen/idem/internal/relaytest"
	"github.com/idemgen/idemgen/idem/relay"
)

// acquireOnly is a user's idem.DB with nothing but Acquire (no Exec, Query
// or QueryRow to fall back on), counting the connections taken.
type acquireOnly struct {
	pool     *pgxpool.Pool
	acquires *atomic.Int64
}

func (d acquireOnly) Acquire(ctx context.Context) (*pgxpool.Conn, error) {
	d.acquires.Add(1)
	return d.pool.Acquire(ctx)
}

// TestRelayTakesTheInboxesDB: the publishing inbox and the relay take the
// same idem.DB; every connection of the relay, its listening one included,
// comes through the DB's Acquire, and each is given back (none is left
// acquired once the relay stopped).
func TestRelayTakesTheInboxesDB(t *testing.T) {
	db := orderDB(t)
	ctx := context.Background()
	var acquires atomic.Int64
	userDB := acquireOnly{pool: db.Pool, acquires: &acquires}
	in := idemimpl.NewPublishingInbox(userDB, orderTable, placeOrder)
	if _, o, err := in.Handle(ctx, order{Shop: "db", Number: 1, Publish: 3}); err != nil || o != idem.Processed {
		t.Fatalf("Handle: %v, %v", o, err)
	}
	before := acquires.Load()
	recv := &capture{}
	stop := relaytest.Run(t, relay.New(userDB, recv, relay.WithID("user-db"), relay.WithPollInterval(20*time.Millisecond),
		relay.WithLogger(relaytest.Logger(t))))
	relaytest.WaitFor(t, 10*time.Second, "the relay to publish 3 messages", func() bool { return len(recv.published()) == 3 })
	relaytest.WaitFor(t, 10*time.Second, "the published rows deleted", func() bool {
		return relaytest.QueryInt(t, db.Pool, `SELECT count(*)::int FROM idem_outbox`) == 0
	})
	stop()
	// At least the listening connection, a claim and a mark.
	if got := acquires.Load() - before; got < 3 {
		t.Errorf("the relay took %d connections through the DB, want at least 3 (listen, claim, mark)", got)
	}
	// The inbox's NOTIFY is sent after its commit, on a connection of the
	// pool, by a goroutine of its own: it may still hold that connection for
	// a moment; a connection the relay leaked would stay acquired.
	relaytest.WaitFor(t, 5*time.Second, "every connection released after the relay stopped", func() bool {
		return db.Pool.Stat().AcquiredConns() == 0
	})
}
