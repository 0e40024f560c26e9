package idemimpl

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/internal/config"
	"github.com/idemgen/idemgen/idem/internal/link"
	"github.com/idemgen/idemgen/idem/internal/obs"
	"github.com/idemgen/idemgen/idem/internal/pgutil"
)

// observer records the deliveries of one consumer: a count and a duration
// per outcome (obs), and one log record per delivery at the outcome's level.
type observer struct {
	ins *obs.Instruments
	c   *obs.Consumer
	log *slog.Logger
}

func newObserver(o config.Options, consumer string) observer {
	ins := obs.New(o.Meter)
	return observer{ins: ins, c: ins.Consumer(consumer), log: loggerOrDefault(o)}
}

// outcomeOf names what a delivery came to, for the metrics and the log.
func outcomeOf(o idem.Outcome, err error) obs.Outcome {
	switch {
	case err == nil && o == idem.Duplicate:
		return obs.Duplicate
	case err == nil:
		return obs.Processed
	case errors.Is(err, idem.ErrClaimLost), errors.Is(err, errClaimLost):
		return obs.ClaimLost
	case errors.Is(err, idem.ErrInProgress):
		return obs.InProgress
	case errors.Is(err, idem.ErrKeyReused):
		return obs.KeyReused
	case errors.Is(err, idem.ErrInvalidKey):
		return obs.InvalidKey
	case errors.Is(err, idem.ErrStale):
		return obs.Stale
	default:
		return obs.Error
	}
}

// errPanicked is what the log record of a delivery whose handler panicked
// says (the panic's value, which may hold a payload, is not logged; the
// panic goes on up the stack).
var errPanicked = errors.New("idem: the handler panicked")

// observeDelivery records one delivery of msg. keyText renders the key (and
// for mode=external the idempotency key) for the log record; it, like the boxing of msg for its attempt, runs only when
// the record is logged, so that a delivery whose record the logger's level
// leaves out costs the two measurements alone.
func observeDelivery[M any](ctx context.Context, ob *observer, msg M, o idem.Outcome, err error, d time.Duration, claimAttempt int, keyText func() (key, idemKey string)) {
	oc := outcomeOf(o, err)
	ob.c.Outcome(ctx, oc, d)
	if !obs.Enabled(ctx, ob.log, oc) {
		return
	}
	rec := obs.Delivery{Consumer: ob.c.Name(), Outcome: oc, ClaimAttempt: claimAttempt, Duration: d, Err: err}
	rec.Key, rec.IdemKey = keyText()
	if attempt, ok := link.Attempt(msg); ok {
		rec.Attempt = attempt
	}
	obs.Log(ctx, ob.log, rec)
}

// observe runs one delivery of msg (run) and records it: its outcome's count
// and duration, and its log record (observeDelivery). A panic of the handler
// is recorded as errPanicked before it goes on up the stack. keyText renders
// the key for the record (and, in mode=external, the idempotency key) from
// msg and the delivery's error; run sets *claimAttempt to the attempts of a
// mode=external claim. Every mode's Handle goes through it, so that every
// mode writes the same record and the same data points per outcome.
func observe[M, R any](ctx context.Context, ob *observer, msg M, keyText func(err error) (key, idemKey string), run func(claimAttempt *int) (R, idem.Outcome, error)) (result R, o idem.Outcome, err error) {
	start := time.Now()
	var claimAttempt int
	observed := false
	defer func() {
		if !observed { // the handler panicked
			observeDelivery(ctx, ob, msg, 0, errPanicked, time.Since(start), claimAttempt, func() (string, string) { return keyText(nil) })
		}
	}()
	result, o, err = run(&claimAttempt)
	observed = true
	observeDelivery(ctx, ob, msg, o, err, time.Since(start), claimAttempt, func() (string, string) { return keyText(err) })
	return result, o, err
}

// keyTextOf is the key of msg as the log record shows it: the key parts as
// Field=value pairs (the *Error's, when err has them), or "" when they cannot
// be taken from msg.
func keyTextOf[M any](fields []string, keyOf func(M) ([]any, error), msg M, err error) string {
	var e *idem.Error
	if errors.As(err, &e) && e.Key != "" {
		return e.Key
	}
	key, kerr := keyOf(msg)
	if kerr != nil {
		return ""
	}
	return pgutil.FormatKey(fields, key)
}
