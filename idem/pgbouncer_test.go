package idem_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemimpl"
	"github.com/idemgen/idemgen/idem/idemtest"
)

// envPgBouncer names a pgbouncer binary to run instead of the one found in
// PATH or /usr/sbin.
const envPgBouncer = "IDEMGEN_PGBOUNCER"

// bouncerPoolSize is the number of server connections PgBouncer keeps: far
// fewer than the clients, so that every transaction may land on another
// server connection than the one before.
const bouncerPoolSize = 4

// TestConcurrentDeliveriesThroughPgBouncer runs the inbox behind a real
// PgBouncer in transaction pooling mode, which the test starts on a port of
// its own: in every exec mode PgBouncer 1.18 supports (named prepared
// statements, pgx's default cache_statement mode, need PgBouncer 1.21 with
// max_prepared_statements), 32 concurrent deliveries of one message and 300
// sequential ones (150 messages, each delivered twice). Before the result was
// sent as text, every delivery failed with "invalid input syntax for type
// json". Without pgbouncer on the machine the test fails and says what to
// install.
func TestConcurrentDeliveriesThroughPgBouncer(t *testing.T) {
	db := idemtest.New(t, migrations)
	bouncer := startPgBouncer(t, db)
	ctx := context.Background()
	for _, mode := range []pgx.QueryExecMode{
		pgx.QueryExecModeSimpleProtocol,
		pgx.QueryExecModeExec,
		pgx.QueryExecModeCacheDescribe,
		pgx.QueryExecModeDescribeExec,
	} {
		t.Run(mode.String(), func(t *testing.T) {
			pool := poolInMode(t, bouncer, mode)
			account := "bouncer-" + mode.String()
			var mu sync.Mutex
			backends := map[uint32]bool{}
			inbox := idemimpl.NewInbox(pool, depositTable, func(ctx context.Context, tx pgx.Tx, msg deposit) (receipt, error) {
				// The server's backend, not the process id PgBouncer gave
				// the client connection.
				var pid uint32
				if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
					return receipt{}, err
				}
				mu.Lock()
				backends[pid] = true
				mu.Unlock()
				if msg.Ref == 0 {
					// Hold the claim while the other deliveries arrive.
					time.Sleep(100 * time.Millisecond)
				}
				return credit(ctx, tx, msg)
			})

			const concurrent = 32
			one := deposit{Account: account, Ref: 0, Amount: 1000}
			got := deliverAtOnce(t, pool, concurrent, func() (idem.Outcome, error) {
				_, o, err := inbox.Handle(ctx, one)
				return o, err
			})
			if got[idem.Processed] != 1 || got[idem.Duplicate] != concurrent-1 {
				t.Errorf("%d concurrent deliveries of one message: %v; want 1 processed and %d duplicates", concurrent, got, concurrent-1)
			}

			const messages = 150
			failures := 0
			for ref := int64(1); ref <= messages; ref++ {
				msg := deposit{Account: account, Ref: ref, Amount: 1}
				for _, want := range []idem.Outcome{idem.Processed, idem.Duplicate} {
					r, o, err := inbox.Handle(ctx, msg)
					if err != nil || o != want || r.Note != "credited 1" {
						failures++
						if failures <= 3 {
							t.Errorf("message %d: %+v, %v, %v; want %v", ref, r, o, err, want)
						}
					}
				}
			}
			if failures > 0 {
				t.Errorf("%d of %d sequential deliveries failed", failures, 2*messages)
			}
			if got, want := balance(t, db, account), 1000+messages; got != want {
				t.Errorf("balance %d, want %d: every message applied once", got, want)
			}
			if n := count(t, db.Pool, `SELECT count(*) FROM idem_test_deposit WHERE key_account = $1`, account); n != messages+1 {
				t.Errorf("%d inbox rows, want %d", n, messages+1)
			}
			// The deliveries ran on PgBouncer's few server connections, not
			// on one per client connection: transaction pooling was at work.
			if clients := pool.Stat().TotalConns(); len(backends) > bouncerPoolSize || clients <= bouncerPoolSize {
				t.Errorf("handlers ran on %d server backends through %d client connections; want at most %d backends for more clients than that",
					len(backends), clients, bouncerPoolSize)
			}
		})
	}
}

// startPgBouncer starts the machine's pgbouncer in a temporary directory, in
// transaction pooling mode on a free port of its own, in front of the test
// database with the test's schema as search_path, and returns the URL its
// clients connect to. The process is killed when the test ends.
func startPgBouncer(t *testing.T, db *idemtest.DB) string {
	t.Helper()
	bin := findPgBouncer(t)
	server, err := pgx.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	entry := []string{
		"host=" + server.Host,
		"port=" + strconv.Itoa(int(server.Port)),
		"dbname=" + server.Database,
		"user=" + server.User,
		// PgBouncer forwards only a few startup parameters; the schema is
		// set on each server connection it opens.
		"connect_query='SET search_path TO " + db.Schema + "'",
	}
	if server.Password != "" {
		entry = append(entry, "password="+server.Password)
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		port := freePort(t)
		config := fmt.Sprintf(`[databases]
idem = %s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = any
pool_mode = transaction
default_pool_size = %d
max_client_conn = 200
%s`, strings.Join(entry, " "), port, bouncerPoolSize, runAs())
		ini := filepath.Join(dir, "pgbouncer.ini")
		if err := os.WriteFile(ini, []byte(config), 0o644); err != nil {
			t.Fatal(err)
		}
		var log lockedBuffer
		cmd := exec.Command(bin, ini)
		cmd.Dir = dir
		cmd.Stdout, cmd.Stderr = &log, &log
		if err := cmd.Start(); err != nil {
			t.Fatalf("start %s: %v", bin, err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		stop := func() {
			_ = cmd.Process.Kill()
			<-exited
		}
		client := (&url.URL{Scheme: "postgres", User: url.User(server.User), Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Path: "/idem", RawQuery: "sslmode=disable"}).String()
		if lastErr = waitReady(client, db.Schema, exited); lastErr == nil {
			t.Cleanup(func() {
				stop()
				if t.Failed() {
					t.Logf("pgbouncer log:\n%s", log.String())
				}
			})
			return client
		}
		stop()
		lastErr = fmt.Errorf("%w\npgbouncer log:\n%s", lastErr, log.String())
		if !strings.Contains(log.String(), "in use") {
			break
		}
	}
	t.Fatalf("pgbouncer did not come up: %v", lastErr)
	return ""
}

// findPgBouncer returns the pgbouncer binary, or fails the test saying what to
// install: a machine without one cannot prove that the runtime works behind
// a transaction pooler, and a skip would hide that.
func findPgBouncer(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv(envPgBouncer); bin != "" {
		return bin
	}
	if bin, err := exec.LookPath("pgbouncer"); err == nil {
		return bin
	}
	for _, bin := range []string{"/usr/sbin/pgbouncer", "/usr/local/sbin/pgbouncer", "/usr/local/bin/pgbouncer"} {
		if _, err := os.Stat(bin); err == nil {
			return bin
		}
	}
	t.Fatalf("pgbouncer is not installed (looked in PATH, /usr/sbin and /usr/local; or set %s to its path). "+
		"This test runs the inbox behind a real PgBouncer in transaction pooling mode. Install it: "+
		"apt-get install -y pgbouncer (Debian, Ubuntu; ./scripts/test.sh does it where it may), dnf install pgbouncer (Fedora, RHEL), brew install pgbouncer (macOS). "+
		"The test starts its own pgbouncer; no service needs to run", envPgBouncer)
	return ""
}

// runAs is the pgbouncer setting that lets it start as root, which it refuses
// otherwise: it switches to an unprivileged user.
func runAs() string {
	if os.Geteuid() == 0 {
		return "user = nobody\n"
	}
	return ""
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// waitReady connects through pgbouncer until a query succeeds, the process
// exits, or 15 seconds pass, and checks that the connection uses the test's
// schema.
func waitReady(client, schema string, exited <-chan error) error {
	deadline := time.Now().Add(15 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		conn, err := pgx.Connect(ctx, client)
		if err == nil {
			var got string
			err = conn.QueryRow(ctx, `SELECT current_schema()`, pgx.QueryExecModeSimpleProtocol).Scan(&got)
			_ = conn.Close(ctx)
			if err == nil && got != schema {
				cancel()
				return fmt.Errorf("a connection through pgbouncer uses schema %q, want %q (connect_query)", got, schema)
			}
		}
		cancel()
		if err == nil {
			return nil
		}
		select {
		case exitErr := <-exited:
			return fmt.Errorf("pgbouncer exited (%v) before it accepted a connection: %w", exitErr, err)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no connection through pgbouncer within 15s: %w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// lockedBuffer collects the process's output while the test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
