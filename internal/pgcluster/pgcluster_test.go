package pgcluster

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestStartRefusesAMalformedSetting(t *testing.T) {
	for _, s := range []string{"work_mem", "=1", "application_name=it's"} {
		if c, err := Start("idemgen-pgcluster-test.", s); err == nil {
			c.Remove()
			t.Errorf("Start with setting %q: no error", s)
		} else if !strings.Contains(err.Error(), s) {
			t.Errorf("Start with setting %q: the error %q does not name it", s, err)
		}
	}
}

func TestClusterRunsWithItsSettingsAcrossARestart(t *testing.T) {
	c, err := Start("idemgen-pgcluster-test.", "application_name=pgcluster_test", "work_mem=7MB")
	if err != nil {
		t.Fatal(err)
	}
	removed := false
	defer func() {
		if !removed {
			c.Remove()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	check := func(when string) {
		conn, err := pgx.Connect(ctx, c.URL("postgres"))
		if err != nil {
			t.Fatalf("%s: connect: %v", when, err)
		}
		defer conn.Close(ctx)
		var workMem, dir string
		if err := conn.QueryRow(ctx, "SELECT current_setting('work_mem'), current_setting('unix_socket_directories')").Scan(&workMem, &dir); err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		if workMem != "7MB" || dir != c.Dir {
			t.Errorf("%s: work_mem %q, socket directory %q; want 7MB and %q", when, workMem, dir, c.Dir)
		}
	}
	check("started")
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := pgx.Connect(ctx, c.URL("postgres")); err == nil {
		t.Fatal("connected to a stopped cluster")
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	check("started again")
	c.Remove()
	removed = true
	if _, err := os.Stat(c.Dir); !os.IsNotExist(err) {
		t.Errorf("after Remove, %s: %v (want it gone)", c.Dir, err)
	}
}
