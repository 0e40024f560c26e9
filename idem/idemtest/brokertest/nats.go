package brokertest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The NATS server with JetStream the tests use, in this order:
//
//   - IDEMGEN_TEST_NATS_URL, when set (and nothing else: unreachable, the
//     tests fail);
//   - with IDEMGEN_TEST_NATS_THROWAWAY=1, a throwaway server (below), even
//     when the local one answers;
//   - the local server at DefaultNATSURL, when it answers with JetStream;
//   - a throwaway nats-server -js from the machine, once per test binary, in a
//     temporary directory on a free port; Main stops it when the tests end,
//     and a watchdog process when the test binary exits any other way.
//
// Without any of them the tests fail and say what to install. They never
// skip.
const (
	// DefaultNATSURL is the local server.
	DefaultNATSURL = "nats://127.0.0.1:4222"
	// NATSURLEnv names the variable that points the tests at a server.
	NATSURLEnv = "IDEMGEN_TEST_NATS_URL"
	// NATSThrowawayEnv, set to 1, makes the tests start a throwaway server
	// even when the local one answers.
	NATSThrowawayEnv = "IDEMGEN_TEST_NATS_THROWAWAY"
)

const natsInstall = "install nats-server (https://github.com/nats-io/nats-server/releases, or `go install github.com/nats-io/nats-server/v2@latest`; " +
	"Debian/Ubuntu: sudo apt-get install nats-server; macOS: brew install nats-server): on PATH, the tests start a throwaway one themselves; " +
	"or start one with `nats-server -js`, or point " + NATSURLEnv + " at one"

var (
	natsOnce    sync.Once
	natsURL     string
	natsServer  *NATSServer
	natsProblem error
)

// NATSURL returns the URL of the NATS server with JetStream the tests use
// (see DefaultNATSURL, NATSURLEnv and NATSThrowawayEnv), or fails the test
// saying what to install. The first call decides, for the whole test binary.
// A package whose tests call it runs them through Main.
func NATSURL(t testing.TB) string {
	t.Helper()
	natsOnce.Do(findNATS)
	if natsProblem != nil {
		t.Fatalf("no NATS server with JetStream for the tests: %v", natsProblem)
	}
	return natsURL
}

func findNATS() {
	natsURL, natsProblem = serverChoice{
		urlEnv:       NATSURLEnv,
		throwawayEnv: NATSThrowawayEnv,
		local:        DefaultNATSURL,
		check:        CheckJetStream,
		badEnv:       "is not a reachable NATS server with JetStream",
		badLocal:     "the local server at %s does not answer with JetStream",
		start: func(why string) (string, error) {
			s, err := StartNATSServer()
			if err != nil {
				return "", err
			}
			natsServer = s
			fmt.Fprintf(os.Stderr, "brokertest: %s: started the throwaway nats-server at %s (in %s)\n", why, s.URL, s.Dir)
			atExit(func() {
				if err := s.Stop(); err != nil {
					fmt.Fprintf(os.Stderr, "brokertest: %v\n", err)
				}
			})
			return s.URL, nil
		},
	}.find()
}

// NATSThrowaway reports whether NATSURL's server is a throwaway server of
// this test binary.
func NATSThrowaway() bool {
	natsOnce.Do(findNATS)
	return natsServer != nil
}

// CheckJetStream reports whether url is a NATS server with JetStream.
func CheckJetStream(url string) error {
	nc, err := nats.Connect(url, nats.Timeout(3*time.Second))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err = js.AccountInfo(ctx)
	return err
}

// NATSServer is a throwaway nats-server with JetStream: its own directory
// and port, stopped and removed by Stop.
type NATSServer struct {
	URL string // nats://127.0.0.1:<port>
	Dir string // its temporary directory (the JetStream store)

	cmd      *exec.Cmd
	exited   chan struct{}
	watchdog *watchdog
	once     sync.Once
	err      error
}

// natsDirs are where packages put nats-server when it is not on PATH.
var natsDirs = []string{"/usr/sbin", "/usr/local/sbin", "/usr/local/bin", "/opt/homebrew/bin"}

// lookNATSServer finds nats-server on PATH or where packages and go install
// put it (Debian's is in /usr/sbin, not on a user's PATH).
func lookNATSServer() (string, error) {
	if p, err := exec.LookPath("nats-server"); err == nil {
		return p, nil
	}
	dirs := append([]string(nil), natsDirs...)
	if gopath := os.Getenv("GOPATH"); gopath != "" {
		dirs = append(dirs, filepath.Join(filepath.SplitList(gopath)[0], "bin"))
	} else if home, err := os.UserHomeDir(); err == nil {
		dirs = append(dirs, filepath.Join(home, "go", "bin"))
	}
	for _, dir := range dirs {
		p := filepath.Join(dir, "nats-server")
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("nats-server is not installed (not on PATH, nor in %s): %s", strings.Join(dirs, ", "), natsInstall)
}

// StartNATSServer starts a throwaway nats-server -js (from PATH, or
// lookNATSServer's directories) in a new
// temporary directory on a free port and waits until it answers with
// JetStream (or 20s pass). The caller must call Stop.
func StartNATSServer() (*NATSServer, error) {
	bin, err := lookNATSServer()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "idem-nats-")
	if err != nil {
		return nil, err
	}
	s := &NATSServer{Dir: dir, exited: make(chan struct{})}
	fail := func(err error) (*NATSServer, error) {
		if serr := s.Stop(); serr != nil {
			err = fmt.Errorf("%w; %v", err, serr)
		}
		return nil, err
	}
	ports, err := freePorts(1)
	if err != nil {
		return fail(err)
	}
	s.URL = fmt.Sprintf("nats://127.0.0.1:%d", ports[0])
	if err := s.spawn(bin, "-js", "-a", "127.0.0.1", "-p", strconv.Itoa(ports[0]), "-sd", filepath.Join(dir, "store")); err != nil {
		return fail(err)
	}
	if err := s.waitJetStream(bin, 20*time.Second); err != nil {
		return fail(err)
	}
	return s, nil
}

// waitJetStream waits until the server answers with JetStream, for at most
// timeout; it fails at once when the process exits.
func (s *NATSServer) waitJetStream(bin string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		err := CheckJetStream(s.URL)
		if err == nil {
			return nil
		}
		select {
		case <-s.exited:
			b, _ := os.ReadFile(filepath.Join(s.Dir, "server.out"))
			return fmt.Errorf("the throwaway %s exited before it answered (%v); its output:\n%s", bin, s.cmd.ProcessState, b)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the throwaway %s at %s did not answer with JetStream within %v: %v", bin, s.URL, timeout, err)
		}
	}
}

// spawn starts bin with args as the server's process, the leader of its own
// process group, its output in Dir/server.out, and the watchdog that stops
// it if the test binary exits without stopping it.
func (s *NATSServer) spawn(bin string, args ...string) error {
	out, err := os.Create(filepath.Join(s.Dir, "server.out"))
	if err != nil {
		return err
	}
	defer out.Close()
	s.cmd = exec.Command(bin, args...)
	s.cmd.Stdout, s.cmd.Stderr = out, out
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		s.cmd = nil
		return fmt.Errorf("start %s: %w", bin, err)
	}
	go func() { _ = s.cmd.Wait(); close(s.exited) }()
	if s.watchdog, err = startWatchdog("idem-nats-watchdog", s.cmd.Process.Pid, 0, s.Dir); err != nil {
		return fmt.Errorf("start the throwaway nats-server's watchdog: %w", err)
	}
	return nil
}

// Stop stops the server (SIGTERM; SIGKILL to its process group after 10s)
// and removes its directory. Calling it again does nothing.
func (s *NATSServer) Stop() error {
	s.once.Do(func() {
		var errs []error
		s.watchdog.disarm()
		if s.cmd != nil {
			_ = s.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-s.exited:
			case <-time.After(10 * time.Second):
				errs = append(errs, fmt.Errorf("the throwaway nats-server at %s did not stop within 10s of SIGTERM; killed", s.URL))
			}
			_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
			<-s.exited
		}
		if err := os.RemoveAll(s.Dir); err != nil {
			errs = append(errs, err)
		}
		s.err = errors.Join(errs...)
	})
	return s.err
}
