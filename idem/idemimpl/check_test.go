package idemimpl

import (
	"errors"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/idem"
)

func TestCheckIntRejectsZero(t *testing.T) {
	err := CheckInt("OrderID", int64(0))
	if !errors.Is(err, idem.ErrInvalidKey) || !strings.Contains(err.Error(), "OrderID is zero") {
		t.Errorf("CheckInt(0) = %v, want ErrInvalidKey saying OrderID is zero", err)
	}
	if err := CheckInt("Seq", uint64(0)); !errors.Is(err, idem.ErrInvalidKey) {
		t.Errorf("CheckInt(uint64 0) = %v, want ErrInvalidKey", err)
	}
	for _, v := range []int64{1, -1} {
		if err := CheckInt("OrderID", v); err != nil {
			t.Errorf("CheckInt(%d) = %v, want nil", v, err)
		}
	}
}
