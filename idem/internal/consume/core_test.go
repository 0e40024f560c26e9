package consume_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemimpl"
	"github.com/idemgen/idemgen/idem/idemtest"
	"github.com/idemgen/idemgen/idem/internal/consume"
)

type order struct {
	ID string `json:"id"`
}

// inProgress returns a real ErrInProgress of a tx-mode inbox whose key
// another delivery holds, with a claim wait of wait.
func inProgress(t *testing.T, wait time.Duration) error {
	table, migration := idemtest.TextKeyInbox("test.consume", "idem_test_consume", "ID", func(o order) string { return o.ID })
	db := idemtest.New(t, fstest.MapFS{"00001_inbox.sql": {Data: []byte(migration)}})
	entered, release := make(chan struct{}), make(chan struct{})
	slow := idemimpl.NewInbox(db.Pool, table, func(ctx context.Context, tx pgx.Tx, o order) (idem.None, error) {
		close(entered)
		<-release
		return idem.None{}, nil
	}, idem.WithPessimisticClaim()) // the claim-first protocol holds the key while the handler runs
	done := make(chan struct{})
	go func() { defer close(done); _, _, _ = slow.Handle(context.Background(), order{ID: "k"}) }()
	<-entered
	defer func() { close(release); <-done }()
	fast := idemimpl.NewInbox(db.Pool, table, func(context.Context, pgx.Tx, order) (idem.None, error) { return idem.None{}, nil }, idem.WithClaimWait(wait), idem.WithPessimisticClaim())
	_, _, err := fast.Handle(context.Background(), order{ID: "k"})
	if !errors.Is(err, idem.ErrInProgress) {
		t.Fatalf("got %v; want ErrInProgress", err)
	}
	return err
}

// TestDecideWaits: a key in progress is a Retry that waits no less than
// RetryAfter (and the retry delay) and counts no attempt, even at
// WithMaxAttempts; a delivery that waits longer than WithMaxWait is
// dead-lettered, saying so; a failure at WithMaxAttempts is dead-lettered.
func TestDecideWaits(t *testing.T) {
	err := inProgress(t, 300*time.Millisecond)
	cfg := consume.Resolve([]func(*consume.Config){func(c *consume.Config) { c.MaxAttempts, c.MaxWait = 2, time.Minute }}, 1024, &struct{}{})
	h := idem.HandlerFunc[order](func(context.Context, order) (idem.Outcome, error) { return idem.Processed, nil })
	core := consume.New("test", "test", h, cfg, 1, func(int) time.Duration { return 100 * time.Millisecond })
	ctx := context.Background()

	d := core.Decide(ctx, consume.Delivery{Attempt: 5}, 0, err)
	if d.Action != idem.Retry || !d.Wait || d.Delay != 300*time.Millisecond {
		t.Errorf("in progress at attempt 5 of 2: %+v; want a Retry that waits the claim wait, 300ms", d)
	}
	d = core.Decide(ctx, consume.Delivery{Attempt: 1, Waiting: time.Now().Add(-2 * time.Minute)}, 0, err)
	if d.Action != idem.DeadLetter || !strings.Contains(d.Err.Error(), "WithMaxWait") || !errors.Is(d.Err, idem.ErrInProgress) {
		t.Errorf("in progress for 2m with WithMaxWait(1m): %+v; want a DeadLetter naming WithMaxWait", d)
	}
	failure := errors.New("the handler failed")
	if d := core.Decide(ctx, consume.Delivery{Attempt: 2}, 0, failure); d.Action != idem.DeadLetter || !strings.Contains(d.Err.Error(), "WithMaxAttempts") {
		t.Errorf("a failure at attempt 2 of 2: %+v; want a DeadLetter naming WithMaxAttempts", d)
	}
	if d := core.Decide(ctx, consume.Delivery{Attempt: 1}, 0, failure); d.Action != idem.Retry || d.Wait || d.Delay != 100*time.Millisecond {
		t.Errorf("a failure at attempt 1 of 2: %+v; want a Retry after the retry delay", d)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if d := core.Decide(cancelled, consume.Delivery{Attempt: 1}, 0, err); !d.Stopping {
		t.Errorf("in progress while stopping: %+v; want Stopping", d)
	}
}

// unreachable returns a real error of a connection that could not be made:
// a port of 127.0.0.1 that nobody listens on.
func unreachable(t *testing.T) error {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, err = pgx.Connect(context.Background(), "postgres://postgres@"+addr+"/postgres?sslmode=disable&connect_timeout=5")
	if err == nil {
		t.Fatalf("connected to %s, where nobody listens", addr)
	}
	return fmt.Errorf("idem: acquire a connection: %w", err)
}

// TestHandleHoldsWhileTheDatabaseIsUnreachable: deliveries whose database
// cannot be reached are delivered again in place, each settled once, when
// the database is back: no Retry, no attempt spent, even at
// WithMaxAttempts(1). A batch handler gets the held ones as a batch again.
// Stopping while they are held gives them back.
func TestHandleHoldsWhileTheDatabaseIsUnreachable(t *testing.T) {
	down := unreachable(t)
	cfg := consume.Resolve([]func(*consume.Config){func(c *consume.Config) { c.MaxAttempts = 1 }}, 1024, &struct{}{})
	log := idemtest.Logger(t)
	var calls int
	h := idem.HandlerFunc[order](func(context.Context, order) (idem.Outcome, error) {
		calls++
		if calls <= 6 {
			return 0, down
		}
		return idem.Processed, nil
	})
	core := consume.New("test", "test", h, cfg, 2, func(int) time.Duration { return time.Hour })
	ds := []consume.Delivery{{Body: []byte(`{"id":"a"}`), Attempt: 1, Log: log}, {Body: []byte(`{"id":"b"}`), Attempt: 1, Log: log}}
	var got []consume.Decision
	settle := func(_ context.Context, _ int, d consume.Decision) error { got = append(got, d); return nil }
	if err := core.Handle(context.Background(), ds, settle); err != nil {
		t.Fatal(err)
	}
	if calls != 8 || len(got) != 2 || got[0].Action != idem.Ack || got[1].Action != idem.Ack {
		t.Fatalf("%d deliveries, decisions %+v; want 8 (3 failed tries each, then a success) and two Acks", calls, got)
	}

	b := &batcher{down: down}
	core = consume.New[order]("test", "test", b, cfg, 2, func(int) time.Duration { return time.Hour })
	got = nil
	if err := core.Handle(context.Background(), ds, settle); err != nil {
		t.Fatal(err)
	}
	if len(b.sizes) != 3 || b.sizes[0] != 2 || b.sizes[1] != 1 || b.sizes[2] != 1 || len(got) != 2 || got[0].Action != idem.Ack || got[1].Action != idem.Ack {
		t.Fatalf("batches of %v, decisions %+v; want [2 1 1] (b held twice) and two Acks", b.sizes, got)
	}

	ctx, cancel := context.WithCancel(context.Background())
	never := idem.HandlerFunc[order](func(context.Context, order) (idem.Outcome, error) {
		cancel() // the consumer stops while the database is down
		return 0, down
	})
	core = consume.New("test", "test", never, cfg, 1, func(int) time.Duration { return time.Hour })
	got = nil
	if err := core.Handle(ctx, ds[:1], settle); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !got[0].Stopping {
		t.Fatalf("stopped while held: %+v; want the delivery given back (Stopping)", got)
	}
}

// batcher is a batch handler whose batches fail to reach the database
// for message b twice.
type batcher struct {
	down  error
	sizes []int
}

func (b *batcher) Deliver(context.Context, order) (idem.Outcome, error) { panic("batches only") }

func (b *batcher) DeliverBatch(_ context.Context, msgs []order) []idem.Result[idem.None] {
	b.sizes = append(b.sizes, len(msgs))
	rs := make([]idem.Result[idem.None], len(msgs))
	for i, m := range msgs {
		if m.ID == "b" && len(b.sizes) < 3 {
			rs[i].Err = b.down
		}
	}
	return rs
}
