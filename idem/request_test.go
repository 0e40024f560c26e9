package idem_test

import (
	"encoding/json"
	"testing"

	"github.com/idemgen/idemgen/idem"
)

// TestRequestIsPlainJSON: a Request travels as {"key", "client", "body"},
// so that a broker can carry one to the same handler, and SetRequest and
// BodyTarget fill it as an HTTP front door does.
func TestRequestIsPlainJSON(t *testing.T) {
	var req idem.Request[shipment]
	if err := json.Unmarshal([]byte(`{"parcel":"p-1","weight":3}`), req.BodyTarget()); err != nil {
		t.Fatal(err)
	}
	req.SetRequest("k-1", "acct_1")
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"key":"k-1","client":"acct_1","body":{"parcel":"p-1","weight":3}}`
	if string(b) != want {
		t.Fatalf("encoded %s; want %s", b, want)
	}
	var back idem.Request[shipment]
	if err := json.Unmarshal(b, &back); err != nil || back != req {
		t.Fatalf("decoded %+v, %v; want %+v", back, err, req)
	}
}
