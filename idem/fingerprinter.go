package idem

// Fingerprinter lets a message type choose the bytes its payload fingerprint is
// computed from. By default the fingerprint is the SHA-256 of the message's
// canonical encoding: its fields as encoding/json names them, sorted, with
// every field at its zero value left out (so that a message type that gains a
// field keeps its fingerprints while the field is zero). A message that
// carries fields which differ between deliveries of the same message (a
// delivery count, a receive time) must leave them out here, or every
// redelivery would be ErrKeyReused.
type Fingerprinter interface {
	IdemFingerprint() []byte
}
