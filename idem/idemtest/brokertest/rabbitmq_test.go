package brokertest

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// TestRabbitMQNodeStartAndStop starts a throwaway node (whatever runs at
// 5672), uses it over AMQP, closes a connection on it with rabbitmqctl -n, and
// stops it: its port, its epmd, its processes and its directory are gone, and
// the machine's own node and epmd are untouched.
func TestRabbitMQNodeStartAndStop(t *testing.T) {
	t.Parallel()
	sharedBefore := dialAMQP(DefaultAMQPURL) == nil
	start := time.Now()
	n, err := StartRabbitMQNode()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Stop() })
	started := time.Since(start)
	if strings.Contains(n.URL, ":5672/") {
		t.Fatalf("the throwaway node listens on %s, the shared node's port", n.URL)
	}

	name := "brokertest-" + filepath.Base(n.Dir)
	conn, err := amqp.DialConfig(n.URL, amqp.Config{Properties: amqp.Table{"connection_name": name}})
	if err != nil {
		t.Fatal(err)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	q, err := ch.QueueDeclare("brokertest", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Publish("", q.Name, false, false, amqp.Publishing{MessageId: "m-1", Body: []byte("hello")}); err != nil {
		t.Fatal(err)
	}
	var got amqp.Delivery
	WaitFor(t, 5*time.Second, "the message back", func() bool {
		d, ok, err := ch.Get(q.Name, true)
		if err != nil {
			t.Fatal(err)
		}
		got = d
		return ok
	})
	if got.MessageId != "m-1" || string(got.Body) != "hello" {
		t.Fatalf("got %q %q; want m-1 hello", got.MessageId, got.Body)
	}

	// rabbitmqctl reaches this node, not the shared one.
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	out, err := n.Ctl("list_connections", "-q", "--no-table-headers", "pid", "client_properties")
	if err != nil {
		t.Fatal(err)
	}
	closedByCtl := 0
	for _, line := range strings.Split(string(out), "\n") {
		if pid, props, ok := strings.Cut(line, "\t"); ok && strings.Contains(props, name) {
			if _, err := n.Ctl("close_connection", pid, "closed by "+t.Name()); err != nil {
				t.Fatal(err)
			}
			closedByCtl++
		}
	}
	if closedByCtl != 1 {
		t.Fatalf("rabbitmqctl -n %s listed %d connections named %s; want 1:\n%s", n.Name, closedByCtl, name, out)
	}
	select {
	case e := <-closed:
		if e == nil || e.Code != amqp.ConnectionForced {
			t.Fatalf("connection closed with %v; want CONNECTION_FORCED from the server", e)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the connection was not closed within 10s of rabbitmqctl close_connection")
	}

	pid := n.server.Process.Pid
	u, _ := url.Parse(n.URL)
	epmdAddr := ""
	for _, kv := range n.env {
		if p, ok := strings.CutPrefix(kv, "ERL_EPMD_PORT="); ok {
			epmdAddr = "127.0.0.1:" + p
		}
	}
	stopStart := time.Now()
	if err := n.Stop(); err != nil {
		t.Fatal(err)
	}
	stopped := time.Since(stopStart)
	if c, err := net.DialTimeout("tcp", u.Host, time.Second); err == nil {
		c.Close()
		t.Errorf("%s still answers after Stop", u.Host)
	}
	if epmdAddr != "" {
		if c, err := net.DialTimeout("tcp", epmdAddr, time.Second); err == nil {
			c.Close()
			t.Errorf("the node's epmd at %s still answers after Stop", epmdAddr)
		}
	}
	if err := syscall.Kill(-pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("process group %d still exists after Stop (%v)", pid, err)
	}
	if _, err := os.Stat(n.Dir); !os.IsNotExist(err) {
		t.Errorf("%s still exists after Stop (%v)", n.Dir, err)
	}
	if sharedBefore && dialAMQP(DefaultAMQPURL) != nil {
		t.Errorf("the node at %s answered before and not after", DefaultAMQPURL)
	}
	t.Logf("throwaway node %s at %s (own epmd %v): up in %v, a message through it, 1 connection closed by rabbitmqctl -n, stopped in %v",
		n.Name, u.Host, epmdAddr != "", started.Round(time.Millisecond), stopped.Round(time.Millisecond))
}

const envWatchdogChild = "IDEM_TEST_RABBITMQ_WATCHDOG_CHILD"

// TestRabbitMQNodeOutlivesNoTestBinary: a test binary that started a
// throwaway node and is killed with SIGKILL (Stop never runs) leaves nothing
// behind: the watchdog stops the node, its epmd and removes its directory.
func TestRabbitMQNodeOutlivesNoTestBinary(t *testing.T) {
	if os.Getenv(envWatchdogChild) != "" {
		n, err := StartRabbitMQNode()
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(3)
		}
		fmt.Printf("node %s %d %s\n", n.URL, n.server.Process.Pid, n.Dir)
		select {} // until killed
	}
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run=^TestRabbitMQNodeOutlivesNoTestBinary$", "-test.count=1")
	cmd.Env = append(os.Environ(), envWatchdogChild+"=1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("the child printed nothing: %v", err)
	}
	var nodeURL, dir string
	var pid int
	if _, err := fmt.Sscanf(line, "node %s %d %s", &nodeURL, &pid, &dir); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("the child said %q", line)
	}
	if err := dialAMQP(nodeURL); err != nil {
		t.Fatalf("the child's node at %s: %v", redactURL(nodeURL), err)
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	killed := time.Now()
	WaitFor(t, 40*time.Second, "the orphaned node gone", func() bool {
		_, statErr := os.Stat(dir)
		return errors.Is(syscall.Kill(-pid, 0), syscall.ESRCH) && os.IsNotExist(statErr)
	})
	if err := dialAMQP(nodeURL); err == nil {
		t.Errorf("%s still answers", redactURL(nodeURL))
	}
	t.Logf("test binary SIGKILLed with its node at %s up; the watchdog stopped it and removed %s in %v",
		redactURL(nodeURL), dir, time.Since(killed).Round(time.Millisecond))
}

// TestRabbitMQNotInstalled: without rabbitmq-server anywhere, starting a
// throwaway node fails and says what to install.
func TestRabbitMQNotInstalled(t *testing.T) {
	empty := t.TempDir()
	t.Setenv("PATH", empty)
	saved := rabbitDirs
	rabbitDirs = []string{empty}
	t.Cleanup(func() { rabbitDirs = saved })
	_, err := StartRabbitMQNode()
	if err == nil || !strings.Contains(err.Error(), "apt-get install rabbitmq-server") {
		t.Fatalf("StartRabbitMQNode without rabbitmq-server: %v; want what to install", err)
	}
	t.Logf("without rabbitmq-server: %v", err)
}

// TestLookRabbitMQToolUnwrapsDebian: Debian's /usr/sbin/rabbitmq-server is a
// link to a wrapper that runs the script as the rabbitmq user; a throwaway
// node runs the script beside the wrapper instead, the machine's node's
// rabbitmqctl stays the wrapper.
func TestLookRabbitMQToolUnwrapsDebian(t *testing.T) {
	root := t.TempDir()
	t.Setenv("PATH", filepath.Join(root, "none"))
	bin, sbin := filepath.Join(root, "lib", "bin"), filepath.Join(root, "sbin")
	for _, d := range []string{bin, sbin} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"rabbitmq-script-wrapper", "rabbitmq-server"} {
		if err := os.WriteFile(filepath.Join(bin, f), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join("..", "lib", "bin", "rabbitmq-script-wrapper"), filepath.Join(sbin, "rabbitmq-server")); err != nil {
		t.Fatal(err)
	}
	got, err := lookRabbitMQTool("rabbitmq-server", []string{sbin}, true)
	if want, _ := filepath.EvalSymlinks(filepath.Join(bin, "rabbitmq-server")); err != nil || got != want {
		t.Errorf("unwrapped: %q, %v; want %q", got, err, want)
	}
	got, err = lookRabbitMQTool("rabbitmq-server", []string{sbin}, false)
	if want := filepath.Join(sbin, "rabbitmq-server"); err != nil || got != want {
		t.Errorf("as installed: %q, %v; want %q", got, err, want)
	}
}
