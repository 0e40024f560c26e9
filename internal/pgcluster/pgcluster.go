// Package pgcluster runs throwaway PostgreSQL clusters from the machine's
// install (initdb, pg_ctl). A cluster's data, its log and its Unix socket
// live in a temporary directory; it never touches a server that was
// running before. A cluster of Start listens on no TCP port. The soak
// starts one that it may stop and start again. The bench starts one
// preloaded with pg_stat_statements, which only a server start can set.
//
// A Pair (StartPair) is a primary and a streaming standby on loopback TCP
// ports, with synchronous or asynchronous replication, that a test fails
// over. The primary stops as a crash would, and the standby is promoted.
// Then a new standby can be made on the old primary's port. So one
// multi-host connection string (Pair.URL) reaches the primary through
// every failover.
package pgcluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// Cluster is a running throwaway cluster.
type Cluster struct {
	// Bin is the directory of the initdb and pg_ctl it was made with.
	Bin string
	// Dir holds the data (Dir/data), the socket and the log
	// (Dir/server.log).
	Dir string
	// Port is the TCP port it listens on, on 127.0.0.1; 0 when it listens
	// on its Unix socket only.
	Port     int
	settings []string
}

// URL is the URL of database db on the cluster, as its superuser postgres:
// over TCP when it has a port, else on its socket.
func (c *Cluster) URL(db string) string {
	if c.Port > 0 {
		return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.Port, db)
	}
	return "postgres://postgres@/" + db + "?host=" + c.Dir
}

// BinDirs lists where initdb and pg_ctl may be, newest version first, as
// scripts/pgenv.sh searches: PATH, then the Debian and RPM install
// directories, then the source install's.
func BinDirs() []string {
	var dirs []string
	if p, err := exec.LookPath("initdb"); err == nil {
		dirs = append(dirs, filepath.Dir(p))
		// A link in PATH (/usr/local/bin/initdb) to an install directory
		// that has the other programs (pg_basebackup) too.
		if real, err := filepath.EvalSymlinks(p); err == nil && filepath.Dir(real) != filepath.Dir(p) {
			dirs = append(dirs, filepath.Dir(real))
		}
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

// binDir is the first of BinDirs that has every one of progs.
func binDir(progs ...string) (string, error) {
	for _, d := range BinDirs() {
		all := true
		for _, p := range progs {
			all = all && isExec(filepath.Join(d, p))
		}
		if all {
			return d, nil
		}
	}
	return "", fmt.Errorf("pgcluster: no directory has %s (PATH, /usr/lib/postgresql/*/bin, /usr/pgsql-*/bin): install the PostgreSQL server programs",
		strings.Join(progs, ", "))
}

// Start runs initdb in a new temporary directory whose name starts with
// prefix and starts the server on a socket there, with settings (each
// "name=value", passed as -c name=value) on top of initdb's defaults.
// Remove it when done.
func Start(prefix string, settings ...string) (*Cluster, error) {
	bin, err := binDir("initdb", "pg_ctl")
	if err != nil {
		return nil, err
	}
	return start(bin, prefix, 0, settings)
}

// checkSettings refuses a setting that is not name=value, or that would
// break the quoting of pg_ctl's -o.
func checkSettings(settings []string) error {
	for _, s := range settings {
		if name, _, ok := strings.Cut(s, "="); !ok || name == "" || strings.ContainsAny(s, "'\\") {
			return fmt.Errorf("pgcluster: setting %q is not name=value without quotes or backslashes", s)
		}
	}
	return nil
}

// start makes and starts a new cluster with initdb from bin, listening on
// port of 127.0.0.1 (0: on its socket only).
func start(bin, prefix string, port int, settings []string) (*Cluster, error) {
	if err := checkSettings(settings); err != nil {
		return nil, err
	}
	c, err := newDir(bin, prefix, port, settings)
	if err != nil {
		return nil, err
	}
	if out, err := c.asPostgres(filepath.Join(c.Bin, "initdb"), "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8",
		"--locale=C", "-D", c.data()).CombinedOutput(); err != nil {
		os.RemoveAll(c.Dir)
		return nil, fmt.Errorf("pgcluster: initdb: %w\n%s", err, out)
	}
	if err := c.Start(); err != nil {
		c.Remove()
		return nil, err
	}
	return c, nil
}

// newDir returns a cluster without data yet: its temporary directory,
// which the postgres OS user owns when running as root.
func newDir(bin, prefix string, port int, settings []string) (*Cluster, error) {
	c := &Cluster{Bin: bin, Port: port, settings: settings}
	base := os.TempDir()
	if os.Geteuid() == 0 {
		base = "/tmp" // the postgres user must reach it
	}
	reap(base)
	dir, err := os.MkdirTemp(base, prefix)
	if err != nil {
		return nil, err
	}
	c.Dir = dir
	// The owner file lets a later run reap the cluster if this process
	// dies without removing it (a test killed by its timeout).
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if os.Geteuid() == 0 {
		if err := exec.Command("chown", "postgres", dir).Run(); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("pgcluster: chown postgres %s (running as root, the server runs as the postgres OS user): %w", dir, err)
		}
	}
	return c, nil
}

func (c *Cluster) data() string { return filepath.Join(c.Dir, "data") }

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

// pgCtl runs pg_ctl on the cluster's data directory with args.
func (c *Cluster) pgCtl(args ...string) ([]byte, error) {
	return c.asPostgres(filepath.Join(c.Bin, "pg_ctl"), append([]string{"-D", c.data()}, args...)...).CombinedOutput()
}

// Start starts the stopped server again, with the settings it was made with.
func (c *Cluster) Start() error {
	opts := fmt.Sprintf("-k '%s' -c listen_addresses=''", c.Dir)
	if c.Port > 0 {
		opts = fmt.Sprintf("-k '%s' -c listen_addresses=127.0.0.1 -c port=%d", c.Dir, c.Port)
	}
	for _, s := range c.settings {
		name, value, _ := strings.Cut(s, "=")
		opts += fmt.Sprintf(" -c %s='%s'", name, value)
	}
	out, err := c.pgCtl("-l", filepath.Join(c.Dir, "server.log"), "-w", "-o", opts, "start")
	if err != nil {
		log, _ := os.ReadFile(filepath.Join(c.Dir, "server.log"))
		return fmt.Errorf("pgcluster: pg_ctl start: %w\n%s\n%s", err, out, log)
	}
	return nil
}

// Stop stops the server; fast mode: every session is disconnected, as a
// restart for maintenance does.
func (c *Cluster) Stop() error {
	if out, err := c.pgCtl("-m", "fast", "-w", "stop"); err != nil {
		return fmt.Errorf("pgcluster: pg_ctl stop: %w\n%s", err, out)
	}
	return nil
}

// Kill stops the server in immediate mode: every server process exits at
// once, without a checkpoint, as if the machine had died (the sessions'
// sockets close; on the next start the server recovers from its WAL).
func (c *Cluster) Kill() error {
	if out, err := c.pgCtl("-m", "immediate", "-w", "stop"); err != nil {
		return fmt.Errorf("pgcluster: pg_ctl stop -m immediate: %w\n%s", err, out)
	}
	return nil
}

// Remove stops the server (immediate mode) and deletes its directory.
func (c *Cluster) Remove() {
	_, _ = c.pgCtl("-m", "immediate", "-w", "stop")
	os.RemoveAll(c.Dir)
}

// Log returns the server's log (server.log) so far.
func (c *Cluster) Log() string {
	b, _ := os.ReadFile(filepath.Join(c.Dir, "server.log"))
	return string(b)
}

// String names the cluster for messages: its port, or its directory.
func (c *Cluster) String() string {
	if c.Port > 0 {
		return "127.0.0.1:" + strconv.Itoa(c.Port)
	}
	return c.Dir
}

// ownerFile holds, in a cluster's directory, the id of the process that
// made it.
const ownerFile = "owner.pid"

// reap stops and deletes the clusters under base whose owner process is
// gone: a process that dies (a test killed by its timeout, a soak
// interrupted twice) cannot remove its clusters, which would run on.
func reap(base string) {
	owners, _ := filepath.Glob(filepath.Join(base, "*", ownerFile))
	for _, f := range owners {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 || syscall.Kill(pid, 0) != syscall.ESRCH {
			continue // alive, or not ours to judge
		}
		c := &Cluster{Dir: filepath.Dir(f)}
		if bin, err := binDir("pg_ctl"); err == nil {
			c.Bin = bin
			if _, err := os.Stat(c.data()); err == nil {
				_, _ = c.pgCtl("-m", "immediate", "-w", "stop")
			}
		}
		os.RemoveAll(c.Dir)
	}
}

// errNoStandby is what Failover returns without a standby to promote.
var errNoStandby = errors.New("pgcluster: the pair has no standby (fail over once per Rebuild)")
