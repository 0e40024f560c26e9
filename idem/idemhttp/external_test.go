package idemhttp_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemhttp"
	"github.com/idemgen/idemgen/idem/idemimpl"
	"github.com/idemgen/idemgen/idem/idemtest"
)

// mail is the message of a mode=external endpoint keyed by its own id.
type mail struct {
	ID string `json:"id"`
	To string `json:"to"`
}

type sent struct {
	Provider string `json:"provider"`
}

// mailIdem is shaped as idemgen's wrapper of a mode=external handler.
type mailIdem struct {
	*idemimpl.ExternalInbox[mail, sent]
}

// TestExternalHandler serves a mode=external wrapper: a copy that arrives
// while the provider call runs is 409 with Retry-After, what is left of the
// claim's lease, and once the call is done the copies replay its result.
func TestExternalHandler(t *testing.T) {
	table, migration := idemtest.TextKeyExternal("test.mail", "idem_test_mail", "ID", func(m mail) string { return m.ID })
	db := idemtest.New(t, fstest.MapFS{"00001_mail.sql": {Data: []byte(migration)}})
	held, release := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	w := &mailIdem{idemimpl.NewExternalInbox(db.Pool, table, func(ctx context.Context, m mail) (sent, error) {
		calls.Add(1)
		key, _ := idem.KeyFrom(ctx)
		close(held)
		<-release
		return sent{Provider: key}, nil
	}, idem.WithLease(30*time.Second), idemtest.WithTestLogger(t))}
	url := serve(t, idemhttp.Handler(w))
	body := `{"id":"mail-1","to":"ada@example.com"}`
	first := make(chan response, 1)
	go func() { first <- send(t, "POST", url, body, "Content-Type", jsonType) }()
	<-held
	r := send(t, "POST", url, body, "Content-Type", jsonType)
	after, err := strconv.Atoi(r.header.Get("Retry-After"))
	if r.status != 409 || err != nil || after < 25 || after > 30 {
		t.Errorf("a copy during the provider call: %v, Retry-After %q; want 409 with what is left of the 30s lease", r, r.header.Get("Retry-After"))
	}
	close(release)
	r1 := <-first
	again := send(t, "POST", url, body, "Content-Type", jsonType)
	if r1.status != 200 || r1.replayed() || !again.replayed() || again.body != r1.body || calls.Load() != 1 {
		t.Fatalf("the call and its copy: %v, %v, %d calls; want one call, then its result replayed", r1, again, calls.Load())
	}
}
