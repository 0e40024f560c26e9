package webhooks_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/examples/webhooks"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemtest"
)

// The server process of TestServerKilledMidRequest is this test binary run
// again with serverEnv set to a serverConfig. It serves the API on Addr
// until it is killed. With Hold it stops inside each refund's transaction,
// after the handler's writes and before the commit, and says so.
const serverEnv = "WEBHOOKS_TEST_SERVER"

type serverConfig struct {
	Addr string // where to listen
	DB   string // the test's schema
	App  string // the application_name of its connections
	Hold bool
}

// The lines a server process writes to its stdout.
const (
	lineListening = "LISTENING"
	lineHolding   = "HOLDING"
)

func serverChild() {
	var cfg serverConfig
	if err := json.Unmarshal([]byte(os.Getenv(serverEnv)), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "server: ", err)
		os.Exit(2)
	}
	ctx := context.Background()
	pcfg, err := pgxpool.ParseConfig(cfg.DB)
	if err != nil {
		fmt.Fprintln(os.Stderr, "server: ", err)
		os.Exit(2)
	}
	pcfg.ConnConfig.RuntimeParams["application_name"] = cfg.App
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "server: ", err)
		os.Exit(2)
	}
	var opts []idem.Option
	if cfg.Hold {
		opts = append(opts, idem.WithBeforeCommit(func(context.Context, pgx.Tx) error {
			fmt.Println(lineHolding)
			time.Sleep(time.Minute)
			return errors.New("server: the test did not kill this process")
		}))
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "server: ", err)
		os.Exit(2)
	}
	fmt.Println(lineListening)
	fmt.Fprintln(os.Stderr, "server: ", http.Serve(ln, newService().Routes(pool, opts...)))
	os.Exit(1)
}

// server is a running server process and the lines of its stdout.
type server struct {
	cmd    *exec.Cmd
	lines  chan string
	stderr bytes.Buffer
}

// startServer runs a server process on cfg and waits until it listens.
func startServer(t *testing.T, cfg serverConfig) *server {
	t.Helper()
	env, _ := json.Marshal(cfg)
	s := &server{cmd: exec.Command(os.Args[0], "-test.run=^$"), lines: make(chan string, 16)}
	s.cmd.Env = append(os.Environ(), serverEnv+"="+string(env))
	s.cmd.Stderr = &s.stderr
	out, err := s.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if s.cmd.ProcessState == nil {
			_ = s.cmd.Process.Kill()
			_ = s.cmd.Wait()
		}
	})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			s.lines <- sc.Text()
		}
		close(s.lines)
	}()
	s.wait(t, lineListening)
	return s
}

// wait waits for the server to write line.
func (s *server) wait(t *testing.T, line string) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case l, ok := <-s.lines:
			if !ok {
				t.Fatalf("the server process ended before it wrote %s; its stderr:\n%s", line, s.stderr.String())
			}
			if l == line {
				return
			}
		case <-timeout:
			t.Fatalf("the server process did not write %s within 30s; its stderr:\n%s", line, s.stderr.String())
		}
	}
}

// freeAddr returns a loopback address no one listens on.
func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// waitGone waits until no session of application_name app is left: the
// server has rolled back the transactions of a killed process.
func waitGone(t *testing.T, db *idemtest.DB, app string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for queryInt(t, db.Pool, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, app) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the killed server's sessions (%s) are still open after 30s", app)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestServerKilledMidRequest kills the server process with SIGKILL while
// it runs a refund (its writes done, its commit not sent) and starts it
// again: the stripe-go client's retry with the same key reaches the new
// process and gets one refund, processed there, which later copies replay.
func TestServerKilledMidRequest(t *testing.T) {
	db := newDB(t)
	seedPayment(t, db.Pool, "pi_1", 10000)
	addr := freeAddr(t)
	app := "webhooks_kill_" + db.Schema
	cfg := serverConfig{Addr: addr, DB: db.URL, App: app, Hold: true}
	first := startServer(t, cfg)

	type result struct {
		r   *refundResource
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := refund(stripeBackend(t, "http://"+addr, 5, 10*time.Second), webhooks.RefundsV2Path, "k-kill", "pi_1", 700)
		done <- result{r, err}
	}()
	first.wait(t, lineHolding)
	if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err := first.cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the server process ended with %v; want killed by SIGKILL", err)
	}
	waitGone(t, db, app)
	if n := queryInt(t, db.Pool, `SELECT count(*) FROM refunds`); n != 0 {
		t.Fatalf("%d refunds after the kill; want 0 (the transaction never committed)", n)
	}
	t.Logf("killed the server (pid %d) inside the refund's transaction; starting it again on %s", first.cmd.Process.Pid, addr)

	cfg.Hold = false
	startServer(t, cfg)
	res := <-done
	if res.err != nil {
		t.Fatalf("the client's call across the kill: %v", res.err)
	}
	t.Logf("stripe-go got refund %d (replayed %q) from the restarted server", res.r.ID, res.r.LastResponse.Header.Get("Idempotent-Replayed"))
	again := send(t, "POST", "http://"+addr+webhooks.RefundsV2Path, `{"payment":"pi_1","amount":700}`, refundHeader("k-kill")...)
	if !again.replayed() || !strings.Contains(again.body, fmt.Sprintf(`"id":%d,`, res.r.ID)) {
		t.Errorf("a later copy: %v; want refund %d replayed", again, res.r.ID)
	}
	if n := queryInt(t, db.Pool, `SELECT count(*) FROM refunds`); n != 1 {
		t.Errorf("%d refunds; want 1", n)
	}
	if n := queryInt(t, db.Pool, `SELECT refunded FROM payments WHERE id = 'pi_1'`); n != 700 {
		t.Errorf("refunded %d; want 700", n)
	}
}
