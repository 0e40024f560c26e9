package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/idem/idemtest"
)

// TestNaturalNotIdempotentFails generates the golden case
// natural_not_idempotent (a mode=natural handler that says balance = balance
// + $1), runs its generated test against the test database, and checks that
// it fails in each scenario with a message naming the row and the column
// that differ: the golden harness runs only generated tests that must pass.
func TestNaturalNotIdempotentFails(t *testing.T) {
	idemtest.DatabaseURL(t)
	t.Setenv("GOFLAGS", "-mod=mod")
	root := goldenModule(t)
	const name = "natural_not_idempotent"
	if ok, _ := runCase(t, filepath.Join("testdata", name+".txtar"), filepath.Join(root, name)); !ok {
		t.Fatal("idemgen failed on the case")
	}
	cmd := exec.Command("go", "test", "-count=1", "-run", "^TestDepositIdem$", "./"+name+"/...")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), idemtest.EnvDeliveries+"=4")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("the generated test of a handler that adds to the balance passed:\n%s", out)
	}
	for _, want := range []string{
		"--- FAIL: TestDepositIdem/redelivery",
		"row 1 (id=acc-1, balance=100): balance is 100 after the first delivery, 200 after the second delivery",
		"--- FAIL: TestDepositIdem/concurrent_redeliveries",
		"balance is 100 after the first delivery, 500 after 4 concurrent redeliveries",
		"--- FAIL: TestDepositIdem/interleaved",
		"balance is 100 after the second message, 200 after the redelivery of the first message",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the failing generated test's output lacks %q:\n%s", want, out)
		}
	}
	t.Logf("the generated test fails as it should:\n%s", out)
}
