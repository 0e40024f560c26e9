// Package config holds what an idem.Option sets: package idem's With*
// functions write an Options, and the delivery engine in idem/idemimpl reads
// it. idem.Option is a func(*Options) (idem declares its options type as an
// alias of Options), so that the engine applies the options a user gave
// without idem exporting their fields.
package config

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/metric"
)

// Options is what the options of one inbox set.
type Options struct {
	Given Set // the options given, for the check of the constructor

	Isolation    pgx.TxIsoLevel
	ClaimWait    time.Duration
	BeforeCommit func(ctx context.Context, tx pgx.Tx) error
	NoNotify     bool
	BatchCap     int
	Logger       *slog.Logger
	Meter        metric.MeterProvider
	Pessimistic  bool // WithPessimisticClaim: claim the key before the handler runs

	// mode=external only (NewExternalInbox).
	Lease          time.Duration
	StuckAttempts  int
	StuckSet       bool
	BeforeComplete func(ctx context.Context) error

	// Now is the clock of a partitioned inbox's window (time.Now when
	// nil). No option of package idem sets it: idem/idemtest does, to
	// deliver at another time than the machine's.
	Now func() time.Time
}

// Set is a set of the inbox options, one bit each.
type Set uint16

// The options, in the order of Names.
const (
	Isolation Set = 1 << iota
	ClaimWait
	BeforeCommit
	WithoutNotify
	BatchCap
	Logger
	MeterProvider
	Lease
	StuckAttempts
	BeforeComplete
	PessimisticClaim
)

// Names names the options of a Set, in bit order.
var Names = [...]string{
	"idem.WithIsolation", "idem.WithClaimWait", "idem.WithBeforeCommit", "idem.WithoutNotify",
	"idem.WithBatchCap", "idem.WithLogger", "idem.WithMeterProvider", "idem.WithLease",
	"idem.WithStuckAttempts", "idem.WithBeforeComplete", "idem.WithPessimisticClaim",
}
