package idem_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemimpl"
	"github.com/idemgen/idemgen/idem/internal/relaytest"
	"github.com/idemgen/idemgen/idem/relay"
)

// TestNotifyIsCoalescedAndNeverDropped: 16 workers deliver publishing
// messages in bursts with pauses between them, through one pool, while a
// relay that polls only once a minute publishes. Every row is published long
// before that poll, so every commit was followed by a NOTIFY that the relay
// heard after the commit (a NOTIFY coalesced away, or sent before a commit it
// stood for, would leave that commit's rows to the poll); and the pool sent
// far fewer NOTIFYs than it committed deliveries (counted by a listener, by
// the pool's backends).
func TestNotifyIsCoalescedAndNeverDropped(t *testing.T) {
	db := orderDB(t)
	ctx := context.Background()
	rec := &relaytest.Recorder{}
	r := relay.New(db.Pool, rec.Publisher("n", 0, nil), relay.WithID("coalesced-"+db.Schema),
		relay.WithPollInterval(time.Minute), relay.WithLogger(relaytest.Logger(t)))
	relaytest.Run(t, r)
	relaytest.WaitFor(t, 5*time.Second, "the listening connection", func() bool { return relaytest.Listeners(t, db, r) == 1 })
	// The relay's catch-up claim after it began to listen is behind it once
	// a first row goes out on its NOTIFY.
	relaytest.Commit(t, db.Pool, relaytest.MakeRows("first", 1))
	relaytest.WaitFor(t, 5*time.Second, "the first row published", func() bool { return rec.Len() == 1 })

	listener := outboxListener(t, db.URL)
	var backends sync.Map // the PIDs of the pool's connections
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	const workers, perWorker = 16, 60
	cfg.MaxConns = workers
	cfg.AfterConnect = func(_ context.Context, c *pgx.Conn) error {
		backends.Store(c.PgConn().PID(), true)
		return nil
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	in := idemimpl.NewPublishingInbox(pool, orderTable, placeOrder)

	var notes atomic.Int64
	lctx, stopListening := context.WithCancel(ctx)
	listened := make(chan struct{})
	go func() {
		defer close(listened)
		for {
			note, err := listener.WaitForNotification(lctx)
			if err != nil {
				return
			}
			if _, ours := backends.Load(note.PID); ours {
				notes.Add(1)
			}
		}
	}()

	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for i := range perWorker {
				msg := order{Shop: "coalesce", Number: int64(w*perWorker + i + 1), Publish: 1}
				if _, o, err := in.Handle(ctx, msg); err != nil || o != idem.Processed {
					t.Errorf("deliver %d: %v, %v", msg.Number, o, err)
					return
				}
				if rng.IntN(10) == 0 {
					time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond)
				}
			}
		})
	}
	wg.Wait()
	const deliveries = workers * perWorker
	relaytest.WaitFor(t, 10*time.Second, "every row published on a NOTIFY (the poll is a minute away)", func() bool { return rec.Len() == 1+deliveries })
	// The last NOTIFY may still be on its way to the listener.
	time.Sleep(200 * time.Millisecond)
	stopListening()
	<-listened
	sent := notes.Load()
	t.Logf("%d deliveries by %d workers were followed by %d NOTIFYs", deliveries, workers, sent)
	if sent < 1 || 2*sent > deliveries {
		t.Errorf("%d NOTIFYs for %d committed deliveries, want at least one and fewer than half as many", sent, deliveries)
	}
}
