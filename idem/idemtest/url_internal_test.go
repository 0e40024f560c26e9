package idemtest

import (
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestURLParametersReachEveryPool: a parameter of the test database's URL
// (here default_query_exec_mode, as CI sets it to run the tests the way a
// pooler needs) reaches the pool New opens, the URL it hands to subprocesses
// and the pools the scenarios open, next to the schema's search_path.
func TestURLParametersReachEveryPool(t *testing.T) {
	u, err := url.Parse(DatabaseURL(t))
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		t.Fatalf("%s is not a postgres:// URL (%v); this test adds a parameter to one", EnvURL, err)
	}
	q := u.Query()
	q.Set("default_query_exec_mode", "exec")
	u.RawQuery = q.Encode()
	t.Setenv(EnvURL, u.String())

	db := New(t, nil)
	subprocess, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	for name, cfg := range map[string]*pgxpool.Config{
		"New's pool":      db.Pool.Config(),
		"DB.URL":          subprocess,
		"a scenario pool": openPool(t, db, "idemtest-url", 2).Config(),
	} {
		if got := cfg.ConnConfig.DefaultQueryExecMode; got != pgx.QueryExecModeExec {
			t.Errorf("%s: exec mode %v, want exec from the URL", name, got)
		}
		if got := cfg.ConnConfig.RuntimeParams["search_path"]; got != db.Schema {
			t.Errorf("%s: search_path %q, want the test's schema %q", name, got, db.Schema)
		}
	}
}
