// Package link is the bridge between package idem and the delivery engine in
// idem/idemimpl, which imports idem: what the engine needs of idem's
// unexported state, and only that. idem fills in the function variables in
// its init (idem/link.go); the engine calls them. Each bridge is in a file
// of its own: outbox.go (the messages an *idem.Outbox buffered), errors.go
// (the *idem.Error of a delivery and its idem.RetryAfter), maintenance.go
// (the statements of an idem.Maintenance), message.go (the delivery attempt
// of an idem.Message) and key.go (the context key of idem.KeyFrom).
//
// The function variables take and return idem's types as any because this
// package cannot import idem; each documents the dynamic type it takes.
package link
