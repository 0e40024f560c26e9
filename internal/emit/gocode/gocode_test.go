package gocode

import (
	"fmt"
	"go/format"
	"strings"
	"testing"

	"github.com/dave/jennifer/jen"

	"github.com/idemgen/idemgen/internal/model"
)

func TestGroupImports(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{
			in:   "package a\n\nimport (\n\t\"context\"\n\tuuid \"github.com/google/uuid\"\n\t\"github.com/jackc/pgx/v5\"\n\t\"time\"\n)\n\nvar _ = 1\n",
			want: "package a\n\nimport (\n\t\"context\"\n\t\"time\"\n\n\tuuid \"github.com/google/uuid\"\n\t\"github.com/jackc/pgx/v5\"\n)\n\nvar _ = 1\n",
		},
		{ // one group only: unchanged
			in:   "package a\n\nimport (\n\t\"context\"\n\t\"time\"\n)\n",
			want: "package a\n\nimport (\n\t\"context\"\n\t\"time\"\n)\n",
		},
		{ // a single import has no block
			in:   "package a\n\nimport \"github.com/idemgen/idemgen/idem\"\n",
			want: "package a\n\nimport \"github.com/idemgen/idemgen/idem\"\n",
		},
	} {
		got := string(groupImports([]byte(c.in)))
		if got != c.want {
			t.Errorf("groupImports(%q)\n got %q\nwant %q", c.in, got, c.want)
		}
		if formatted, err := format.Source([]byte(got)); err != nil || string(formatted) != got {
			t.Errorf("not gofmt-ed: %q (%v)", got, err)
		}
	}
}

// TestFit: a call whose line fits stays on it; one that does not goes one
// argument a line. The package's own names count unqualified, as the file
// writes them, and a statement is measured as a function body holds it.
func TestFit(t *testing.T) {
	e := Emitter{Pkg: model.Package{Name: "billing", Path: "example.com/billing"}}
	call := func(n int) func(multi bool) jen.Code {
		return func(multi bool) jen.Code {
			var args []jen.Code
			for i := range n {
				args = append(args, jen.Qual("example.com/billing", fmt.Sprintf("Argument%02d", i)))
			}
			return jen.Return(jen.Qual(ImplPkg, "NewInbox").Call(Items(multi, args...)...))
		}
	}
	short := fmt.Sprintf("%#v", e.Fit(1, call(2)))
	if short != "return idemimpl.NewInbox(billing.Argument00, billing.Argument01)" {
		t.Errorf("two arguments: %q, want them on one line", short)
	}
	// A tab, "return idemimpl.NewInbox(", 7 x "ArgumentNN" with ", " between, ")": 109 columns.
	long := fmt.Sprintf("%#v", e.Fit(1, call(7)))
	if strings.Count(long, "\n") != 8 {
		t.Errorf("seven arguments:\n%s\nwant one a line", long)
	}
	if !e.Long(0, jen.Id(strings.Repeat("x", Width+1))) || e.Long(0, jen.Id(strings.Repeat("x", Width))) {
		t.Errorf("Long disagrees with Width %d", Width)
	}
}
