package kafka

// CrashBeforeCommit makes Run stop, as if the process were killed, after the
// database commits of a poll and before their offset commit, whenever f
// returns true. Run then returns ErrCrashed.
func CrashBeforeCommit[M any](c *Consumer[M], f func() bool) { c.crash = f }

// ErrCrashed is what Run returns when CrashBeforeCommit stopped it.
var ErrCrashed = errCrashed
