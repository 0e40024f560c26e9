package idem

import "time"

// SweepReport is what one Sweep of a mode=external wrapper did and found.
type SweepReport struct {
	// Consumer is the consumer of the swept table.
	Consumer string
	// Reset is the number of expired claims reset to released.
	Reset int64
	// Stuck are the claims not done whose attempts are above the threshold
	// ([WithStuckAttempts]), most attempts first, at most StuckLimit.
	Stuck []StuckClaim
}

// StuckClaim is a claim that keeps failing: its attempts are above the
// sweeper's threshold.
type StuckClaim struct {
	// Key is the idempotency key (idem_key).
	Key string
	// Status is running or released.
	Status string
	// Attempts is the number of the attempt running or to run next.
	Attempts int
	// Since is when the row last changed.
	Since time.Time
}

// StuckLimit bounds the stuck claims a SweepReport lists.
const StuckLimit = 100
