package brokertest

import (
	"context"
	"errors"
	"net"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestNATSServerStartAndStop starts a throwaway nats-server (whatever runs at
// 4222), stores a message in a stream on it, and stops it: its port, its
// process and its directory are gone, and the machine's own server is
// untouched.
func TestNATSServerStartAndStop(t *testing.T) {
	t.Parallel()
	sharedBefore := CheckJetStream(DefaultNATSURL) == nil
	start := time.Now()
	s, err := StartNATSServer()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	started := time.Since(start)
	if strings.HasSuffix(s.URL, ":4222") {
		t.Fatalf("the throwaway server listens on %s, the shared server's port", s.URL)
	}
	nc, err := nats.Connect(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "brokertest", Subjects: []string{"brokertest.>"}}); err != nil {
		t.Fatal(err)
	}
	ack, err := js.Publish(ctx, "brokertest.hello", []byte("hello"), jetstream.WithMsgID("m-1"))
	if err != nil || ack.Sequence != 1 {
		t.Fatalf("publish: %v, %+v; want sequence 1", err, ack)
	}
	nc.Close()

	pid := s.cmd.Process.Pid
	u, _ := url.Parse(s.URL)
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if c, err := net.DialTimeout("tcp", u.Host, time.Second); err == nil {
		c.Close()
		t.Errorf("%s still answers after Stop", u.Host)
	}
	if err := syscall.Kill(-pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("process group %d still exists after Stop (%v)", pid, err)
	}
	if _, err := os.Stat(s.Dir); !os.IsNotExist(err) {
		t.Errorf("%s still exists after Stop (%v)", s.Dir, err)
	}
	if sharedBefore && CheckJetStream(DefaultNATSURL) != nil {
		t.Errorf("the server at %s answered before and not after", DefaultNATSURL)
	}
	t.Logf("throwaway nats-server at %s: up in %v, a message stored in a stream, stopped", u.Host, started.Round(time.Millisecond))
}

// TestNATSNotInstalled: without nats-server anywhere, starting a throwaway
// server fails and says what to install.
func TestNATSNotInstalled(t *testing.T) {
	empty := t.TempDir()
	t.Setenv("PATH", empty)
	t.Setenv("GOPATH", empty)
	saved := natsDirs
	natsDirs = []string{empty}
	t.Cleanup(func() { natsDirs = saved })
	_, err := StartNATSServer()
	if err == nil || !strings.Contains(err.Error(), "install nats-server") {
		t.Fatalf("StartNATSServer without nats-server: %v; want what to install", err)
	}
	t.Logf("without nats-server: %v", err)
}

// TestNATSClusterKillAndStop starts a cluster of three servers built from
// the Go module, places a replicated stream's leader on n2, kills n2 with
// SIGKILL, and publishes again once another server leads; Stop then leaves
// no process and no directory.
func TestNATSClusterKillAndStop(t *testing.T) {
	t.Parallel()
	c, err := StartNATSCluster(3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	nc, err := nats.Connect(c.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "replicated", Subjects: []string{"replicated.>"}, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	if err := MoveLeaders(ctx, nc, js, "n2", "replicated"); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "replicated.a", []byte("a"), jetstream.WithMsgID("a")); err != nil {
		t.Fatal(err)
	}
	if err := c.Kill(c.Node("n2")); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	var ack *jetstream.PubAck
	for ack == nil {
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
		ack, err = js.Publish(pctx, "replicated.b", []byte("b"), jetstream.WithMsgID("b"))
		pcancel()
		if ctx.Err() != nil {
			t.Fatalf("no publish within 2 minutes of the kill: %v", err)
		}
	}
	l, err := LeadersOf(ctx, js, "replicated")
	if err != nil || l["stream replicated"] == "n2" || ack.Sequence != 2 {
		t.Fatalf("after the kill: leaders %v (%v), sequence %d; want another leader and sequence 2", l, err, ack.Sequence)
	}
	t.Logf("n2 killed; %s leads, the next publish acknowledged %v later", l["stream replicated"], time.Since(killed).Round(time.Millisecond))

	var pids []int
	for _, s := range c.Nodes {
		pids = append(pids, s.cmd.Process.Pid)
	}
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		if err := syscall.Kill(-pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("process group %d still exists after Stop (%v)", pid, err)
		}
	}
	if _, err := os.Stat(c.Dir); !os.IsNotExist(err) {
		t.Errorf("%s still exists after Stop (%v)", c.Dir, err)
	}
}
