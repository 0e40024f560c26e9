package idemtest

import (
	"bytes"
	"log/slog"
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
	w := &testWriter{t: t}
	t.Cleanup(w.close)
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// WithTestLogger is idem.WithLogger(Logger(t)).
func WithTestLogger(t testing.TB) idem.Option { return idem.WithLogger(Logger(t)) }

// testWriter hands each record, one Write, to t.Log until t ends.
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
