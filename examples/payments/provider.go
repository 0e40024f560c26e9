package payments

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// Provider is a payment provider for the example and its tests: a real
// net/http server on loopback that charges an order at most once per
// idempotency key, as payment APIs do. A request with a key it has seen gets
// the charge made for it back (HTTP 200, the same id), without a new charge;
// the same key with another body is refused (HTTP 422); a request without a
// key is refused (HTTP 400), and an amount over MaxAmountCents is declined
// (HTTP 402).
type Provider struct {
	// MaxAmountCents is the largest amount charged; 0 means no limit.
	MaxAmountCents int64

	srv *http.Server
	url string

	mu      sync.Mutex
	charges map[string]charge // idempotency key → the charge made for it
	keys    []string          // every key received, in order
	calls   int
}

type charge struct {
	id   string
	body []byte
}

// StartProvider starts a Provider on a free loopback port. Close stops it.
func StartProvider() (*Provider, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("payments: provider: %w", err)
	}
	p := &Provider{charges: map[string]charge{}, url: "http://" + ln.Addr().String() + "/v1/charges"}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/charges", p.serveCharge)
	p.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

// URL is the provider's charges endpoint, for Service.ProviderURL.
func (p *Provider) URL() string { return p.url }

// Close stops the server.
func (p *Provider) Close() error {
	if err := p.srv.Close(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Charges is how many charges the provider made: one per idempotency key.
func (p *Provider) Charges() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.charges)
}

// Calls is how many charge requests it answered, repeats included.
func (p *Provider) Calls() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls
}

// ChargeFor returns the id of the charge made for the idempotency key, if
// one was.
func (p *Provider) ChargeFor(key string) (id string, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c, ok := p.charges[key]
	return c.id, ok
}

// Keys returns the idempotency keys of the requests, in order.
func (p *Provider) Keys() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.keys...)
}

func (p *Provider) serveCharge(w http.ResponseWriter, r *http.Request) {
	reply := func(status int, id, msg string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(map[string]string{"id": id, "error": msg})
	}
	key := r.Header.Get(IdempotencyKeyHeader)
	if key == "" {
		reply(http.StatusBadRequest, "", "no "+IdempotencyKeyHeader+" header")
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		reply(http.StatusBadRequest, "", err.Error())
		return
	}
	var req ChargeRequested
	if err := json.Unmarshal(body, &req); err != nil {
		reply(http.StatusBadRequest, "", "unreadable charge: "+err.Error())
		return
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	p.keys = append(p.keys, key)
	if c, seen := p.charges[key]; seen {
		if !bytes.Equal(c.body, body) {
			reply(http.StatusUnprocessableEntity, "", "the idempotency key was used with another request")
			return
		}
		reply(http.StatusOK, c.id, "")
		return
	}
	if p.MaxAmountCents > 0 && req.AmountCents > p.MaxAmountCents {
		reply(http.StatusPaymentRequired, "", fmt.Sprintf("amount %d over the limit of %d", req.AmountCents, p.MaxAmountCents))
		return
	}
	c := charge{id: fmt.Sprintf("ch_%d", len(p.charges)+1), body: body}
	p.charges[key] = c
	reply(http.StatusOK, c.id, "")
}
