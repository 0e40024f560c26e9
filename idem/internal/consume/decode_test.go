package consume_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/internal/consume"
)

func TestDecode(t *testing.T) {
	type body struct {
		N int `json:"n"`
	}
	called := 0
	headers := func() map[string]string { called++; return map[string]string{"h": "v"} }

	plain, err := consume.Decode[body]([]byte(`{"n":1}`), 64, json.Unmarshal, "id-1", 2, headers)
	if err != nil || plain.N != 1 || called != 0 {
		t.Errorf("plain message: %+v, %v, headers called %d times; want {N:1}, nil, 0", plain, err, called)
	}

	env, err := consume.Decode[idem.Message[body]]([]byte(`{"n":2}`), 64, json.Unmarshal, "id-2", 3, headers)
	if err != nil || env.Body.N != 2 || env.ID != "id-2" || env.Attempt != 3 || env.Headers["h"] != "v" || called != 1 {
		t.Errorf("envelope: %+v, %v, headers called %d times", env, err, called)
	}

	// idemgen accepts *idem.Message[T] too: the envelope behind the pointer
	// gets the id, or every such delivery would be an invalid key.
	ptr, err := consume.Decode[*idem.Message[body]]([]byte(`{"n":3}`), 64, json.Unmarshal, "id-3", 1, headers)
	if err != nil || ptr == nil || ptr.Body.N != 3 || ptr.ID != "id-3" || called != 2 {
		t.Errorf("pointer envelope: %+v, %v, headers called %d times", ptr, err, called)
	}
	plainPtr, err := consume.Decode[*body]([]byte(`{"n":4}`), 64, json.Unmarshal, "id-4", 1, headers)
	if err != nil || plainPtr == nil || plainPtr.N != 4 {
		t.Errorf("pointer message: %+v, %v", plainPtr, err)
	}

	for name, payload := range map[string]string{"undecodable": `{"n":`, "oversized": `{"n":1234567890123456789}`} {
		_, err := consume.Decode[body]([]byte(payload), 16, json.Unmarshal, "id", 1, headers)
		if !errors.Is(err, idem.ErrUndecodablePayload) {
			t.Errorf("%s: %v; want it to wrap ErrUndecodablePayload", name, err)
		}
		if got := idem.ActionFor(err); got != idem.DeadLetter {
			t.Errorf("%s: ActionFor = %v; want DeadLetter", name, got)
		}
	}
}
