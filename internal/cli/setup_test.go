package cli

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/module"
	"golang.org/x/mod/zip"

	"github.com/idemgen/idemgen/idem/idemtest"
)

// setupHandler is the handler package of TestSetupSteps: it imports the
// runtime (an *idem.Outbox), the shape whose set-up failed before go mod
// tidy came first.
const setupHandler = `package orders

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/idem"
)

` + sharedFolderLine + `

type OrderPlaced struct {
	OrderID string
	Amount  int64
}

type OrderAccepted struct{ OrderID string }

//idem:handler consumer=shop.place-order key=OrderID
func Place(ctx context.Context, tx pgx.Tx, out *idem.Outbox, msg OrderPlaced) error {
	return out.Publish("shop.order-accepted", OrderAccepted{OrderID: msg.OrderID})
}
`

// TestSetupSteps runs the set-up blocks of docs/quickstart.md (the first is
// also the README's) line by line, as they are,
// in an empty directory with the handler package above, and ends with the
// generated test passing against the test database: the published-module
// form (go get -tool …@latest, served by a module proxy of this checkout as
// a version) and the local-checkout form (go mod edit -require -replace
// -tool, with ../idemgen this checkout). The go command runs as a user's
// does (-mod=readonly), with its own module cache filled from this
// machine's (a file proxy; no network).
func TestSetupSteps(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a module from scratch")
	}
	idemtest.DatabaseURL(t)
	repo := repoRoot(t)
	quickstart, err := os.ReadFile(filepath.Join(repo, "docs", "quickstart.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)<!-- setup steps[^>]*-->\n```sh\n(.*?)```").FindAllSubmatch(quickstart, -1)
	if len(blocks) != 2 {
		t.Fatalf("docs/quickstart.md has %d set-up blocks (<!-- setup steps … --> then ```sh), want 2: published and local checkout", len(blocks))
	}
	readme, err := os.ReadFile(filepath.Join(repo, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(readme, append([]byte("```sh\n"), blocks[0][1]...)) {
		t.Errorf("README.md does not have the published set-up block of docs/quickstart.md:\n%s", blocks[0][1])
	}

	proxy := moduleProxy(t, publishCheckout(t, repo, "v0.99.0"))
	for i, name := range []string{"published", "local_checkout"} {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			// ../idemgen of the local-checkout block.
			if err := os.Symlink(repo, filepath.Join(root, "idemgen")); err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join(root, "shop")
			if err := os.MkdirAll(filepath.Join(dir, "orders"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "orders", "orders.go"), []byte(setupHandler), 0o644); err != nil {
				t.Fatal(err)
			}
			env := append(os.Environ(),
				"GOPROXY="+proxy,
				"GOSUMDB=off", // the checkout's version is in no checksum database
				"GOMODCACHE="+filepath.Join(root, "modcache"),
				"GOFLAGS=-modcacherw", // so that the temporary directory can be removed
				"GOWORK=off",
				idemtest.EnvDeliveries+"=4",
			)
			for _, line := range strings.Split(string(blocks[i][1]), "\n") {
				line = strings.TrimSpace(strings.SplitN(line, "#", 2)[0])
				if line == "" {
					continue
				}
				start := time.Now()
				cmd := exec.Command("bash", "-c", line)
				cmd.Dir, cmd.Env = dir, env
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Fatalf("%s: %v\n%s", line, err, out)
				}
				t.Logf("%s (%v)\n%s", line, time.Since(start).Round(time.Millisecond), bytes.TrimSpace(out))
				if strings.HasPrefix(line, "go test") && !bytes.Contains(out, []byte("ok  \texample.com/shop/orders")) {
					t.Errorf("the generated test did not pass:\n%s", out)
				}
			}
			for _, name := range []string{"orders/idem_gen.go", "orders/idem_gen_test.go", "migrations/00001_idem_shop_place_order.sql", "migrations/idemgen.sum"} {
				if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
					t.Errorf("after the steps: %v", err)
				}
			}
		})
	}
}

// moduleProxy serves a module proxy: github.com/idemgen/idemgen from the
// file proxy published (nothing else under that path, as for a module with
// no other packages published as modules), and every other module from this
// machine's module cache, else from the configured proxy. It returns its
// URL.
func moduleProxy(t *testing.T, published string) string {
	t.Helper()
	cache := filepath.Join(strings.TrimSpace(goEnv(t, "GOMODCACHE")), "cache", "download")
	upstream, _, _ := strings.Cut(strings.TrimSpace(goEnv(t, "GOPROXY")), ",")
	upstream, _, _ = strings.Cut(upstream, "|")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rel := filepath.FromSlash(strings.TrimPrefix(path.Clean(r.URL.Path), "/"))
		if strings.HasPrefix(r.URL.Path, "/"+idemgenModule+"/") {
			http.ServeFile(w, r, filepath.Join(published, rel))
			return
		}
		if info, err := os.Stat(filepath.Join(cache, rel)); err == nil && !info.IsDir() {
			http.ServeFile(w, r, filepath.Join(cache, rel))
			return
		}
		if !strings.HasPrefix(upstream, "http") {
			http.NotFound(w, r)
			return
		}
		resp, err := http.Get(strings.TrimSuffix(upstream, "/") + r.URL.Path)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// publishCheckout writes a file-based module proxy that serves the
// checkout at repo as github.com/idemgen/idemgen at version, the way a
// published version is served, and returns its directory.
func publishCheckout(t *testing.T, repo, version string) string {
	t.Helper()
	proxy := t.TempDir()
	dir := filepath.Join(proxy, idemgenModule, "@v")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(dir, version+".zip"))
	if err != nil {
		t.Fatal(err)
	}
	if err := zip.CreateFromDir(f, module.Version{Path: idemgenModule, Version: version}, repo); err != nil {
		t.Fatalf("zip the checkout: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	gomod, err := os.ReadFile(filepath.Join(repo, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	info, _ := json.Marshal(map[string]string{"Version": version, "Time": "2026-01-01T00:00:00Z"})
	for name, data := range map[string][]byte{version + ".mod": gomod, version + ".info": info, "list": []byte(version + "\n")} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return proxy
}

func goEnv(t *testing.T, name string) string {
	t.Helper()
	out, err := exec.Command("go", "env", name).Output()
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}
