package idem_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemimpl"
	"github.com/idemgen/idemgen/idem/idemtest"
	"github.com/idemgen/idemgen/idem/internal/relaytest"
	"github.com/idemgen/idemgen/idem/relay"
)

// TestRelayOrderedKeepsEachKeysOrder: 10 keys × 100 messages delivered by
// 20 concurrent workers through a publishing inbox whose handler serialises
// per key (it takes the key's row lock before it numbers its message and
// publishes it with the key as its ordering key), two relays in ordered
// mode: each key's messages are published one at a time, in order.
func TestRelayOrderedKeepsEachKeysOrder(t *testing.T) {
	db := idemtest.New(t, relaytest.OutboxFS(t, map[string]string{"00100_orders.sql": orderMigration, "00101_seqs.sql": `-- +goose Up
CREATE TABLE seqs (k text PRIMARY KEY, n integer NOT NULL DEFAULT 0);
-- +goose Down
DROP TABLE seqs;
`}))
	const keys, perKey = 10, 100
	ctx := context.Background()
	for k := 0; k < keys; k++ {
		if _, err := db.Pool.Exec(ctx, `INSERT INTO seqs (k) VALUES ($1)`, "key-"+strconv.Itoa(k)); err != nil {
			t.Fatal(err)
		}
	}
	rec := &relaytest.Recorder{}
	for i := 0; i < 2; i++ {
		id := fmt.Sprintf("o%d", i)
		relaytest.Run(t, relay.New(db.Pool, rec.Publisher(id, 200*time.Microsecond, nil), relay.WithID(id), relay.WithOrdered(),
			relay.WithPollInterval(20*time.Millisecond), relay.WithLogger(relaytest.Logger(t))))
	}
	// The handler numbers the messages of its key under the key's row lock,
	// so the transactions of one key commit in the order of their numbers.
	numbered := idemimpl.NewPublishingInbox(db.Pool, orderTable, idemimpl.NoResultPublishing(func(ctx context.Context, tx pgx.Tx, out *idem.Outbox, msg order) error {
		var n int
		if err := tx.QueryRow(ctx, `UPDATE seqs SET n = n + 1 WHERE k = $1 RETURNING n`, msg.Shop).Scan(&n); err != nil {
			return err
		}
		return out.Publish("test.seq", []byte(strconv.Itoa(n)), idem.WithOrderingKey(msg.Shop))
	}))
	// 20 workers, each delivering messages of keys taken round robin, so
	// that deliveries of one key contend.
	var wg sync.WaitGroup
	var next atomic.Int32
	for w := 0; w < 20; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= keys*perKey {
					return
				}
				msg := order{Shop: "key-" + strconv.Itoa(i%keys), Number: int64(i + 1)}
				if _, outcome, err := numbered.Handle(ctx, msg); err != nil || outcome != idem.Processed {
					t.Errorf("deliver %+v: %v, %v", msg, outcome, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	relaytest.WaitFor(t, 20*time.Second, "every row published", func() bool { return relaytest.Pending(t, db) == 0 })

	pubs := rec.Snapshot()
	if len(pubs) != keys*perKey {
		t.Errorf("%d publications, want %d", len(pubs), keys*perKey)
	}
	byKey := map[string][]relaytest.Publication{}
	byRelay := map[string]int{}
	for _, p := range pubs {
		byKey[p.OrderingKey] = append(byKey[p.OrderingKey], p)
		byRelay[p.Relay]++
	}
	for key, ps := range byKey {
		for i, p := range ps {
			if p.Payload != strconv.Itoa(i+1) {
				t.Fatalf("key %s: relaytest.Publication %d carries message %s, want %d", key, i+1, p.Payload, i+1)
			}
			if i > 0 && p.Start.Before(ps[i-1].End) {
				t.Fatalf("key %s: message %s published while message %s still was", key, p.Payload, ps[i-1].Payload)
			}
		}
	}
	t.Logf("by relay: %v", byRelay)
}
