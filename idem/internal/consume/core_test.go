package consume_test

import (
	"context"
	"errors"
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
	})
	done := make(chan struct{})
	go func() { defer close(done); _, _, _ = slow.Handle(context.Background(), order{ID: "k"}) }()
	<-entered
	defer func() { close(release); <-done }()
	fast := idemimpl.NewInbox(db.Pool, table, func(context.Context, pgx.Tx, order) (idem.None, error) { return idem.None{}, nil }, idem.WithClaimWait(wait))
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
