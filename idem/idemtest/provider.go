package idemtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
)

// IdempotencyKeyHeader is the HTTP header Provider.ServeHTTP reads the
// idempotency key from, as payment APIs (Stripe, Adyen, PayPal) do.
const IdempotencyKeyHeader = "Idempotency-Key"

// ErrProviderKeyReused is what Provider.Call returns for a key it saw with
// another payload, as payment APIs refuse such a request (HTTP 422).
var ErrProviderKeyReused = errors.New("idemtest: provider: the idempotency key was used with another payload")

// Provider is a double of an external provider (a payment API): it
// deduplicates by idempotency key as real ones do (the same key gives the
// same id and applies its effect once), counts the effects, and records
// every key it received. It serves the same over HTTP (ServeHTTP, the key
// in the Idempotency-Key header), so that a test can put it behind a real
// net/http server on loopback. It is safe for concurrent use.
type Provider struct {
	mu       sync.Mutex
	ids      map[string]string // idempotency key → id of its effect
	payloads map[string][]byte // idempotency key → payload of its effect
	keys     []string          // every key received, in order
	calls    int
	effects  int
	hold     *Hold
}

// NewProvider returns a Provider that has seen no call.
func NewProvider() *Provider {
	return &Provider{ids: map[string]string{}, payloads: map[string][]byte{}}
}

// Call applies payload once per key: the first call of a key applies its
// effect and returns a new id, every later call of the key returns that id
// (or ErrProviderKeyReused for another payload) without applying anything.
// An empty key is refused. A call that meets a Hold applies its effect and
// then waits, without regard to ctx, until the Hold is released, as a
// request whose charge is made but whose response is late: Hold records
// whether ctx was cancelled meanwhile.
func (p *Provider) Call(ctx context.Context, key string, payload []byte) (id string, err error) {
	if key == "" {
		return "", errors.New("idemtest: provider: the call has no idempotency key")
	}
	p.mu.Lock()
	p.calls++
	p.keys = append(p.keys, key)
	id, seen := p.ids[key]
	switch {
	case seen && !bytes.Equal(p.payloads[key], payload):
		err = fmt.Errorf("%w (key %s)", ErrProviderKeyReused, key)
	case !seen:
		p.effects++
		id = fmt.Sprintf("eff_%d", p.effects)
		p.ids[key] = id
		p.payloads[key] = bytes.Clone(payload)
	}
	h := p.hold
	p.hold = nil
	p.mu.Unlock()
	if h != nil {
		h.wait(ctx)
	}
	if err != nil {
		return "", err
	}
	return id, nil
}

// Keys returns every idempotency key the provider received, in order, with
// repeats.
func (p *Provider) Keys() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.keys)
}

// Calls returns how many calls the provider received.
func (p *Provider) Calls() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls
}

// Effects returns how many effects the provider applied: one per distinct
// idempotency key.
func (p *Provider) Effects() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.effects
}

// Hold makes the next call wait, after it applied its effect, until the
// returned Hold is released. Calls after that one are not held.
func (p *Provider) Hold() *Hold {
	h := &Hold{arrived: make(chan struct{}), released: make(chan struct{}), cancelled: make(chan struct{})}
	p.mu.Lock()
	p.hold = h
	p.mu.Unlock()
	return h
}

// Hold is a call of a Provider kept waiting: see Provider.Hold.
type Hold struct {
	arrived   chan struct{}
	released  chan struct{}
	cancelled chan struct{}
	once      sync.Once
	cause     error
}

// Arrived is closed when the held call arrived (and applied its effect).
func (h *Hold) Arrived() <-chan struct{} { return h.arrived }

// Cancelled is closed when the context of the held call was cancelled while
// it waited.
func (h *Hold) Cancelled() <-chan struct{} { return h.cancelled }

// Cause returns context.Cause of the held call's context once Cancelled is
// closed, and nil before.
func (h *Hold) Cause() error {
	select {
	case <-h.cancelled:
		return h.cause
	default:
		return nil
	}
}

// Release lets the held call return. It may be called more than once.
func (h *Hold) Release() { h.once.Do(func() { close(h.released) }) }

func (h *Hold) wait(ctx context.Context) {
	close(h.arrived)
	select {
	case <-h.released:
		return
	case <-ctx.Done():
		h.cause = context.Cause(ctx)
		close(h.cancelled)
	}
	<-h.released
}

// ProviderResponse is the body Provider.ServeHTTP answers with.
type ProviderResponse struct {
	ID    string `json:"id,omitempty"`
	Error string `json:"error,omitempty"`
}

// ServeHTTP serves Call over HTTP: a POST whose Idempotency-Key header is the
// key and whose body is the payload, answered 200 with {"id": ...}; 400
// without a key, 422 for a key reused with another payload.
func (p *Provider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	reply := func(status int, resp ProviderResponse) {
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(resp)
	}
	if r.Method != http.MethodPost {
		reply(http.StatusMethodNotAllowed, ProviderResponse{Error: "POST only"})
		return
	}
	key := r.Header.Get(IdempotencyKeyHeader)
	if key == "" {
		reply(http.StatusBadRequest, ProviderResponse{Error: "no " + IdempotencyKeyHeader + " header"})
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		reply(http.StatusBadRequest, ProviderResponse{Error: err.Error()})
		return
	}
	id, err := p.Call(r.Context(), key, body)
	switch {
	case errors.Is(err, ErrProviderKeyReused):
		reply(http.StatusUnprocessableEntity, ProviderResponse{Error: err.Error()})
	case err != nil:
		reply(http.StatusBadRequest, ProviderResponse{Error: err.Error()})
	default:
		reply(http.StatusOK, ProviderResponse{ID: id})
	}
}

// PostProvider calls a Provider served over HTTP at url: a POST of payload
// with key in the Idempotency-Key header. It returns the id of the effect.
func PostProvider(ctx context.Context, client *http.Client, url, key string, payload []byte) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(payload))
	if err != nil {
		return "", err
	}
	req.Header.Set(IdempotencyKeyHeader, key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var body ProviderResponse
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return "", fmt.Errorf("idemtest: provider answered %s with an unreadable body: %w", resp.Status, err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("idemtest: provider answered %s: %s", resp.Status, body.Error)
	}
	return body.ID, nil
}
