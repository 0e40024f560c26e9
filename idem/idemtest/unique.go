package idemtest

import (
	"crypto/rand"
	"encoding/binary"
)

// The values the generated tests put into a message's key fields when the
// handler has no fixture: random, so that no two messages share a key, and
// never the zero value, which is not a valid key.

// UniqueString returns "idemtest-" followed by 16 random hex digits.
func UniqueString[T ~string]() T {
	return T("idemtest-" + randomHex(8))
}

// Integer is the constraint of UniqueInt: every integer type.
type Integer interface {
	~int | ~int8 | ~int16 | ~int32 | ~int64 | ~uint | ~uint8 | ~uint16 | ~uint32 | ~uint64 | ~uintptr
}

// UniqueInt returns a random positive value of T.
func UniqueInt[T Integer]() T {
	var b [8]byte
	for {
		_, _ = rand.Read(b[:])
		// Truncated to T's size; the top bit cleared first keeps 64-bit
		// signed values positive, and the loop retries smaller types' zero
		// and negative values.
		if v := T(binary.LittleEndian.Uint64(b[:]) >> 1); v > 0 {
			return v
		}
	}
}

// UniqueUUID returns a random (version 4) UUID.
func UniqueUUID[T ~[16]byte]() T {
	var u [16]byte
	_, _ = rand.Read(u[:])
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	return T(u)
}
