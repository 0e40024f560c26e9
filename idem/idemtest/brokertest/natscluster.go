package brokertest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// natsModule is the module nats-server is built from; the go.mod of the
// module the tests run in pins its version (a tool directive).
const natsModule = "github.com/nats-io/nats-server/v2"

var (
	natsBuildOnce sync.Once
	natsBuilt     string
	natsBuildErr  error
)

// NATSServerFromModule returns the path of a nats-server built from its Go
// module, at the version the go.mod of the tests' module pins: `go tool -n`
// builds it once into the build cache (minutes on an empty cache) and says
// where. A cluster test needs a server recent enough for its step-down
// requests to take a preferred leader (2.11 and later), which a machine's
// package may not be.
func NATSServerFromModule() (string, error) {
	natsBuildOnce.Do(func() {
		var stdout, stderr bytes.Buffer
		cmd := exec.Command("go", "tool", "-n", natsModule)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			natsBuildErr = fmt.Errorf("build nats-server from its module (go tool -n %s; the go.mod needs `tool %s`): %w\n%s", natsModule, natsModule, err, stderr.Bytes())
			return
		}
		natsBuilt = strings.TrimSpace(stdout.String())
	})
	return natsBuilt, natsBuildErr
}

// NATSCluster is a throwaway JetStream cluster of nats-server processes on
// loopback ports, each with its own directory (its store) under Dir.
type NATSCluster struct {
	// Nodes are the servers, named Names[i] (n1, n2, ...).
	Nodes []*NATSServer
	Names []string
	// Dir holds the nodes' directories.
	Dir string
}

// natsClusterConfig is a node's configuration file: its name, its client
// and cluster ports, its store, and routes to the other nodes.
const natsClusterConfig = `server_name: %q
listen: "127.0.0.1:%d"
jetstream {
  store_dir: %q
}
cluster {
  name: "idem-test"
  listen: "127.0.0.1:%d"
  routes: [%s]
}
`

// StartNATSCluster starts a JetStream cluster of n nats-server processes
// built from the Go module (NATSServerFromModule) and waits until every node
// answers with JetStream, that is until the cluster elected its meta
// leader (at most a minute). The caller must call Stop.
func StartNATSCluster(n int) (*NATSCluster, error) {
	bin, err := NATSServerFromModule()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "idem-nats-cluster-")
	if err != nil {
		return nil, err
	}
	c := &NATSCluster{Dir: dir}
	fail := func(err error) (*NATSCluster, error) {
		if serr := c.Stop(); serr != nil {
			err = fmt.Errorf("%w; %v", err, serr)
		}
		return nil, err
	}
	ports, err := freePorts(2 * n)
	if err != nil {
		return fail(err)
	}
	for i := range n {
		name := fmt.Sprintf("n%d", i+1)
		var routes []string
		for j := range n {
			if j != i {
				routes = append(routes, fmt.Sprintf("%q", fmt.Sprintf("nats-route://127.0.0.1:%d", ports[n+j])))
			}
		}
		s := &NATSServer{Dir: filepath.Join(dir, name), URL: fmt.Sprintf("nats://127.0.0.1:%d", ports[i]), exited: make(chan struct{})}
		c.Nodes, c.Names = append(c.Nodes, s), append(c.Names, name)
		if err := os.Mkdir(s.Dir, 0o755); err != nil {
			return fail(err)
		}
		conf := filepath.Join(s.Dir, "server.conf")
		cfg := fmt.Sprintf(natsClusterConfig, name, ports[i], filepath.Join(s.Dir, "store"), ports[n+i], strings.Join(routes, ", "))
		if err := os.WriteFile(conf, []byte(cfg), 0o644); err != nil {
			return fail(err)
		}
		if err := s.spawn(bin, "-c", conf); err != nil {
			return fail(err)
		}
	}
	for _, s := range c.Nodes {
		if err := s.waitJetStream(bin, time.Minute); err != nil {
			return fail(err)
		}
	}
	if err := c.waitPeers(); err != nil {
		return fail(err)
	}
	return c, nil
}

// waitPeers waits until the cluster places a stream on all its nodes: the
// meta leader may be elected before every peer has joined it.
func (c *NATSCluster) waitPeers() error {
	nc, err := nats.Connect(c.URL())
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	const probe = "idem_cluster_ready"
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: probe, Subjects: []string{probe}, Replicas: len(c.Nodes), Storage: jetstream.MemoryStorage})
		if err == nil {
			err = js.DeleteStream(ctx, probe)
		}
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the cluster does not place a stream on its %d nodes after a minute: %w", len(c.Nodes), err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// URL is the nodes' client URLs, comma-separated, as nats.Connect takes
// them: a client connects to one and moves to another when it goes.
func (c *NATSCluster) URL() string {
	urls := make([]string, len(c.Nodes))
	for i, s := range c.Nodes {
		urls[i] = s.URL
	}
	return strings.Join(urls, ",")
}

// Node returns the index of the node called name, or -1.
func (c *NATSCluster) Node(name string) int {
	for i, n := range c.Names {
		if n == name {
			return i
		}
	}
	return -1
}

// Kill kills node i with SIGKILL, as a crashed machine stops: no goodbye to
// its clients or to its peers. Its directory stays until Stop.
func (c *NATSCluster) Kill(i int) error {
	s := c.Nodes[i]
	if err := syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill %s: %w", c.Names[i], err)
	}
	select {
	case <-s.exited:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s has not exited 10s after SIGKILL", c.Names[i])
	}
}

// Stop stops every node and removes the cluster's directory.
func (c *NATSCluster) Stop() error {
	var errs []error
	for _, s := range c.Nodes {
		errs = append(errs, s.Stop())
	}
	errs = append(errs, os.RemoveAll(c.Dir))
	return errors.Join(errs...)
}

// Leaders are the servers that lead a stream's and its consumers' Raft
// groups, by what they lead ("stream S", "consumer S/C").
type Leaders map[string]string

// LeadersOf asks the cluster which servers lead stream and its consumers.
func LeadersOf(ctx context.Context, js jetstream.JetStream, stream string, consumers ...string) (Leaders, error) {
	l := Leaders{}
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", stream, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", stream, err)
	}
	if info.Cluster != nil {
		l["stream "+stream] = info.Cluster.Leader
	}
	for _, name := range consumers {
		cons, err := s.Consumer(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("consumer %s/%s: %w", stream, name, err)
		}
		ci, err := cons.Info(ctx)
		if err != nil {
			return nil, fmt.Errorf("consumer %s/%s: %w", stream, name, err)
		}
		if ci.Cluster != nil {
			l["consumer "+stream+"/"+name] = ci.Cluster.Leader
		}
	}
	return l, nil
}

// MoveLeaders makes server the leader of stream and of its consumers: each
// group whose leader is another server is asked to step down in favour of
// server (NATS server 2.11 and later take the preferred placement), until
// all are led by it or a minute passes.
func MoveLeaders(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, server, stream string, consumers ...string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	req, _ := json.Marshal(map[string]any{"placement": map[string]string{"preferred": server}})
	for {
		l, err := LeadersOf(ctx, js, stream, consumers...)
		if err == nil {
			moved := true
			for what, leader := range l {
				if leader == server {
					continue
				}
				moved = false
				subject := "$JS.API.STREAM.LEADER.STEPDOWN." + stream
				if c, ok := strings.CutPrefix(what, "consumer "+stream+"/"); ok {
					subject = "$JS.API.CONSUMER.LEADER.STEPDOWN." + stream + "." + c
				}
				if _, err := nc.RequestWithContext(ctx, subject, req); err != nil && ctx.Err() != nil {
					return fmt.Errorf("move the leader of %s to %s: %w", what, server, err)
				}
			}
			if moved {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the leaders of %s are not all %s after a minute (%v): %w", stream, server, l, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
