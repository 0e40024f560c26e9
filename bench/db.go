package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/idemgen/idemgen/bench/internal/procstat"
	"github.com/idemgen/idemgen/bench/ledger"
)

// schema is a fresh schema with the ledger's migrations applied and the
// accounts created.
type schema struct {
	name string
	base string // the database URL, without the schema
	// via, if set, is the address of a netproxy.Proxy: the connections of the
	// pools opened after it was set go through it (network.go).
	via string
}

// newSchema creates a schema named after the cell, applies the migrations of
// bench/ledger through goose and creates accounts 1 to n.
func newSchema(ctx context.Context, base string, n int) (*schema, error) {
	return newSchemaWith(ctx, base, n, ledger.Migrations())
}

// newOutboxSchema is newSchema with the ledger's outbox chain too.
func newOutboxSchema(ctx context.Context, base string, n int) (*schema, error) {
	migrations, err := ledger.MigrationsWithOutbox()
	if err != nil {
		return nil, err
	}
	return newSchemaWith(ctx, base, n, migrations)
}

// newSchemaWith is newSchema with the goose migrations of migrations (the
// ledger's, with or without the outbox chain).
func newSchemaWith(ctx context.Context, base string, n int, migrations fs.FS) (*schema, error) {
	s, pool, err := newMigratedSchema(ctx, base, migrations)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	_, err = pool.Exec(ctx, `INSERT INTO accounts (id) SELECT generate_series(1, $1::bigint)`, n)
	if err == nil {
		_, err = pool.Exec(ctx, `VACUUM ANALYZE accounts`)
	}
	if err != nil {
		s.drop()
		return nil, fmt.Errorf("prepare schema %s: %w", s.name, err)
	}
	return s, nil
}

// newMigratedSchema creates a fresh schema with the goose migrations of
// migrations applied, and returns it with a pool of one connection on it
// for the caller to close.
func newMigratedSchema(ctx context.Context, base string, migrations fs.FS) (*schema, *pgxpool.Pool, error) {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	s := &schema{name: "idembench_" + hex.EncodeToString(b), base: base}
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		return nil, nil, err
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+s.name); err != nil {
		return nil, nil, err
	}
	pool, _, err := s.pool(ctx, 1)
	if err != nil {
		s.drop()
		return nil, nil, err
	}
	sqlDB := stdlib.OpenDBFromPool(pool)
	defer sqlDB.Close()
	provider, err := goose.NewProvider(goose.DialectPostgres, sqlDB, migrations, goose.WithDisableGlobalRegistry(true))
	if err == nil {
		_, err = provider.Up(ctx)
	}
	if err != nil {
		pool.Close()
		s.drop()
		return nil, nil, fmt.Errorf("prepare schema %s: %w", s.name, err)
	}
	return s, pool, nil
}

// drop removes the schema; it runs even when the run was interrupted.
func (s *schema) drop() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.base)
	if err != nil {
		logf("drop schema %s: %v", s.name, err)
		return
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP SCHEMA "+s.name+" CASCADE"); err != nil {
		logf("drop schema %s: %v", s.name, err)
	}
}

// pool opens a pool of up to size connections on the schema, whose round
// trips the returned counter counts.
func (s *schema) pool(ctx context.Context, size int) (*pgxpool.Pool, *tripCounter, error) {
	cfg, err := pgxpool.ParseConfig(s.base)
	if err != nil {
		return nil, nil, err
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = s.name
	cfg.MaxConns = int32(size)
	counter := &tripCounter{}
	dial := cfg.ConnConfig.DialFunc
	if via := s.via; via != "" {
		// pgx still takes the connection for the one it asked for (the
		// socket: no TLS negotiation); the proxy dials that.
		cfg.ConnConfig.DialFunc = func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			c, err := d.DialContext(ctx, "tcp", via)
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetNoDelay(true)
			}
			return c, err
		}
		dial = cfg.ConnConfig.DialFunc
	}
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &countedConn{Conn: c, counter: counter}, nil
	}
	cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		return counter.addBackend(ctx, conn)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	return pool, counter, err
}

// tripCounter counts the round trips of a pool's connections, and knows the
// server processes that serve them.
type tripCounter struct {
	trips atomic.Int64

	mu       sync.Mutex
	backends []int // PIDs of the connections' PostgreSQL backends
	remote   bool  // a backend is not a local process
}

// addBackend records the PID of conn's backend, if it is a postgres process
// on the bench's own host (the server CPU of a cell is read from /proc).
func (c *tripCounter) addBackend(ctx context.Context, conn *pgx.Conn) error {
	var pid int
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		return err
	}
	comm, ok := procstat.ProcessName(pid)
	c.mu.Lock()
	defer c.mu.Unlock()
	if !ok || comm != "postgres" {
		c.remote = true
	}
	c.backends = append(c.backends, pid)
	return nil
}

// serverCPU returns the CPU time the connections' backends have used so far,
// and false when it cannot be known (the server is elsewhere).
func (c *tripCounter) serverCPU() (time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.remote || len(c.backends) == 0 {
		return 0, false
	}
	var total time.Duration
	for _, pid := range c.backends {
		d, ok := procstat.ProcessCPU(pid)
		if !ok {
			return 0, false
		}
		total += d
	}
	return total, true
}

func (c *tripCounter) reset()      { c.trips.Store(0) }
func (c *tripCounter) load() int64 { return c.trips.Load() }

// countedConn counts round trips on the wire, independently of the code that
// sends the statements: a round trip is the client's writing followed by the
// server's answer, so each read that returns data after one or more writes
// counts one. Reads that continue an answer (a long result arriving in
// pieces) do not count again.
type countedConn struct {
	net.Conn
	counter *tripCounter
	// wrote is set by a write and cleared by the first read that follows;
	// pgconn may read on another goroutine while it writes.
	wrote atomic.Bool
}

func (c *countedConn) Write(p []byte) (int, error) {
	c.wrote.Store(true)
	return c.Conn.Write(p)
}

func (c *countedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && c.wrote.Swap(false) {
		c.counter.trips.Add(1)
	}
	return n, err
}
