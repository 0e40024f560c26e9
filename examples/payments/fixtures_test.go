package payments

import (
	"net/http/httptest"
	"testing"

	"github.com/idemgen/idemgen/idem/idemtest"
)

// chargeFixture wires the generated tests' provider double into the service
// behind a real HTTP server on loopback: the idempotency key travels in the
// Idempotency-Key header, which idemtest.Provider deduplicates by.
func chargeFixture(t testing.TB, p *idemtest.Provider) idemtest.ExternalFixture[*Service, ChargeRequested] {
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	return idemtest.ExternalFixture[*Service, ChargeRequested]{
		Receiver: &Service{ProviderURL: srv.URL + "/v1/charges", Client: srv.Client()},
		Message:  ChargeRequested{OrderID: idemtest.UniqueString[string](), AmountCents: 1200, Currency: "EUR"},
	}
}
