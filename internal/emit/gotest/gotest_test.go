package gotest

import (
	"testing"

	"github.com/idemgen/idemgen/idem/idemtest"
)

// The generated documentation states the runtime's default.
func TestDeliveriesIsTheRuntimeDefault(t *testing.T) {
	if Deliveries != idemtest.DefaultDeliveries {
		t.Errorf("Deliveries = %d, idemtest.DefaultDeliveries = %d", Deliveries, idemtest.DefaultDeliveries)
	}
}

func TestExternalLeaseIsTheSuites(t *testing.T) {
	if ExternalLease != idemtest.ExternalLease {
		t.Errorf("ExternalLease = %v, idemtest.ExternalLease = %v", ExternalLease, idemtest.ExternalLease)
	}
}
