package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// cluster is the soak's own PostgreSQL: a throwaway cluster from the
// machine's install (initdb, pg_ctl), with its data and its Unix socket in a
// temporary directory, so that the soak may stop and start it. It never
// touches the machine's shared server.
type cluster struct {
	bin string // the directory of initdb and pg_ctl
	dir string // data in dir/data, socket in dir, log in dir/server.log
}

// URL is the soak's database on the cluster.
func (c *cluster) URL() string { return "postgres://postgres@/postgres?host=" + c.dir }

// pgBinDirs lists where initdb and pg_ctl may be, newest version first, as
// scripts/pgenv.sh searches.
func pgBinDirs() []string {
	var dirs []string
	if p, err := exec.LookPath("initdb"); err == nil {
		dirs = append(dirs, filepath.Dir(p))
	}
	for _, pattern := range []string{"/usr/lib/postgresql/*/bin", "/usr/pgsql-*/bin"} {
		m, _ := filepath.Glob(pattern)
		sort.Slice(m, func(i, j int) bool { return versionOf(m[i]) > versionOf(m[j]) })
		dirs = append(dirs, m...)
	}
	return append(dirs, "/usr/local/pgsql/bin")
}

func versionOf(dir string) float64 {
	var v float64
	for _, part := range strings.Split(dir, "/") {
		if _, err := fmt.Sscanf(part, "%g", &v); err == nil {
			return v
		}
		if strings.HasPrefix(part, "pgsql-") {
			fmt.Sscanf(strings.TrimPrefix(part, "pgsql-"), "%g", &v)
			return v
		}
	}
	return 0
}

// startCluster runs initdb in a new temporary directory and starts the
// server on a socket there (no TCP), with fsync off: it is thrown away.
func startCluster() (*cluster, error) {
	c := &cluster{}
	for _, d := range pgBinDirs() {
		if isExec(filepath.Join(d, "initdb")) && isExec(filepath.Join(d, "pg_ctl")) {
			c.bin = d
			break
		}
	}
	if c.bin == "" {
		return nil, errors.New("no initdb/pg_ctl found (PATH, /usr/lib/postgresql/*/bin, /usr/pgsql-*/bin): install the PostgreSQL server programs")
	}
	base := os.TempDir()
	if os.Geteuid() == 0 {
		base = "/tmp" // the postgres user must reach it
	}
	dir, err := os.MkdirTemp(base, "idemgen-soak-pg.")
	if err != nil {
		return nil, err
	}
	c.dir = dir
	if os.Geteuid() == 0 {
		if err := exec.Command("chown", "postgres", dir).Run(); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("chown postgres %s (running as root, the server runs as the postgres OS user): %w", dir, err)
		}
	}
	if out, err := c.asPostgres(filepath.Join(c.bin, "initdb"), "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8",
		"--locale=C", "-D", filepath.Join(dir, "data")).CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("initdb: %w\n%s", err, out)
	}
	if err := c.start(); err != nil {
		c.remove()
		return nil, err
	}
	return c, nil
}

func isExec(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode()&0o111 != 0
}

// asPostgres runs a server program; as root, as the postgres OS user
// (initdb and postgres refuse to run as root).
func (c *cluster) asPostgres(prog string, args ...string) *exec.Cmd {
	var cmd *exec.Cmd
	if os.Geteuid() == 0 {
		cmd = exec.Command("runuser", append([]string{"-u", "postgres", "--", prog}, args...)...)
	} else {
		cmd = exec.Command(prog, args...)
	}
	cmd.Dir = "/"
	return cmd
}

func (c *cluster) start() error {
	out, err := c.asPostgres(filepath.Join(c.bin, "pg_ctl"), "-D", filepath.Join(c.dir, "data"), "-l", filepath.Join(c.dir, "server.log"), "-w",
		"-o", fmt.Sprintf("-k '%s' -c listen_addresses='' -c fsync=off -c synchronous_commit=off -c max_connections=400 -c shared_buffers=256MB", c.dir),
		"start").CombinedOutput()
	if err != nil {
		log, _ := os.ReadFile(filepath.Join(c.dir, "server.log"))
		return fmt.Errorf("pg_ctl start: %w\n%s\n%s", err, out, log)
	}
	return nil
}

// stop stops the server; fast mode: every session is disconnected, as a
// failover or a restart for maintenance does.
func (c *cluster) stop() error {
	out, err := c.asPostgres(filepath.Join(c.bin, "pg_ctl"), "-D", filepath.Join(c.dir, "data"), "-m", "fast", "-w", "stop").CombinedOutput()
	if err != nil {
		return fmt.Errorf("pg_ctl stop: %w\n%s", err, out)
	}
	return nil
}

// remove stops the server (immediate) and deletes its directory.
func (c *cluster) remove() {
	_ = c.asPostgres(filepath.Join(c.bin, "pg_ctl"), "-D", filepath.Join(c.dir, "data"), "-m", "immediate", "-w", "stop").Run()
	os.RemoveAll(c.dir)
}
