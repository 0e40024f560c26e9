package relay

import (
	"context"
	"fmt"
	"log/slog"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/internal/wait"
)

// maxListenRetry bounds the wait between attempts to reopen the listening
// connection; the poll goes on meanwhile.
const maxListenRetry = 10 * time.Second

// listen holds the relay's listening connection until ctx ends: it wakes the
// relay on each NOTIFY of idem.OutboxChannel and, after each (re)connection, once
// more, for the rows committed while nobody listened. A lost connection is
// reopened with a backoff.
func (r *Relay) listen(ctx context.Context, wake chan<- struct{}) {
	failures := 0
	for ctx.Err() == nil {
		if r.beforeListen != nil {
			r.beforeListen()
		}
		conn, err := r.openListener(ctx)
		if err == nil {
			failures = 0
			signal(wake) // the catch-up poll
			err = r.waitForNotifications(ctx, conn, wake)
			closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			_ = conn.Close(closeCtx)
			cancel()
		}
		if ctx.Err() != nil {
			return
		}
		r.listenerLost.Store(true)
		failures++
		delay := wait.Backoff(failures, maxListenRetry)
		r.o.logger.LogAttrs(ctx, slog.LevelWarn, "idem relay lost its listening connection; reconnecting (polling meanwhile)",
			slog.String("relay", r.o.id), slog.Duration("retry_in", delay), slog.String("error", err.Error()))
		if !wait.Sleep(ctx, delay) {
			return
		}
	}
}

// openListener takes a connection out of the relay's DB for good and listens on
// idem.OutboxChannel on it, with the relay's name as its application_name so that
// an operator can tell it in pg_stat_activity.
func (r *Relay) openListener(ctx context.Context) (*pgx.Conn, error) {
	pc, err := r.db.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("idem: relay %s: open the listening connection: %w", r.o.id, err)
	}
	conn := pc.Hijack()
	if _, err := conn.Exec(ctx, "SELECT set_config('application_name', $1, false)", r.listenerName()); err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("idem: relay %s: name the listening connection: %w", r.o.id, err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{idem.OutboxChannel}.Sanitize()); err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("idem: relay %s: LISTEN %s: %w", r.o.id, idem.OutboxChannel, err)
	}
	return conn, nil
}

// listenerName is the application_name of the relay's listening connection.
func (r *Relay) listenerName() string {
	name := "idem relay " + r.o.id
	if len(name) <= 63 { // NAMEDATALEN - 1: the server would cut it
		return name
	}
	// Cut on a character boundary: half a UTF-8 character is an invalid
	// byte sequence, which the server refuses.
	cut := 63
	for cut > 0 && !utf8.RuneStart(name[cut]) {
		cut--
	}
	return name[:cut]
}

func (r *Relay) waitForNotifications(ctx context.Context, conn *pgx.Conn, wake chan<- struct{}) error {
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return fmt.Errorf("idem: relay %s: wait for NOTIFY %s: %w", r.o.id, idem.OutboxChannel, err)
		}
		if n.Channel == idem.OutboxChannel {
			signal(wake)
		}
	}
}

// signal wakes the relay's loop without blocking: one pending wake-up is
// enough, however many notifications arrived.
func signal(wake chan<- struct{}) {
	select {
	case wake <- struct{}{}:
	default:
	}
}
