package idemimpl

import (
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/internal/config"
)

// loggerOrDefault is the logger of WithLogger, or slog.Default().
func loggerOrDefault(o config.Options) *slog.Logger {
	if o.Logger == nil {
		return slog.Default()
	}
	return o.Logger
}

// maxClaimWait is the longest claim wait: PostgreSQL's lock_timeout takes at
// most 2147483647 milliseconds (INT_MAX).
const maxClaimWait = 2147483647 * time.Millisecond

// validate panics on an option value that would make every delivery fail:
// like a bad regexp in regexp.MustCompile, it is a programmer error, and
// NewInbox runs at startup, where it is seen at once.
func validate(o config.Options, constructor, consumer string) {
	if o.ClaimWait > maxClaimWait {
		panic(fmt.Sprintf("%s (consumer %s): idem.WithClaimWait(%v) is out of range: the claim wait becomes PostgreSQL's lock_timeout, which takes at most %v (2147483647ms); use a shorter wait (a delivery that waits that long holds a connection all along)",
			constructor, consumer, o.ClaimWait, maxClaimWait))
	}
	if o.BatchCap < 0 {
		panic(fmt.Sprintf("%s (consumer %s): idem.WithBatchCap(%d) is out of range: a batch holds at least one message (0 means the default, %d)",
			constructor, consumer, o.BatchCap, idem.DefaultBatchCap))
	}
	switch o.Isolation {
	case "", pgx.Serializable, pgx.RepeatableRead, pgx.ReadCommitted, pgx.ReadUncommitted:
	default:
		panic(fmt.Sprintf("%s (consumer %s): idem.WithIsolation(%q) is not an isolation level; want one of pgx.Serializable, pgx.RepeatableRead, pgx.ReadCommitted or pgx.ReadUncommitted (%q, %q, %q, %q)",
			constructor, consumer, string(o.Isolation), pgx.Serializable, pgx.RepeatableRead, pgx.ReadCommitted, pgx.ReadUncommitted))
	}
}

// lockTimeout renders a claim wait as a lock_timeout value. PostgreSQL reads
// 0 as "no timeout", so "do not wait" becomes the smallest timeout it has.

func lockTimeout(d time.Duration) string {
	ms := d.Milliseconds()
	if ms < 1 {
		ms = 1
	}
	return strconv.FormatInt(ms, 10) + "ms"
}

// The options each mode honours; every mode honours the observability
// options. A constructor refuses any other (see newOptions).
const (
	observability       = config.Logger | config.MeterProvider
	txModeOptions       = config.Isolation | config.ClaimWait | config.BeforeCommit | config.WithoutNotify | config.BatchCap | config.PessimisticClaim | observability
	entityModeOptions   = config.Isolation | config.BeforeCommit | config.WithoutNotify | observability
	naturalModeOptions  = config.Isolation | config.BeforeCommit | observability
	externalModeOptions = config.Lease | config.StuckAttempts | config.BeforeComplete | observability
)

// newOptions applies opts and panics, naming the constructor, the consumer,
// the mode and the option, on an option the mode does not honour (allowed):
// an option that silently did nothing would be a setting the user believes
// in and the runtime ignores.
func newOptions(constructor, consumer, mode string, allowed config.Set, opts []idem.Option) config.Options {
	o := config.Options{ClaimWait: idem.DefaultClaimWait}
	for _, opt := range opts {
		opt(&o)
	}
	if extra := o.Given &^ allowed; extra != 0 {
		var names []string
		for i, name := range config.Names {
			if extra&(1<<i) != 0 {
				names = append(names, name)
			}
		}
		panic(fmt.Sprintf("%s (consumer %s): %s does not apply to mode=%s; a %s consumer honours only %s",
			constructor, consumer, strings.Join(names, " and "), mode, mode, allowedNames(allowed)))
	}
	validate(o, constructor, consumer)
	return o
}

// allowedNames lists the options of allowed, for newOptions's panic.
func allowedNames(allowed config.Set) string {
	var names []string
	for i, name := range config.Names {
		if allowed&(1<<i) != 0 {
			names = append(names, name)
		}
	}
	return strings.Join(names, ", ")
}
