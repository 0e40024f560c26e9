package gocode

import (
	"go/format"
	"testing"
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
