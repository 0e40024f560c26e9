package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/internal/testmodule"
)

// sharedFolderLine is the packages' go:generate line (written apart, so that
// go generate does not take it for this file's own).
const sharedFolderLine = "//go:" + "generate go tool idemgen -migrations ../migrations ."

// layoutPackage is a package of the layout test's module: its handler, and
// the go:generate line that gives it the shared ../migrations folder.
func layoutPackage(name, consumer, key string) string {
	return `package ` + name + `

import (
	"context"

	"github.com/jackc/pgx/v5"
)

` + sharedFolderLine + `

type Msg struct {
	ID  string
	Ref string
}

//idem:handler consumer=` + consumer + ` key=` + key + `
func Handle(ctx context.Context, tx pgx.Tx, msg Msg) error { return nil }
`
}

// TestLayoutFromModuleRoot: in a module of two packages that share
// ../migrations through their go:generate lines, generated package by
// package as go generate does, idemgen run from the module root gives each
// package that layout: check ./... passes, generate ./... writes nothing,
// check ./... reports a stale package with its diff, and a run that would
// write a recorded consumer into a second folder is an error naming both,
// which check prints as generate does.
func TestLayoutFromModuleRoot(t *testing.T) {
	root := t.TempDir()
	t.Setenv("GOFLAGS", "-mod=mod") // as the golden tests: see testmodule.Write
	if err := testmodule.Write(root, "example.com/shop", repoRoot(t)); err != nil {
		t.Fatal(err)
	}
	write := func(rel, data string) {
		t.Helper()
		path := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("orders/orders.go", layoutPackage("orders", "shop.place-order", "ID"))
	write("shipping/shipping.go", layoutPackage("shipping", "shop.ship", "ID"))
	runIn := func(dir string, args ...string) (int, string, string) {
		t.Helper()
		var stdout, stderr bytes.Buffer
		code := run(filepath.Join(root, dir), args, &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}
	for _, pkg := range []string{"orders", "shipping"} {
		// What go generate runs in each package's directory.
		if code, _, stderr := runIn(pkg, "-migrations", "../migrations", "."); code != ExitOK {
			t.Fatalf("generate in %s: exit %d\n%s", pkg, code, stderr)
		}
	}
	for _, name := range []string{"migrations/00001_idem_shop_place_order.sql", "migrations/00002_idem_shop_ship.sql", "migrations/idemgen.sum"} {
		if _, err := os.Stat(filepath.Join(root, name)); err != nil {
			t.Fatalf("after go generate: %v", err)
		}
	}

	if code, stdout, stderr := runIn(".", "check", "./..."); code != ExitOK || stdout != "" || stderr != "" {
		t.Errorf("check ./... from the root when current: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if code, _, stderr := runIn(".", "-v", "./..."); code != ExitOK || stderr != "" {
		t.Errorf("generate -v ./... from the root when current: exit %d, want 0 and nothing written\n%s", code, stderr)
	}
	for _, pkg := range []string{"orders", "shipping"} {
		if _, err := os.Stat(filepath.Join(root, pkg, "migrations")); err == nil {
			t.Errorf("generate ./... from the root wrote %s/migrations", pkg)
		}
	}
	if code, _, stderr := runIn("shipping", "check", "../..."); code != ExitOK {
		t.Errorf("check ../... from a package's directory: exit %d\n%s", code, stderr)
	}

	t.Run("stale", func(t *testing.T) {
		// A second handler in orders, not generated yet.
		write("orders/cancel.go", "package orders\n\nimport (\n\t\"context\"\n\n\t\"github.com/jackc/pgx/v5\"\n)\n\n"+
			"//idem:handler consumer=shop.cancel key=ID\nfunc Cancel(ctx context.Context, tx pgx.Tx, msg Msg) error { return nil }\n")
		defer os.Remove(filepath.Join(root, "orders/cancel.go"))
		code, stdout, stderr := runIn(".", "check", "./...")
		if code != ExitFail || !strings.Contains(stdout, "--- a/orders/idem_gen.go") ||
			!strings.Contains(stdout, "+++ b/migrations/00003_idem_shop_cancel.sql") ||
			strings.Contains(stdout, "shipping/") || strings.Contains(stdout, "orders/migrations") ||
			!strings.Contains(stderr, "generated file(s) out of date") {
			t.Errorf("check ./... from the root when orders is stale: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
		}
	})

	t.Run("second_folder", func(t *testing.T) {
		code, _, stderr := runIn(".", "-migrations", "orders/migrations", "./orders")
		want := "orders/orders.go:17:6: consumer shop.place-order is recorded in migrations/idemgen.sum, but its migrations would go to orders/migrations (from the -migrations flag)"
		if code != ExitFail || !strings.Contains(stderr, want) || !strings.Contains(stderr, "idemgen: nothing was written") {
			t.Errorf("exit %d, stderr:\n%s\nwant it to contain:\n%s", code, stderr, want)
		}
		code, stdout, checkErr := runIn(".", "check", "-migrations", "orders/migrations", "./orders")
		wantCheckRefusal(t, code, stdout, checkErr, stderr)
		// A package whose go:generate line was lost gets the default
		// folder, which is refused the same way.
		write("shipping/shipping.go", strings.Replace(layoutPackage("shipping", "shop.ship", "ID"), sharedFolderLine+"\n", "", 1))
		code, _, stderr = runIn(".", "./...")
		want = "shipping/shipping.go:16:6: consumer shop.ship is recorded in migrations/idemgen.sum, but its migrations would go to shipping/migrations (from the default:"
		if code != ExitFail || !strings.Contains(stderr, want) {
			t.Errorf("exit %d, stderr:\n%s\nwant it to contain:\n%s", code, stderr, want)
		}
		code, stdout, checkErr = runIn(".", "check", "./...")
		wantCheckRefusal(t, code, stdout, checkErr, stderr)
		for _, dir := range []string{"orders/migrations", "shipping/migrations"} {
			if _, err := os.Stat(filepath.Join(root, dir)); err == nil {
				t.Errorf("%s was written", dir)
			}
		}
	})
}
