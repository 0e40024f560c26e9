package link

// KeyContext is the context key under which a mode=external handler's
// context carries its idempotency key, for idem.KeyFrom.
type KeyContext struct{}
