package relay

// SetBeforeListen makes r call f before each attempt to open its listening
// connection, so that a test can hold the gap between a lost connection and
// the next one open.
func SetBeforeListen(r *Relay, f func()) { r.beforeListen = f }
