package brokertest

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemgen/idemgen/idem/idemtest"
)

// The RabbitMQ node the tests use, in this order:
//
//   - IDEMGEN_TEST_AMQP_URL, when set (and nothing else: unreachable, the
//     tests fail);
//   - with IDEMGEN_TEST_RABBITMQ_THROWAWAY=1, a throwaway node (below), even
//     when the local one answers: how CI proves that path;
//   - the local node at DefaultAMQPURL, when it answers;
//   - a throwaway node started from the machine's rabbitmq-server, once per
//     test binary, in a temporary directory on free ports, with an epmd of
//     its own; Main stops it when the tests end, and a watchdog process
//     when the test binary exits any other way.
//
// Without any of them the tests fail and say what to install. They never
// skip.
const (
	// DefaultAMQPURL is the local node with the default guest account.
	DefaultAMQPURL = "amqp://guest:guest@127.0.0.1:5672/"
	// AMQPURLEnv names the variable that points the tests at a node.
	AMQPURLEnv = "IDEMGEN_TEST_AMQP_URL"
	// RabbitMQThrowawayEnv, set to 1, makes the tests start a throwaway node
	// even when the local one answers.
	RabbitMQThrowawayEnv = "IDEMGEN_TEST_RABBITMQ_THROWAWAY"
)

// rabbitInstall says what to install; the tests print it whenever they find
// no node and cannot start one.
const rabbitInstall = "install RabbitMQ (Debian/Ubuntu: sudo apt-get install rabbitmq-server; " +
	"Fedora: sudo dnf install rabbitmq-server; macOS: brew install rabbitmq): with rabbitmq-server on the machine " +
	"the tests start a throwaway node themselves; or start a node on 127.0.0.1:5672 with the guest account, " +
	"or point " + AMQPURLEnv + " at one"

var (
	rabbitOnce    sync.Once
	rabbitURL     string
	rabbitNode    *RabbitMQNode // the throwaway node, if one was started
	rabbitProblem error

	stopsMu sync.Mutex
	stops   []func()
)

// Main runs a test binary's tests and then stops the throwaway servers they
// started (RabbitMQURL's node), so that the binary exits after they are gone.
// A package whose tests call RabbitMQURL calls it from its TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(brokertest.Main(m)) }
//
// Without it (or when the binary dies: a panic, a timeout, SIGKILL) the node's
// watchdog stops it once the binary has exited. The tests run through
// idemtest.RunQuietly: the runtime's records are shown on failure or with -v.
func Main(m *testing.M) int {
	code := idemtest.RunQuietly(m)
	stopsMu.Lock()
	defer stopsMu.Unlock()
	for i := len(stops) - 1; i >= 0; i-- {
		stops[i]()
	}
	stops = nil
	return code
}

func atExit(stop func()) {
	stopsMu.Lock()
	stops = append(stops, stop)
	stopsMu.Unlock()
}

// RabbitMQURL returns the AMQP URL of the node the tests use (see
// DefaultAMQPURL, AMQPURLEnv and RabbitMQThrowawayEnv), or fails the test
// saying what to install. The first call decides, for the whole test binary;
// it may take seconds when it starts a throwaway node.
func RabbitMQURL(t testing.TB) string {
	t.Helper()
	rabbitOnce.Do(findRabbitMQ)
	if rabbitProblem != nil {
		t.Fatalf("no RabbitMQ for the tests: %v", rabbitProblem)
	}
	return rabbitURL
}

func findRabbitMQ() {
	rabbitURL, rabbitProblem = serverChoice{
		urlEnv:       AMQPURLEnv,
		throwawayEnv: RabbitMQThrowawayEnv,
		local:        DefaultAMQPURL,
		check:        dialAMQP,
		badEnv:       "is not reachable",
		badLocal:     "the local node at %s is not reachable",
		start: func(why string) (string, error) {
			node, err := StartRabbitMQNode()
			if err != nil {
				return "", err
			}
			rabbitNode = node
			// Said once per test binary, so that a run's output shows which node it used.
			fmt.Fprintf(os.Stderr, "brokertest: %s: started the throwaway RabbitMQ node %s at %s (in %s)\n", why, node.Name, redactURL(node.URL), node.Dir)
			atExit(func() {
				if err := node.Stop(); err != nil {
					fmt.Fprintf(os.Stderr, "brokertest: %v\n", err)
				}
			})
			return node.URL, nil
		},
	}.find()
}

// serverChoice is how the tests choose their server of one kind: urlEnv's
// URL when it is set (and nothing else); otherwise, unless throwawayEnv=1,
// the local server when check accepts it; otherwise a throwaway one.
type serverChoice struct {
	urlEnv, throwawayEnv string
	local                string // the local server's URL
	check                func(url string) error
	badEnv               string // how urlEnv's server fails: "is not reachable"
	badLocal             string // how the local one fails, with a %s for its URL
	// start starts a throwaway server (why says why, for its message) and
	// arranges for atExit to stop it, and returns its URL.
	start func(why string) (string, error)
}

// find returns the URL of the chosen server, or why there is none.
func (c serverChoice) find() (string, error) {
	if url := os.Getenv(c.urlEnv); url != "" {
		if err := c.check(url); err != nil {
			return url, fmt.Errorf("%s=%s %s: %v", c.urlEnv, redactURL(url), c.badEnv, err)
		}
		return url, nil
	}
	why := c.throwawayEnv + "=1"
	if os.Getenv(c.throwawayEnv) != "1" {
		err := c.check(c.local)
		if err == nil {
			return c.local, nil
		}
		why = fmt.Sprintf(c.badLocal, redactURL(c.local)) + fmt.Sprintf(" (%v)", err)
	}
	url, err := c.start(why)
	if err != nil {
		return "", fmt.Errorf("%s; %w", why, err)
	}
	return url, nil
}

// RabbitMQThrowaway reports whether RabbitMQURL's node is a throwaway node
// of this test binary.
func RabbitMQThrowaway() bool {
	rabbitOnce.Do(findRabbitMQ)
	return rabbitNode != nil
}

func dialAMQP(url string) error {
	conn, err := amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(3 * time.Second)})
	if err != nil {
		return err
	}
	return conn.Close()
}

// redactURL hides the password of a URL, as psql does.
func redactURL(url string) string {
	scheme, rest, ok := strings.Cut(url, "://")
	if !ok {
		return url
	}
	userinfo, host, ok := strings.Cut(rest, "@")
	if !ok {
		return url
	}
	if user, _, ok := strings.Cut(userinfo, ":"); ok {
		return scheme + "://" + user + ":xxxxx@" + host
	}
	return url
}

// RabbitMQCtl runs rabbitmqctl with args against RabbitMQURL's node (the
// throwaway node with -n and its cookie, otherwise the machine's default
// node) and returns its standard output, or fails the test.
func RabbitMQCtl(t testing.TB, args ...string) []byte {
	t.Helper()
	RabbitMQURL(t)
	if rabbitNode != nil {
		out, err := rabbitNode.Ctl(args...)
		if err != nil {
			t.Fatalf("rabbitmqctl -n %s %s: %v", rabbitNode.Name, strings.Join(args, " "), err)
		}
		return out
	}
	// The machine's own node: its rabbitmqctl as installed (Debian's
	// wrapper runs it as the rabbitmq user, with that node's cookie).
	ctl, err := lookRabbitMQTool("rabbitmqctl", rabbitDirs, false)
	if err != nil {
		t.Fatalf("the test runs rabbitmqctl against the node at %s: %v", redactURL(rabbitURL), err)
	}
	out, err := runCtl(exec.Command(ctl, args...))
	if err != nil {
		t.Fatalf("rabbitmqctl %s: %v", strings.Join(args, " "), err)
	}
	return out
}

// CloseRabbitMQConnections closes, from the server side (rabbitmqctl
// close_connection on RabbitMQURL's node), every connection whose
// connection_name starts with prefix, and returns how many it closed.
func CloseRabbitMQConnections(t testing.TB, prefix string) int {
	t.Helper()
	out := RabbitMQCtl(t, "list_connections", "-q", "--no-table-headers", "pid", "client_properties")
	// Each line: <pid>\t[{"connection_name","name"},...]
	n := 0
	for _, line := range strings.Split(string(out), "\n") {
		pid, props, ok := strings.Cut(line, "\t")
		if !ok || !strings.Contains(props, `{"connection_name","`+prefix) {
			continue
		}
		RabbitMQCtl(t, "close_connection", pid, "closed by "+t.Name())
		n++
	}
	return n
}

func runCtl(cmd *exec.Cmd) ([]byte, error) {
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("%w: %s%s", err, out, stderr.Bytes())
	}
	return out, nil
}

// rabbitDirs are where RabbitMQ's scripts live when they are not on PATH:
// Debian puts rabbitmq-server in /usr/sbin, not on a user's PATH.
var rabbitDirs = []string{"/usr/sbin", "/usr/local/sbin", "/opt/homebrew/sbin", "/usr/lib/rabbitmq/bin"}

// lookRabbitMQTool finds one of RabbitMQ's scripts on PATH or in dirs. Debian's
// /usr/sbin entries are a wrapper that runs the script as the rabbitmq user
// (and refuses other users); with unwrap, a wrapper is replaced by the script
// beside it, which runs as the caller.
func lookRabbitMQTool(name string, dirs []string, unwrap bool) (string, error) {
	path, err := exec.LookPath(name)
	if err != nil {
		for _, dir := range dirs {
			p := filepath.Join(dir, name)
			if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
				path = p
				break
			}
		}
	}
	if path == "" {
		return "", fmt.Errorf("%s is not installed (not on PATH, nor in %s): %s", name, strings.Join(dirs, ", "), rabbitInstall)
	}
	if real, err := filepath.EvalSymlinks(path); err == nil && unwrap {
		if filepath.Base(real) == "rabbitmq-script-wrapper" {
			if script, err := filepath.EvalSymlinks(filepath.Join(filepath.Dir(real), name)); err == nil {
				return script, nil
			}
		}
	}
	return path, nil
}

// RabbitMQNode is a throwaway RabbitMQ node: its own directory, ports,
// Erlang cookie and epmd, stopped and removed by Stop.
type RabbitMQNode struct {
	URL  string // amqp://guest:guest@127.0.0.1:<port>/
	Name string // the Erlang node name, <unique>@localhost
	Dir  string // its temporary directory

	ctl    string
	env    []string
	server *exec.Cmd
	exited chan struct{} // closed when the server process has exited
	epmd   *exec.Cmd     // nil when it uses the machine's epmd
	// watchdog stops the node and its epmd if the test binary dies before
	// Stop runs.
	watchdog *watchdog
	once     sync.Once
	err      error
}

// StartRabbitMQNode starts a throwaway node from the machine's rabbitmq-server
// and waits until it accepts AMQP connections (or 90s pass). The node runs in
// a new temporary directory (mnesia, logs, config, enabled plugins: none, so
// no management plugin; HOME, so its own .erlang.cookie) with free ports for
// AMQP, Erlang distribution and its own epmd (when the machine has an epmd
// binary; otherwise it registers with the machine's epmd, which it never
// stops). The caller must call Stop.
func StartRabbitMQNode() (*RabbitMQNode, error) {
	server, err := lookRabbitMQTool("rabbitmq-server", rabbitDirs, true)
	if err != nil {
		return nil, err
	}
	ctl := filepath.Join(filepath.Dir(server), "rabbitmqctl")
	dir, err := os.MkdirTemp("", "idem-rabbitmq-")
	if err != nil {
		return nil, err
	}
	n := &RabbitMQNode{Dir: dir, ctl: ctl, exited: make(chan struct{})}
	fail := func(err error) (*RabbitMQNode, error) {
		if serr := n.Stop(); serr != nil {
			err = fmt.Errorf("%w; %v", err, serr)
		}
		return nil, err
	}
	ports, err := freePorts(3)
	if err != nil {
		return fail(err)
	}
	amqpPort, distPort, epmdPort := ports[0], ports[1], ports[2]
	var b [4]byte
	_, _ = rand.Read(b[:])
	n.Name = fmt.Sprintf("idemtest-%d-%s@localhost", os.Getpid(), hex.EncodeToString(b[:]))
	n.URL = fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", amqpPort)

	for _, d := range []string{"mnesia", "log", "home"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o700); err != nil {
			return fail(err)
		}
	}
	files := map[string]string{
		"enabled_plugins": "[].\n",
		// Nothing from /etc/rabbitmq: an empty rabbitmq-env.conf of its own.
		"rabbitmq-env.conf": "",
		"rabbitmq.conf":     "# A throwaway node for idem's tests; the listener comes from RABBITMQ_NODE_IP_ADDRESS and RABBITMQ_NODE_PORT.\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			return fail(err)
		}
	}

	env := []string{}
	for _, kv := range os.Environ() {
		// The caller's RabbitMQ and Erlang settings are for their own node.
		if k, _, _ := strings.Cut(kv, "="); !strings.HasPrefix(k, "RABBITMQ_") && !strings.HasPrefix(k, "ERL_") && k != "HOME" {
			env = append(env, kv)
		}
	}
	env = append(env,
		"HOME="+filepath.Join(dir, "home"),
		"RABBITMQ_NODENAME="+n.Name,
		"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
		"RABBITMQ_NODE_PORT="+strconv.Itoa(amqpPort),
		"RABBITMQ_DIST_PORT="+strconv.Itoa(distPort),
		"RABBITMQ_MNESIA_BASE="+filepath.Join(dir, "mnesia"),
		"RABBITMQ_LOG_BASE="+filepath.Join(dir, "log"),
		"RABBITMQ_CONFIG_FILE="+filepath.Join(dir, "rabbitmq.conf"),
		"RABBITMQ_ADVANCED_CONFIG_FILE="+filepath.Join(dir, "advanced.config"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(dir, "enabled_plugins"),
		"RABBITMQ_CONF_ENV_FILE="+filepath.Join(dir, "rabbitmq-env.conf"),
		"RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=-kernel inet_dist_use_interface {127,0,0,1}",
	)
	if epmd, err := lookEpmd(); err == nil {
		n.epmd = exec.Command(epmd, "-port", strconv.Itoa(epmdPort), "-address", "127.0.0.1")
		n.epmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := n.epmd.Start(); err != nil {
			n.epmd = nil
			return fail(fmt.Errorf("start %s: %w", epmd, err))
		}
		if err := waitTCP(fmt.Sprintf("127.0.0.1:%d", epmdPort), 10*time.Second); err != nil {
			return fail(fmt.Errorf("the throwaway node's epmd: %w", err))
		}
		env = append(env, "ERL_EPMD_PORT="+strconv.Itoa(epmdPort), "ERL_EPMD_ADDRESS=127.0.0.1")
	}
	n.env = env

	out, err := os.Create(filepath.Join(dir, "server.out"))
	if err != nil {
		return fail(err)
	}
	defer out.Close()
	n.server = exec.Command(server)
	n.server.Dir = dir
	n.server.Env = env
	n.server.Stdout, n.server.Stderr = out, out
	// Its own process group: Stop can kill the Erlang VM the script starts
	// even if the script itself is gone.
	n.server.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := n.server.Start(); err != nil {
		n.server = nil
		return fail(fmt.Errorf("start %s: %w", server, err))
	}
	go func() { _ = n.server.Wait(); close(n.exited) }()
	if err := n.startWatchdog(); err != nil {
		return fail(err)
	}

	deadline := time.Now().Add(90 * time.Second)
	for {
		err := dialAMQP(n.URL)
		if err == nil {
			return n, nil
		}
		select {
		case <-n.exited:
			return fail(fmt.Errorf("the throwaway node %s (%s) exited before it accepted connections (%v); its output:\n%s",
				n.Name, server, n.server.ProcessState, n.outputTail()))
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fail(fmt.Errorf("the throwaway node %s (%s) did not accept AMQP connections at %s within 90s (%v); its output:\n%s",
				n.Name, server, n.URL, err, n.outputTail()))
		}
	}
}

// Ctl runs rabbitmqctl against the node and returns its standard output.
func (n *RabbitMQNode) Ctl(args ...string) ([]byte, error) {
	cmd := exec.Command(n.ctl, append([]string{"-n", n.Name}, args...)...)
	cmd.Env = n.env
	cmd.Dir = n.Dir
	return runCtl(cmd)
}

// Stop stops the node (SIGTERM, which the script turns into a clean
// shutdown; SIGKILL to its process group after 20s), then its epmd, and
// removes its directory. Calling it again does nothing.
func (n *RabbitMQNode) Stop() error {
	n.once.Do(func() {
		var errs []error
		// Stop does the watchdog's work itself; the watchdog must not act on
		// pids that are reaped below.
		n.watchdog.disarm()
		if n.server != nil {
			_ = n.server.Process.Signal(syscall.SIGTERM)
			select {
			case <-n.exited:
			case <-time.After(20 * time.Second):
				errs = append(errs, fmt.Errorf("the throwaway node %s did not stop within 20s of SIGTERM; killed", n.Name))
			}
			// Whatever of the group is left (the VM, its helpers) goes too.
			_ = syscall.Kill(-n.server.Process.Pid, syscall.SIGKILL)
			<-n.exited
		}
		if n.epmd != nil {
			_ = n.epmd.Process.Kill()
			_ = n.epmd.Wait()
		}
		if err := os.RemoveAll(n.Dir); err != nil {
			errs = append(errs, err)
		}
		n.err = errors.Join(errs...)
	})
	return n.err
}

func (n *RabbitMQNode) startWatchdog() error {
	epmdPid := 0
	if n.epmd != nil {
		epmdPid = n.epmd.Process.Pid
	}
	w, err := startWatchdog("idem-rabbitmq-watchdog", n.server.Process.Pid, epmdPid, n.Dir)
	if err != nil {
		return fmt.Errorf("start the throwaway node's watchdog: %w", err)
	}
	n.watchdog = w
	return nil
}

func (n *RabbitMQNode) outputTail() string {
	b, _ := os.ReadFile(filepath.Join(n.Dir, "server.out"))
	if logs, _ := filepath.Glob(filepath.Join(n.Dir, "log", "*.log")); len(logs) > 0 {
		for _, l := range logs {
			lb, _ := os.ReadFile(l)
			b = append(append(b, "\n--- "+filepath.Base(l)+"\n"...), lb...)
		}
	}
	const max = 4000
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return string(b)
}

// lookEpmd finds epmd on PATH or beside erl.
func lookEpmd() (string, error) {
	if p, err := exec.LookPath("epmd"); err == nil {
		return p, nil
	}
	erl, err := exec.LookPath("erl")
	if err != nil {
		return "", err
	}
	if real, err := filepath.EvalSymlinks(erl); err == nil {
		erl = real
	}
	p := filepath.Join(filepath.Dir(erl), "epmd")
	if _, err := os.Stat(p); err != nil {
		return "", err
	}
	return p, nil
}

// freePorts returns n distinct free TCP ports on 127.0.0.1.
func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func waitTCP(addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			return c.Close()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("nothing listens on %s after %v: %w", addr, timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
