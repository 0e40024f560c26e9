package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// PairOptions configure StartPair.
type PairOptions struct {
	// Prefix starts the names of the servers' temporary directories
	// (default "idemgen-pair.").
	Prefix string
	// Sync makes the replication synchronous: the primary names its
	// standby in synchronous_standby_names, so a commit returns once the
	// standby has flushed it (with synchronous_commit on, the default).
	// Without it the replication is asynchronous: a commit returns once
	// the primary flushed it, and a failover loses what the standby had
	// not received.
	Sync bool
	// Settings are set on both servers ("name=value", as Start takes them).
	Settings []string
}

// Pair is a primary and a streaming standby of it, each on a port of
// 127.0.0.1, made with initdb and pg_basebackup -R. Failover makes the
// standby the primary; Rebuild makes a new standby of it on the free port.
// Safe for concurrent use.
type Pair struct {
	sync   bool
	prefix string
	ports  [2]int // the two ports, in the order of URL's hosts

	mu      sync.Mutex
	primary *Cluster
	standby *Cluster // nil after a failover, until Rebuild
	old     *Cluster // the stopped primary of the last failover, until Rebuild
	held    string   // the standby's primary_conninfo line while PauseReplication holds it
}

// StartPair starts a primary and a standby of it on two free ports of
// 127.0.0.1 and returns once the standby streams (and, with o.Sync, is
// the synchronous one). Remove it when done.
func StartPair(o PairOptions) (*Pair, error) {
	if o.Prefix == "" {
		o.Prefix = "idemgen-pair."
	}
	bin, err := binDir("initdb", "pg_ctl", "pg_basebackup")
	if err != nil {
		return nil, err
	}
	// Commit timestamps let a test tell a commit of the new primary from
	// one replayed from the old (FirstCommitAfter).
	settings := append([]string{"track_commit_timestamp=on"}, o.Settings...)
	var primary *Cluster
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		primary, err = start(bin, o.Prefix, port, settings)
		if err == nil {
			break
		}
		// Another process may have taken the port between the probe and
		// the start.
		if attempt == 3 || !strings.Contains(err.Error(), "could not") {
			return nil, err
		}
	}
	p := &Pair{sync: o.Sync, prefix: o.Prefix, primary: primary}
	p.ports[0] = primary.Port
	if err := p.addStandby(0); err != nil {
		primary.Remove()
		return nil, err
	}
	p.ports[1] = p.standby.Port
	return p, nil
}

// freePort returns a TCP port of 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// URL is the multi-host URL of database db, as its superuser postgres. It
// names both ports with target_session_attrs=read-write: a client (libpq,
// pgx) connects to whichever of the two is the primary now. The servers
// have no TLS: sslmode=disable spares a client a second try at each.
func (p *Pair) URL(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/%s?target_session_attrs=read-write&sslmode=disable", p.ports[0], p.ports[1], db)
}

// DSN is URL in the keyword/value form: host=…,… port=…,….
func (p *Pair) DSN(db string) string {
	return fmt.Sprintf("host=127.0.0.1,127.0.0.1 port=%d,%d dbname=%s user=postgres target_session_attrs=read-write sslmode=disable",
		p.ports[0], p.ports[1], db)
}

// Ports are the pair's two ports, in the order of URL's hosts.
func (p *Pair) Ports() [2]int { return p.ports }

// Sync reports whether the replication is synchronous.
func (p *Pair) Sync() bool { return p.sync }

// Primary is the server that is the primary now.
func (p *Pair) Primary() *Cluster {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.primary
}

// Standby is the server that streams from the primary now; nil after a
// failover until Rebuild.
func (p *Pair) Standby() *Cluster {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.standby
}

// PrimaryURL is the URL of database db on the primary alone.
func (p *Pair) PrimaryURL(db string) string { return p.Primary().URL(db) }

// StandbyURL is the URL of database db on the standby alone (read-only
// sessions); "" when the pair has no standby.
func (p *Pair) StandbyURL(db string) string {
	if s := p.Standby(); s != nil {
		return s.URL(db)
	}
	return ""
}

// Failover is what Pair.Failover did, and when.
type Failover struct {
	// From and To are the ports of the old and the new primary.
	From, To int
	// Stopped is when the old primary was told to stop (the moment it
	// started to die); Dead when every one of its processes had exited.
	Stopped, Dead time.Time
	// Promoted is when the new primary accepted writes.
	Promoted time.Time
}

// Failover fails the pair over as a managed service does when its primary
// is lost: the primary stops in immediate mode (every process exits at
// once, as if its machine died), and the standby is promoted. It returns
// once the new primary accepts writes. The new primary has no standby (and
// so commits without one, also in a synchronous pair) until Rebuild.
func (p *Pair) Failover() (Failover, error) {
	return p.FailoverAfter(0)
}

// FailoverAfter is Failover with the standby promoted down after the
// primary died: the time a managed service takes to notice and decide.
func (p *Pair) FailoverAfter(down time.Duration) (Failover, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.standby == nil {
		return Failover{}, errNoStandby
	}
	f := Failover{From: p.primary.Port, To: p.standby.Port}
	f.Stopped = time.Now()
	if err := p.primary.Kill(); err != nil {
		return f, err
	}
	f.Dead = time.Now()
	time.Sleep(down)
	if out, err := p.standby.pgCtl("-w", "-t", "120", "promote"); err != nil {
		return f, fmt.Errorf("pgcluster: pg_ctl promote %s: %w\n%s", p.standby, err, out)
	}
	f.Promoted = time.Now()
	p.old, p.primary, p.standby, p.held = p.primary, p.standby, nil, ""
	return f, nil
}

// Rebuild makes a new standby of the primary (pg_basebackup -R) on the
// port of the old primary, whose data it deletes, and returns once it
// streams (and, in a synchronous pair, is the synchronous standby). After
// it the pair can fail over again, the other way.
func (p *Pair) Rebuild() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.standby != nil {
		return errors.New("pgcluster: the pair has a standby already")
	}
	port := p.ports[0]
	if p.primary.Port == port {
		port = p.ports[1]
	}
	if p.old != nil {
		p.old.Remove()
		p.old = nil
	}
	return p.addStandby(port)
}

// addStandby makes a standby of the primary on port (0: a free one) and
// waits until it streams; in a synchronous pair it then names it in the
// primary's synchronous_standby_names. Called with p.mu held.
func (p *Pair) addStandby(port int) error {
	for attempt := 1; ; attempt++ {
		try := port
		if try == 0 {
			var err error
			if try, err = freePort(); err != nil {
				return err
			}
		}
		err := p.basebackup(try)
		if err == nil {
			break
		}
		if port != 0 || attempt == 3 || !strings.Contains(err.Error(), "could not") {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := p.waitStreaming(ctx, p.standby); err != nil {
		return err
	}
	if !p.sync {
		return nil
	}
	conn, err := pgx.Connect(ctx, p.primary.URL("postgres"))
	if err != nil {
		return fmt.Errorf("pgcluster: connect to the primary %s: %w", p.primary, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "ALTER SYSTEM SET synchronous_standby_names = '*'"); err != nil {
		return fmt.Errorf("pgcluster: make the standby synchronous: %w", err)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
		return fmt.Errorf("pgcluster: reload the primary's configuration: %w", err)
	}
	return poll(ctx, "the standby "+p.standby.String()+" to be synchronous", func() (bool, error) {
		var n int
		err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'").Scan(&n)
		return n > 0, err
	})
}

// basebackup copies the primary into a new cluster on port with
// pg_basebackup -R and starts it as p.standby.
func (p *Pair) basebackup(port int) error {
	s, err := newDir(p.primary.Bin, p.prefix, port, p.primary.settings)
	if err != nil {
		return err
	}
	if out, err := s.asPostgres(filepath.Join(s.Bin, "pg_basebackup"), "-h", "127.0.0.1", "-p", strconv.Itoa(p.primary.Port),
		"-U", "postgres", "-D", s.data(), "-R", "-X", "stream", "-c", "fast", "--no-sync").CombinedOutput(); err != nil {
		os.RemoveAll(s.Dir)
		return fmt.Errorf("pgcluster: pg_basebackup of %s: %w\n%s", p.primary, err, out)
	}
	// The copy has the primary's ALTER SYSTEM settings: a standby promoted
	// with synchronous_standby_names set would wait, at every commit, for
	// a standby it does not have.
	if err := editAutoConf(s, func(line string) bool { return !strings.HasPrefix(line, "synchronous_standby_names") }); err != nil {
		os.RemoveAll(s.Dir)
		return err
	}
	if err := s.Start(); err != nil {
		s.Remove()
		return err
	}
	p.standby = s
	return nil
}

// editAutoConf keeps the lines of c's postgresql.auto.conf that keep says
// to, and returns the others.
func editAutoConf(c *Cluster, keep func(line string) bool) error {
	path := filepath.Join(c.data(), "postgresql.auto.conf")
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	var kept []string
	for _, line := range strings.SplitAfter(string(b), "\n") {
		if line != "" && keep(line) {
			kept = append(kept, line)
		}
	}
	// WriteFile keeps the owner (postgres) of the existing file.
	if err := os.WriteFile(path, []byte(strings.Join(kept, "")), 0o600); err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	return nil
}

// waitStreaming waits until the primary has a walsender streaming to s.
func (p *Pair) waitStreaming(ctx context.Context, s *Cluster) error {
	return poll(ctx, "the standby "+s.String()+" to stream", func() (bool, error) {
		return p.streaming(ctx)
	})
}

// streaming reports whether a standby streams from the primary.
func (p *Pair) streaming(ctx context.Context) (bool, error) {
	conn, err := pgx.Connect(ctx, p.primary.URL("postgres"))
	if err != nil {
		return false, nil // starting
	}
	defer conn.Close(ctx)
	var n int
	err = conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'").Scan(&n)
	return n > 0, err
}

// PauseReplication disconnects the standby from the primary, as a failing
// network between them would. It returns once the primary streams to no
// standby. From then on the standby receives nothing, and a failover loses
// every commit made after it. In a synchronous pair a commit then waits
// for ResumeReplication; in an asynchronous one it returns at once.
func (p *Pair) PauseReplication() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.standby == nil || p.held != "" {
		return errors.New("pgcluster: no standby streams")
	}
	var held []string
	if err := editAutoConf(p.standby, func(line string) bool {
		if strings.HasPrefix(line, "primary_conninfo") {
			held = append(held, line)
			return false
		}
		return true
	}); err != nil {
		return err
	}
	if len(held) == 0 {
		return errors.New("pgcluster: the standby has no primary_conninfo")
	}
	p.held = strings.Join(held, "")
	if out, err := p.standby.pgCtl("reload"); err != nil {
		return fmt.Errorf("pgcluster: pg_ctl reload %s: %w\n%s", p.standby, err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return poll(ctx, "the standby to stop streaming", func() (bool, error) {
		on, err := p.streaming(ctx)
		return !on, err
	})
}

// ResumeReplication connects the standby to the primary again and returns
// once it streams.
func (p *Pair) ResumeReplication() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.standby == nil || p.held == "" {
		return errors.New("pgcluster: the replication is not paused")
	}
	path := filepath.Join(p.standby.data(), "postgresql.auto.conf")
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	if err := os.WriteFile(path, append(b, p.held...), 0o600); err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	p.held = ""
	if out, err := p.standby.pgCtl("reload"); err != nil {
		return fmt.Errorf("pgcluster: pg_ctl reload %s: %w\n%s", p.standby, err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return p.waitStreaming(ctx, p.standby)
}

// CatchUp returns once the standby has replayed all the primary had
// written when it was called: what a test committed by then is on the
// standby, and survives a failover also in an asynchronous pair.
func (p *Pair) CatchUp(ctx context.Context) error {
	primary, standby := p.Primary(), p.Standby()
	if standby == nil {
		return errors.New("pgcluster: the pair has no standby")
	}
	conn, err := pgx.Connect(ctx, primary.URL("postgres"))
	if err != nil {
		return fmt.Errorf("pgcluster: connect to the primary %s: %w", primary, err)
	}
	var lsn string
	err = conn.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn)
	conn.Close(ctx)
	if err != nil {
		return fmt.Errorf("pgcluster: read the primary's WAL position: %w", err)
	}
	return poll(ctx, "the standby "+standby.String()+" to replay "+lsn, func() (bool, error) {
		conn, err := pgx.Connect(ctx, standby.URL("postgres"))
		if err != nil {
			return false, err
		}
		defer conn.Close(ctx)
		var done bool
		err = conn.QueryRow(ctx, "SELECT coalesce(pg_last_wal_replay_lsn() >= $1::pg_lsn, false)", lsn).Scan(&done)
		return done, err
	})
}

// Remove stops both servers (immediate mode) and deletes their
// directories.
func (p *Pair) Remove() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range []*Cluster{p.primary, p.standby, p.old} {
		if c != nil {
			c.Remove()
		}
	}
}

// FirstCommitAfter returns, read on the primary, the earliest commit after
// t of a row of table (with its schema, as pgx.Identifier takes it) that is
// still there; ok is false when there is none. After a failover, with t the
// Failover's Dead, it is the first commit of the new primary. Rows replayed
// from the old one keep their own commit times.
func (p *Pair) FirstCommitAfter(ctx context.Context, db string, table pgx.Identifier, t time.Time) (first time.Time, ok bool, err error) {
	conn, err := pgx.Connect(ctx, p.PrimaryURL(db))
	if err != nil {
		return first, false, fmt.Errorf("pgcluster: connect to the primary: %w", err)
	}
	defer conn.Close(ctx)
	var at *time.Time
	err = conn.QueryRow(ctx, "SELECT min(pg_xact_commit_timestamp(xmin)) FROM "+table.Sanitize()+
		" WHERE pg_xact_commit_timestamp(xmin) > $1", t).Scan(&at)
	if err != nil || at == nil {
		return first, false, err
	}
	return *at, true, nil
}

// poll calls ready every 10ms until it reports true, returns an error, or
// ctx ends; what says what it waits for in the error.
func poll(ctx context.Context, what string, ready func() (bool, error)) error {
	var last error
	for {
		ok, err := ready()
		if err == nil && ok {
			return nil
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgcluster: waiting for %s: %w (last error: %v)", what, ctx.Err(), last)
		case <-time.After(10 * time.Millisecond):
		}
	}
}
