package consume

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"time"
)

// MaxReason bounds the reason header of a dead-letter copy: a bound keeps a
// huge error text from growing every dead-lettered message.
const MaxReason = 1024

// Reason is err's text as a dead-letter copy's reason header carries it, cut
// to MaxReason bytes.
func Reason(err error) string {
	text := fmt.Sprint(err)
	if len(text) > MaxReason {
		text = text[:MaxReason]
	}
	return text
}

// Sessions runs session again and again until ctx ends (then it returns
// nil) or final says an error ends it for good (then it returns final's
// error), waiting between two sessions with a backoff: min after the first
// failure, doubled after each further one, never more than max, and back to
// min after a session that consumed for max or longer. what says what
// failed in the log record.
func Sessions(ctx context.Context, log *slog.Logger, min, max time.Duration, what string,
	session func(ctx context.Context) (consumed bool, err error), final func(err error) error) error {
	backoff := min
	for {
		started := time.Now()
		consumed, err := session(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if ferr := final(err); ferr != nil {
			return ferr
		}
		if consumed && time.Since(started) >= max {
			backoff = min
		}
		log.Warn(what, "err", err, "in", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		backoff = 2 * backoff
		if backoff > max {
			backoff = max
		}
	}
}

// Failed returns n errors, each err: a publisher's answer for a batch it
// cannot publish at all.
func Failed(n int, err error) []error {
	errs := make([]error, n)
	for i := range errs {
		errs[i] = err
	}
	return errs
}

// AddAttempts adds n (taken as 0 when negative) to the attempt a without
// overflowing: attempt headers come from producers, and an attempt that
// wrapped around to a negative number would never reach WithMaxAttempts, so
// the delivery would be retried forever instead of dead-lettered.
func AddAttempts(a, n int) int {
	if n <= 0 {
		return a
	}
	if a > math.MaxInt-n {
		return math.MaxInt
	}
	return a + n
}
