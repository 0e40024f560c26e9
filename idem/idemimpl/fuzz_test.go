package idemimpl

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"github.com/idemgen/idemgen/idem"
)

// fuzzBody has a field of each kind a message key or fingerprint meets.
type fuzzBody struct {
	OrderID string            `json:"order_id"`
	Seq     int64             `json:"seq,omitempty"`
	Count   uint64            `json:"count,omitempty"`
	Amount  float64           `json:"amount,omitempty"`
	Ref     [16]byte          `json:"ref,omitempty"`
	Tags    []string          `json:"tags,omitempty"`
	Attrs   map[string]string `json:"attrs,omitempty"`
	Nested  *fuzzBody         `json:"nested,omitempty"`
	Raw     json.RawMessage   `json:"raw,omitempty"`
	Any     any               `json:"any,omitempty"`
}

// FuzzDecodeKeyFingerprint feeds arbitrary payloads, message ids and headers
// through what every adapter does with a delivery: decoding an idem.Message, the
// key checks of generated code (CheckString, CheckInt, CheckUUID, the key
// size), ExternalKey and the payload fingerprint. No input may panic; a
// payload is either decoded or rejected with ErrUndecodablePayload (a
// dead-letter), a key either accepted or rejected with ErrInvalidKey, and the
// fingerprint of a decoded message is stable: the same after a JSON round
// trip and matched by sameFingerprint.
func FuzzDecodeKeyFingerprint(f *testing.F) {
	f.Add([]byte(`{"order_id":"ord-1","seq":3,"amount":1.5}`), "msg-1", "traceparent", "00-abc")
	f.Add([]byte(`{"order_id":"","seq":0}`), "", "", "")
	f.Add([]byte(`{"order_id":"a\u0000b"}`), "id", "k", "v")
	f.Add([]byte(`{"order_id":"x","tags":["a","b"],"attrs":{"b":"2","a":"1"},"nested":{"order_id":"y"}}`), "m", "x-delivery-count", "3")
	f.Add([]byte(`{"order_id":"x","raw":{"z":1, "a":[1,2]},"any":[1,"a",{"b":null}]}`), "m", "", "")
	f.Add([]byte(`{"order_id": "\xff\xfe"}`), "\xff", "\xff", "\x00")
	f.Add([]byte(`{"order_id":"cut short`), "m", "", "")
	f.Add([]byte(`null`), "m", "", "")
	f.Add([]byte(`{"ref":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16],"count":18446744073709551615}`), "m", "", "")
	f.Fuzz(func(t *testing.T, payload []byte, id, hk, hv string) {
		// What the adapters' decoding does for an idem.Message (its own
		// fuzz test is in idem/internal/consume): the body, then the
		// delivery's id, attempt and headers.
		msg := new(idem.Message[fuzzBody])
		if err := json.Unmarshal(payload, msg.BodyTarget()); err != nil {
			return
		}
		msg.SetDelivery(id, 2, map[string]string{hk: hv})
		b := msg.Body
		for _, err := range []error{
			CheckString("order_id", b.OrderID), CheckString("id", msg.ID), CheckInt("seq", b.Seq), CheckInt("count", b.Count),
			CheckUUID("ref", b.Ref), checkKeySize([]string{"order_id", "id"}, []any{b.OrderID, msg.ID}),
		} {
			if err != nil && (!errors.Is(err, idem.ErrInvalidKey) || idem.ActionFor(err) != idem.DeadLetter) {
				t.Fatalf("a key check returned %v: not ErrInvalidKey, or not dead-lettered", err)
			}
		}
		if k1, k2 := idem.ExternalKey("c", []any{b.OrderID, b.Seq, b.Ref}), idem.ExternalKey("c", []any{b.OrderID, b.Seq, b.Ref}); k1 != k2 {
			t.Fatalf("ExternalKey is not deterministic: %q vs %q", k1, k2)
		}
		fp, err := fingerprint(msg)
		if err != nil {
			if !errors.Is(err, idem.ErrUnencodable) {
				t.Fatalf("fingerprint: %v: not ErrUnencodable", err)
			}
			return
		}
		if same, err := sameFingerprint(fp, fp); err != nil || !same {
			t.Fatalf("sameFingerprint(fp, fp) = %v, %v", same, err)
		}
		// What a broker delivers again is the same bytes; what a producer
		// publishes again is the same value, encoded anew.
		again, err := json.Marshal(b)
		if err != nil {
			return // e.g. a number encoding/json reads but does not write
		}
		var b2 fuzzBody
		if err := json.Unmarshal(again, &b2); err != nil {
			t.Fatalf("the message's own JSON does not decode: %v\n%s", err, again)
		}
		fp2, err := fingerprint(&idem.Message[fuzzBody]{ID: id, Body: b2, Attempt: 7})
		if err != nil {
			t.Fatalf("fingerprint after a JSON round trip: %v", err)
		}
		if !bytes.Equal(fp, fp2) {
			t.Fatalf("the fingerprint changed with a JSON round trip:\n%s\n%s", payload, again)
		}
	})
}
