// Package msgid mints the stable ids of outgoing messages: what
// idem.OutgoingMessageID returns and what the delivery engine writes into
// the outbox rows.
package msgid

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// namespace is the namespace of the outgoing message ids:
// uuid.NewSHA1(uuid.NameSpaceURL, "https://github.com/idemgen/idemgen/idem#OutgoingMessageID"),
// written out (TestOutgoingMessageIDNamespace checks it).
var namespace = uuid.MustParse("e542afdc-30ee-55de-8f8c-b40f62f867cf")

// Name is the name of idem.OutgoingMessageID without seq.
func Name(consumer string, key []any) []byte {
	b := make([]byte, 0, 64)
	b = appendString(b, "idem.outbox.v1")
	b = appendString(b, consumer)
	b = binary.AppendUvarint(b, uint64(len(key)))
	for _, part := range key {
		switch v := part.(type) {
		case nil:
			b = append(b, 'n')
		case string:
			b = append(b, 's')
			b = appendString(b, v)
		case int64:
			b = binary.BigEndian.AppendUint64(append(b, 'i'), uint64(v))
		case int:
			b = binary.BigEndian.AppendUint64(append(b, 'i'), uint64(int64(v)))
		case int32:
			b = binary.BigEndian.AppendUint64(append(b, 'i'), uint64(int64(v)))
		case uint64:
			b = binary.BigEndian.AppendUint64(append(b, 'u'), v)
		case [16]byte:
			b = append(append(b, 'g'), v[:]...)
		case time.Time:
			// The bucket of a partitioned inbox: its instant, whatever
			// the location.
			b = binary.BigEndian.AppendUint64(append(b, 't'), uint64(v.UnixNano()))
		default:
			b = append(b, 'x')
			b = appendString(b, fmt.Sprintf("%T", v))
			b = appendString(b, fmt.Sprintf("%v", v))
		}
	}
	return b
}

// ID completes a name of Name with seq.
func ID(name []byte, seq int) uuid.UUID {
	return uuid.NewSHA1(namespace, binary.AppendUvarint(name[:len(name):len(name)], uint64(seq)))
}

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}
