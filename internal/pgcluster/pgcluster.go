// Package pgcluster runs a throwaway PostgreSQL cluster from the machine's
// install (initdb, pg_ctl): its data, its log and its Unix socket live in a
// temporary directory, it listens on no TCP port, and it never touches a
// server that was running before. The soak starts one that it may stop and
// start again; the bench starts one preloaded with pg_stat_statements, a
// setting that only a server start can change.
package pgcluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// Cluster is a running throwaway cluster.
type Cluster struct {
	// Bin is the directory of the initdb and pg_ctl it was made with.
	Bin string
	// Dir holds the data (Dir/data), the socket and the log
	// (Dir/server.log).
	Dir      string
	settings []string
}

// URL is the URL of database db on the cluster, as its superuser postgres.
func (c *Cluster) URL(db string) string {
	return "postgres://postgres@/" + db + "?host=" + c.Dir
}

// BinDirs lists where initdb and pg_ctl may be, newest version first, as
// scripts/pgenv.sh searches: PATH, then the Debian and RPM install
// directories, then the source install's.
func BinDirs() []string {
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

// versionOf is the major version in an install directory's path (15 in
// /usr/lib/postgresql/15/bin, in /usr/pgsql-15/bin), 0 without one.
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

// Start runs initdb in a new temporary directory whose name starts with
// prefix and starts the server on a socket there, with settings (each
// "name=value", passed as -c name=value) on top of initdb's defaults.
// Remove it when done.
func Start(prefix string, settings ...string) (*Cluster, error) {
	for _, s := range settings {
		if name, _, ok := strings.Cut(s, "="); !ok || name == "" || strings.ContainsAny(s, "'\\") {
			return nil, fmt.Errorf("pgcluster: setting %q is not name=value without quotes or backslashes", s)
		}
	}
	c := &Cluster{settings: settings}
	for _, d := range BinDirs() {
		if isExec(filepath.Join(d, "initdb")) && isExec(filepath.Join(d, "pg_ctl")) {
			c.Bin = d
			break
		}
	}
	if c.Bin == "" {
		return nil, errors.New("pgcluster: no initdb/pg_ctl found (PATH, /usr/lib/postgresql/*/bin, /usr/pgsql-*/bin): install the PostgreSQL server programs")
	}
	base := os.TempDir()
	if os.Geteuid() == 0 {
		base = "/tmp" // the postgres user must reach it
	}
	dir, err := os.MkdirTemp(base, prefix)
	if err != nil {
		return nil, err
	}
	c.Dir = dir
	if os.Geteuid() == 0 {
		if err := exec.Command("chown", "postgres", dir).Run(); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("pgcluster: chown postgres %s (running as root, the server runs as the postgres OS user): %w", dir, err)
		}
	}
	if out, err := c.asPostgres(filepath.Join(c.Bin, "initdb"), "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8",
		"--locale=C", "-D", filepath.Join(dir, "data")).CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("pgcluster: initdb: %w\n%s", err, out)
	}
	if err := c.Start(); err != nil {
		c.Remove()
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
func (c *Cluster) asPostgres(prog string, args ...string) *exec.Cmd {
	var cmd *exec.Cmd
	if os.Geteuid() == 0 {
		cmd = exec.Command("runuser", append([]string{"-u", "postgres", "--", prog}, args...)...)
	} else {
		cmd = exec.Command(prog, args...)
	}
	cmd.Dir = "/"
	return cmd
}

// Start starts the stopped server again, with the settings it was made with.
func (c *Cluster) Start() error {
	opts := fmt.Sprintf("-k '%s' -c listen_addresses=''", c.Dir)
	for _, s := range c.settings {
		name, value, _ := strings.Cut(s, "=")
		opts += fmt.Sprintf(" -c %s='%s'", name, value)
	}
	out, err := c.asPostgres(filepath.Join(c.Bin, "pg_ctl"), "-D", filepath.Join(c.Dir, "data"), "-l", filepath.Join(c.Dir, "server.log"), "-w",
		"-o", opts, "start").CombinedOutput()
	if err != nil {
		log, _ := os.ReadFile(filepath.Join(c.Dir, "server.log"))
		return fmt.Errorf("pgcluster: pg_ctl start: %w\n%s\n%s", err, out, log)
	}
	return nil
}

// Stop stops the server; fast mode: every session is disconnected, as a
// failover or a restart for maintenance does.
func (c *Cluster) Stop() error {
	out, err := c.asPostgres(filepath.Join(c.Bin, "pg_ctl"), "-D", filepath.Join(c.Dir, "data"), "-m", "fast", "-w", "stop").CombinedOutput()
	if err != nil {
		return fmt.Errorf("pgcluster: pg_ctl stop: %w\n%s", err, out)
	}
	return nil
}

// Remove stops the server (immediate mode) and deletes its directory.
func (c *Cluster) Remove() {
	_ = c.asPostgres(filepath.Join(c.Bin, "pg_ctl"), "-D", filepath.Join(c.Dir, "data"), "-m", "immediate", "-w", "stop").Run()
	os.RemoveAll(c.Dir)
}
