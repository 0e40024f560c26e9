package netproxy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
)

// echoServer answers every line with the same line, until the test ends.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			})
		}
	})
	return ln.Addr().String()
}

// start starts a proxy to addr for the test, closed when it ends.
func start(t *testing.T, addr string, oneWay time.Duration) *Proxy {
	t.Helper()
	p, err := Start(TCP(addr), oneWay)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// connect opens a connection through p for the test, closed when it ends.
func connect(t *testing.T, p *Proxy) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// medianEcho sends n lines on conn one at a time and returns the median time
// to get each back, checking that each comes back whole and in order.
func medianEcho(t *testing.T, conn net.Conn, n int) time.Duration {
	t.Helper()
	r := bufio.NewReader(conn)
	lat := make([]time.Duration, 0, n)
	for i := range n {
		msg := "line " + strconv.Itoa(i) + "\n"
		t0 := time.Now()
		if _, err := conn.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		got, err := r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
		if got != msg {
			t.Fatalf("echo %d: %q, want %q", i, got, msg)
		}
	}
	slices.Sort(lat)
	return lat[len(lat)/2]
}

// TestDelayAddsTheRoundTrip echoes through a proxy of 2 ms a round trip
// (1 ms each way): the median echo must take at least 1.5 ms (the proxy
// starts its sleeps earlier by how late it wakes, by at most half the delay
// each way) and not tens of milliseconds more, where a direct echo takes
// microseconds.
func TestDelayAddsTheRoundTrip(t *testing.T) {
	p := start(t, echoServer(t), time.Millisecond)
	med := medianEcho(t, connect(t, p), 50)
	t.Logf("median echo through a proxy of 2 ms a round trip: %s", med)
	if med < 1500*time.Microsecond || med > 50*time.Millisecond {
		t.Fatalf("median echo %s, want 2 ms (1.5 to 50)", med)
	}
}

// TestOrderUnderLoad writes many chunks from several connections at once
// through a delaying proxy: every byte comes back to its own connection, in
// order.
func TestOrderUnderLoad(t *testing.T) {
	p := start(t, echoServer(t), 200*time.Microsecond)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for c := range 8 {
		wg.Go(func() {
			conn, err := net.Dial("tcp", p.Addr())
			if err != nil {
				errs <- err
				return
			}
			defer conn.Close()
			var sent bytes.Buffer
			for i := range 200 {
				sent.WriteString("conn " + strconv.Itoa(c) + " chunk " + strconv.Itoa(i) + ";")
			}
			go func() {
				data := sent.Bytes()
				for len(data) > 0 { // in pieces, so that chunks interleave
					k := min(len(data), 97)
					if _, err := conn.Write(data[:k]); err != nil {
						return
					}
					data = data[k:]
				}
			}()
			got := make([]byte, sent.Len())
			if _, err := io.ReadFull(conn, got); err != nil {
				errs <- err
				return
			}
			if !bytes.Equal(got, sent.Bytes()) {
				errs <- errors.New("connection " + strconv.Itoa(c) + ": the echo differs from what was sent")
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestCut cuts two connections through a proxy without a delay: Cut counts
// them, both clients read the end of their connection, and a new connection
// through the same proxy works.
func TestCut(t *testing.T) {
	p := start(t, echoServer(t), 0)
	var conns []net.Conn
	for range 2 {
		c := connect(t, p)
		medianEcho(t, c, 3) // connected through to the server
		conns = append(conns, c)
	}
	if n := p.Cut(); n != 2 {
		t.Fatalf("Cut closed %d connections, want 2", n)
	}
	for i, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err := c.Read(make([]byte, 1))
		var ne net.Error
		if err == nil || errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("connection %d after Cut: read %v, want its end (EOF or a reset)", i, err)
		}
	}
	if n := p.Cut(); n != 0 {
		t.Fatalf("a second Cut closed %d connections, want 0", n)
	}
	medianEcho(t, connect(t, p), 3)
}

// TestDialFailure closes a client whose server cannot be reached.
func TestDialFailure(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close() // nothing listens there now
	c := connect(t, start(t, dead, 0))
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("read from a proxy whose server is down: %v, want EOF", err)
	}
}
