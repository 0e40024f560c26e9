package main

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// delayProxy is a TCP proxy in front of PostgreSQL that adds a fixed delay
// to every byte each way, as a network between the client and the server
// would: what the client writes reaches the server oneWay after it was
// written, and the answer reaches the client oneWay after the server sent
// it, so a round trip costs 2×oneWay more than on the socket. Bytes keep
// their order; the bandwidth is not limited (a chunk read is forwarded
// whole). It listens on 127.0.0.1 and dials the server the way the
// benchmark's pools do (the Unix socket), so that the server sees the same
// kind of connection and pg_hba.conf need not allow TCP.
//
// No library for this is among the packages this project may use (no
// toxiproxy Go module), and its core is the 80 lines below: a reader per
// direction timestamps each chunk as it arrives, and a writer sends it
// when its time has come. The writer waits in nanosleep(2) on its own
// thread, not in time.Sleep: on this benchmark's machine Go's timers wake
// about a millisecond late whatever the duration (a 250 µs Sleep takes
// 1.09 ms), while nanosleep overshoots by tens of microseconds (70 µs
// here at a load average of 18). The delays are that much longer than
// asked, more on a busier machine, never shorter; network.go reports the
// round trip measured through each proxy, and the tables use it.
type delayProxy struct {
	ln     net.Listener
	oneWay time.Duration
	dial   func(ctx context.Context) (net.Conn, error)

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// startDelayProxy listens on a free port of 127.0.0.1 and forwards every
// connection to the server that dial reaches, oneWay later each way.
func startDelayProxy(oneWay time.Duration, dial func(ctx context.Context) (net.Conn, error)) (*delayProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &delayProxy{ln: ln, oneWay: oneWay, dial: dial, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// addr is the proxy's address, host:port.
func (p *delayProxy) addr() string { return p.ln.Addr().String() }

func (p *delayProxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.serve(client)
		}()
	}
}

func (p *delayProxy) track(c net.Conn, add bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if add {
		p.conns[c] = struct{}{}
	} else {
		delete(p.conns, c)
	}
}

func (p *delayProxy) serve(client net.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	server, err := p.dial(ctx)
	cancel()
	if err != nil {
		client.Close()
		return
	}
	if tc, ok := client.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	p.track(client, true)
	p.track(server, true)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pipe(server, client) }()
	go func() { defer wg.Done(); p.pipe(client, server) }()
	wg.Wait()
	p.track(client, false)
	p.track(server, false)
}

// chunk is what one read returned, and when it is due at the other end.
type chunk struct {
	data []byte
	due  time.Time
}

// pipe copies src to dst, each chunk oneWay after it was read. When either
// side ends, both connections are closed.
func (p *delayProxy) pipe(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	queue := make(chan chunk, 1024)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for c := range queue {
			if d := time.Until(c.due); d > 0 {
				nanosleep(d)
			}
			if _, err := dst.Write(c.data); err != nil {
				src.Close()
				for range queue { // drain until the reader ends
				}
				return
			}
		}
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			queue <- chunk{data: append([]byte(nil), buf[:n]...), due: time.Now().Add(p.oneWay)}
		}
		if err != nil { // EOF, a reset or closed: the deferred closes end the other side
			break
		}
	}
	close(queue)
	<-done
}

// close stops listening, closes every connection and waits for the copies
// to end.
func (p *delayProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// serverDialer returns a dialer of the server that the database URL names,
// as pgx reaches it: its Unix socket, or host:port over TCP.
func serverDialer(dbURL string) (func(ctx context.Context) (net.Conn, error), error) {
	cfg, err := pgconn.ParseConfig(dbURL)
	if err != nil {
		return nil, err
	}
	network, address := "tcp", net.JoinHostPort(cfg.Host, fmt.Sprint(cfg.Port))
	if strings.HasPrefix(cfg.Host, "/") {
		network, address = "unix", fmt.Sprintf("%s/.s.PGSQL.%d", cfg.Host, cfg.Port)
	}
	var d net.Dialer
	return func(ctx context.Context) (net.Conn, error) { return d.DialContext(ctx, network, address) }, nil
}

// nanosleep waits d in the nanosleep system call: the goroutine's thread
// blocks in the kernel (the Go scheduler runs the others meanwhile) and
// wakes at the kernel's high-resolution timer, not Go's.
func nanosleep(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	for {
		var rem syscall.Timespec
		if err := syscall.Nanosleep(&ts, &rem); err != syscall.EINTR {
			return
		}
		ts = rem
	}
}
