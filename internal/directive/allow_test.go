package directive

import (
	"testing"

	"github.com/idemgen/idemgen/internal/diag"
)

// TestParseAllow: an //idem:allow comment names a known check and gives a
// reason (a trailing // comment is not one); anything less is refused at
// the token, saying what to write.
func TestParseAllow(t *testing.T) {
	pos := diag.Pos{File: "/x/a.go", Line: 7, Col: 2}
	for _, c := range []struct {
		text   string
		check  string
		reason string
		err    string
	}{
		{text: "//idem:allow outside-tx the audit row must outlive a rollback", check: "outside-tx", reason: "the audit row must outlive a rollback"},
		{text: "//idem:allow external-call  purge  is harmless ", check: "external-call", reason: "purge is harmless"},
		{text: "//idem:allow outside-tx", err: "a.go:7:15: //idem:allow outside-tx needs a reason after the check's name"},
		{text: "//idem:allow outside-tx // the reader's note", err: "a.go:7:15: //idem:allow outside-tx needs a reason"},
		{text: "//idem:allow", err: "a.go:7:2: //idem:allow needs the name of a check and a reason"},
		{text: "//idem:allow outside_tx why", err: "a.go:7:15: //idem:allow outside_tx: there is no check outside_tx (did you mean outside-tx?); the checks are outside-tx and external-call"},
		{text: "//idem:allow everything why", err: "a.go:7:15: //idem:allow everything: there is no check everything; the checks are outside-tx and external-call"},
	} {
		var diags diag.List
		a, ok := ParseAllow(c.text, pos, &diags)
		var got string
		if ds := diags.Sorted(); len(ds) > 0 {
			got = ds[0].Format("/x")
		}
		switch {
		case c.err == "" && (!ok || a.Check != c.check || a.Reason != c.reason || got != ""):
			t.Errorf("%q: got %+v, %v, %q; want check %q, reason %q", c.text, a, ok, got, c.check, c.reason)
		case c.err != "" && (ok || len(got) < len(c.err) || got[:len(c.err)] != c.err):
			t.Errorf("%q: got %v, %q; want the error %q", c.text, ok, got, c.err)
		}
	}
	if !IsAllow("//idem:allow outside-tx x") || IsAllow("//idem:allowed") || IsAllow("// idem:allow outside-tx x") {
		t.Error("IsAllow tells an //idem:allow comment from others wrongly")
	}
}
