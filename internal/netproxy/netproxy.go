// Package netproxy is a TCP proxy for tests and benchmarks: it forwards each
// connection it accepts on 127.0.0.1 to a server, optionally holding every
// chunk of bytes for a fixed delay each way (a network between client and
// server), and can cut every connection it carries at once (the server
// dropping its clients) without touching the server. The benchmark puts one
// in front of PostgreSQL to add round trips (bench's network part); the soak
// puts one between its child processes and NATS to disconnect them.
//
// With a delay, what the client writes reaches the server oneWay after it was
// written, and the answer reaches the client oneWay after the server sent
// it, so a round trip costs 2×oneWay more than without the proxy. Bytes keep
// their order; the bandwidth is not limited (a chunk read is forwarded
// whole).
//
// No library for this is among the packages this project may use (no
// toxiproxy Go module), and its core is small: a reader per connection and
// direction timestamps each chunk as it arrives and queues it; one sender
// for the whole proxy waits until the oldest chunk is due and writes every
// chunk that is due then. Every chunk has the same delay, so one queue in
// arrival order is also in due order, and one sender keeps the proxy's own
// CPU low: a sender per connection, 32 at 16 workers, cost about 80 µs of
// CPU a chunk on a 2-core machine (thread hand-offs around each sleep),
// which made every cell past a few workers CPU-bound on the proxy instead
// of the round trips it is there to add. The sender waits in nanosleep(2),
// not in time.Sleep: Go's timers can wake about a millisecond late whatever
// the duration (a 250 µs Sleep measured 1.09 ms), while nanosleep overshoots
// by tens of microseconds. The delays are that much longer than asked, more
// on a busier machine; the sender learns how late it wakes and starts its
// sleeps that much earlier (at most half the delay), so that on average the
// delay is what was asked. A sender blocked by a full socket would hold up
// every connection; the benchmark's clients always read their answers, and
// the messages are small.
package netproxy

import (
	"context"
	"net"
	"sync"
	"syscall"
	"time"
)

// DialFunc connects to the server a proxy forwards to.
type DialFunc func(ctx context.Context) (net.Conn, error)

// TCP dials addr (host:port) over TCP.
func TCP(addr string) DialFunc {
	var d net.Dialer
	return func(ctx context.Context) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
}

// Proxy forwards the connections it accepts to the server its DialFunc
// reaches.
type Proxy struct {
	ln     net.Listener
	oneWay time.Duration
	dial   DialFunc

	mu     sync.Mutex
	pairs  map[net.Conn]net.Conn // client → server, while both are open
	queue  []chunk               // in arrival order, so in due order
	ready  chan struct{}         // has a value when the queue went from empty to not
	closed chan struct{}
	wg     sync.WaitGroup
}

// chunk is what one read returned, where it goes, and when it is due there.
type chunk struct {
	data     []byte
	dst, src net.Conn
	due      time.Time
}

// Start listens on a free port of 127.0.0.1 and forwards every connection
// to the server that dial reaches, oneWay later each way (0: at once).
func Start(dial DialFunc, oneWay time.Duration) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, oneWay: max(oneWay, 0), dial: dial, pairs: map[net.Conn]net.Conn{},
		ready: make(chan struct{}, 1), closed: make(chan struct{})}
	p.wg.Add(1)
	go p.accept()
	if p.oneWay > 0 {
		p.wg.Add(1)
		go p.send()
	}
	return p, nil
}

// Addr is the proxy's address, host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

func (p *Proxy) accept() {
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

func (p *Proxy) serve(client net.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	server, err := p.dial(ctx)
	cancel()
	if err != nil {
		client.Close()
		return
	}
	for _, c := range []net.Conn{client, server} {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetNoDelay(true)
		}
	}
	p.mu.Lock()
	p.pairs[client] = server
	p.mu.Unlock()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.read(server, client) }()
	go func() { defer wg.Done(); p.read(client, server) }()
	wg.Wait()
	p.mu.Lock()
	delete(p.pairs, client)
	p.mu.Unlock()
}

// read forwards what src sends to dst: at once without a delay, else queued,
// each chunk due oneWay after it was read. When src ends, both connections
// are closed (what was queued for dst is dropped with it, as a reset would).
func (p *Proxy) read(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if p.oneWay == 0 {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			} else {
				p.enqueue(chunk{data: append([]byte(nil), buf[:n]...), dst: dst, src: src, due: time.Now().Add(p.oneWay)})
			}
		}
		if err != nil { // EOF, a reset or closed: the deferred closes end the other side
			return
		}
	}
}

func (p *Proxy) enqueue(c chunk) {
	p.mu.Lock()
	p.queue = append(p.queue, c)
	first := len(p.queue) == 1
	p.mu.Unlock()
	if first {
		select {
		case p.ready <- struct{}{}:
		default:
		}
	}
}

// early is how far ahead of its time a chunk may go, so that a wake-up a
// little early does not sleep again for microseconds.
const early = 20 * time.Microsecond

// send writes each queued chunk when it is due: it sleeps until the oldest
// is, then writes every chunk due by then, in order.
func (p *Proxy) send() {
	defer p.wg.Done()
	var due []chunk
	var late time.Duration // the wake-ups' average lateness
	for {
		p.mu.Lock()
		if len(p.queue) == 0 {
			p.mu.Unlock()
			select {
			case <-p.ready:
				continue
			case <-p.closed:
				return
			}
		}
		next := p.queue[0].due
		p.mu.Unlock()
		if d := time.Until(next) - late; d > 0 {
			nanosleep(d)
			// The sleeps start earlier by how late the wake-ups come, on
			// average: each wake-up after its chunk was due moves the next
			// ones earlier by an eighth of the miss, each one before moves
			// them later.
			late = max(0, min(late+time.Since(next)/8, p.oneWay/2))
		}
		now := time.Now()
		p.mu.Lock()
		n := 0
		for n < len(p.queue) && !p.queue[n].due.After(now.Add(early)) {
			n++
		}
		due = append(due[:0], p.queue[:n]...)
		p.queue = append(p.queue[:0], p.queue[n:]...)
		p.mu.Unlock()
		for i, c := range due {
			if _, err := c.dst.Write(c.data); err != nil {
				c.src.Close() // its reader ends and closes dst
			}
			due[i] = chunk{}
		}
	}
}

// Cut closes every connection the proxy carries, both sides, and returns how
// many client connections that was. The proxy keeps accepting new ones.
func (p *Proxy) Cut() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.pairs)
	for client, server := range p.pairs {
		client.Close()
		server.Close()
		delete(p.pairs, client)
	}
	return n
}

// Close stops listening, closes every connection and waits for the copies
// to end.
func (p *Proxy) Close() {
	p.ln.Close()
	close(p.closed)
	p.Cut()
	p.wg.Wait()
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
