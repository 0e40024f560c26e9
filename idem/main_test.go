package idem

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
)

// TestMain keeps a passing run quiet: the records of inboxes built without
// WithLogger (slog.Default, as in production) are kept, and printed when a
// test failed or with go test -v, instead of going to stderr on every run.
// Tests that care about the records use WithLogger with their own handler;
// the generated tests' suites route theirs to t.Log (idemtest.Logger).
func TestMain(m *testing.M) {
	var buf syncBuffer
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	code := m.Run()
	if code != 0 || testing.Verbose() {
		fmt.Fprintf(os.Stderr, "the runtime's log records (slog.Default) during the tests:\n%s", buf.Bytes())
	}
	os.Exit(code)
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
