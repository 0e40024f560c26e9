package relay_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/idem/idemtest"
	"github.com/idemgen/idemgen/idem/idemtest/brokertest"
	"github.com/idemgen/idemgen/idem/internal/relaytest"
	"github.com/idemgen/idemgen/idem/relay"
	"github.com/idemgen/idemgen/internal/pgcluster"
)

// TestRelayFailsOverWithoutWaitingForLeases: four writers commit rows one
// by one on a synchronous pair, and a relay publishes them, while the pair
// fails over. Every row committed is published and deleted within seconds,
// far less than the lease (30s). No claim or deletion cut off by the
// failover holds its rows for the rest of the lease. Nor does a deletion
// that the old primary answered but had not flushed to the standby.
func TestRelayFailsOverWithoutWaitingForLeases(t *testing.T) {
	p, err := pgcluster.StartPair(pgcluster.PairOptions{Prefix: "idemgen-relay-test.", Sync: true, Settings: []string{"fsync=off"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Remove)
	db := idemtest.NewAt(t, p.URL("postgres"), relaytest.OutboxFS(t, nil))
	_, log := brokertest.NewLogs(t)
	rec := &relaytest.Recorder{}
	relaytest.Run(t, relay.New(db.Pool, rec.Publisher("failover", 2*time.Millisecond, nil), relay.WithID("failover"), relay.WithBatchSize(5),
		relay.WithPollInterval(50*time.Millisecond), relay.WithBackoff(50*time.Millisecond, 200*time.Millisecond), relay.WithLogger(log)))

	var mu sync.Mutex
	committed := map[string]bool{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-time.After(2 * time.Millisecond):
				}
				rows := relaytest.MakeRows(fmt.Sprintf("w%d-%d", w, i), 1)
				err := pgx.BeginFunc(context.Background(), db.Pool, func(tx pgx.Tx) error { return relaytest.Insert(context.Background(), tx, rows) })
				if err == nil {
					mu.Lock()
					committed[rows[0].Payload] = true
					mu.Unlock()
				}
			}
		})
	}
	time.Sleep(time.Second)
	f, err := p.Failover()
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()
	const bound = 10 * time.Second
	published := func() (missing []string) {
		got := map[string]bool{}
		for _, pub := range rec.Snapshot() {
			got[pub.Payload] = true
		}
		mu.Lock()
		defer mu.Unlock()
		for payload := range committed {
			if !got[payload] {
				missing = append(missing, payload)
			}
		}
		return missing
	}
	ok := relaytest.Eventually(bound, func() bool { return len(published()) == 0 && relaytest.Pending(t, db) == 0 })
	mu.Lock()
	n := len(committed)
	mu.Unlock()
	t.Logf("failover %d → %d while 4 writers committed %d rows; every one published %v after the stop: %v (%d publications)",
		f.From, f.To, n, time.Since(f.Stopped).Round(time.Millisecond), ok, rec.Len())
	if !ok {
		rows, _ := db.Pool.Query(context.Background(), `SELECT format('%s token %s lease %s attempts %s', convert_from(payload, 'UTF8'), claim_token, lease_until - now(), attempts) FROM idem_outbox`)
		left, _ := pgx.CollectRows(rows, pgx.RowTo[string])
		t.Fatalf("%d committed rows not published %v after the failover; rows left: %v", len(published()), bound, left)
	}
}
