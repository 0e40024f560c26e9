package idemtest

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"

	"github.com/idemgen/idemgen/idem"
)

// Logger returns a logger that writes the runtime's slog records to t.Log:
// shown with go test -v, or when t fails, and never buried among a passing
// run's output. Records logged after t ended are dropped. The generated
// tests' suites give it to the wrapper (idem.WithLogger) before their own
// options.
func Logger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(LogWriter(t), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// WithTestLogger is idem.WithLogger(Logger(t)).
func WithTestLogger(t testing.TB) idem.Option { return idem.WithLogger(Logger(t)) }

// LogWriter returns a writer that hands each Write, without its trailing
// newline, to t.Log until t ends, and drops what is written after: a relay,
// a consumer or a client library may still log from its own goroutine while
// the test's cleanup stops it, and testing panics (failing the whole test
// binary, with no test named) on a t.Log after the test has completed.
func LogWriter(t testing.TB) io.Writer {
	w := &testWriter{t: t}
	t.Cleanup(w.close)
	return w
}

// testWriter is LogWriter's writer.
type testWriter struct {
	mu   sync.Mutex
	t    testing.TB
	done bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(string(bytes.TrimSuffix(p, []byte("\n"))))
	}
	return len(p), nil
}

func (w *testWriter) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.done = true
}

// RunQuietly runs m's tests with slog.Default writing to a buffer, which it
// prints to stderr when a test failed or with go test -v, and returns m.Run's
// code: the records of runtime parts built without WithLogger (as in
// production) stay out of a passing run's output. For a TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(idemtest.RunQuietly(m)) }
func RunQuietly(m *testing.M) int {
	var buf syncBuffer
	saved := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	defer slog.SetDefault(saved)
	code := m.Run()
	if out := buf.Bytes(); len(out) > 0 && (code != 0 || testing.Verbose()) {
		fmt.Fprintf(os.Stderr, "the runtime's log records (slog.Default) during the tests:\n%s", out)
	}
	return code
}

// syncBuffer is a bytes.Buffer for concurrent writers.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes())
}
