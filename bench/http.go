package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"time"

	"github.com/idemgen/idemgen/bench/internal/procstat"
	"github.com/idemgen/idemgen/bench/ledger"
	"github.com/idemgen/idemgen/idem/idemhttp"
)

// The HTTP part (-parts http): the ledger's deposits as HTTP requests over
// loopback, served two ways at 1 and 16 clients: through idemhttp.Handler
// around the generated wrapper, and through a plain net/http handler around
// the hand-written inbox (ledger.HandWritten), the glue a user writes
// without idemhttp. Each way serves first requests and replays (requests
// it has answered before). Client and server share the process, so the
// client CPU column is both.

// The HTTP part's scenarios.
const (
	scHTTPHand       = "net/http + hand-written inbox"
	scHTTPIdem       = "idemhttp + generated wrapper"
	scHTTPHandReplay = "net/http + hand-written inbox, replays"
	scHTTPIdemReplay = "idemhttp + generated wrapper, replays"
)

var httpScenarios = []string{scHTTPHand, scHTTPIdem, scHTTPHandReplay, scHTTPIdemReplay}

// httpWorkers are the clients of the HTTP part's cells.
var httpWorkers = []int{1, 16}

// httpResults are the HTTP part's cells.
type httpResults struct {
	cells map[cellKey]*cell
}

func (r *httpResults) cell(name string, workers int) *cell { return r.cells[cellKey{name, workers}] }

func runHTTP(ctx context.Context, cfg *config) (*httpResults, error) {
	res := &httpResults{cells: map[cellKey]*cell{}}
	total := cfg.rounds * len(httpWorkers) * len(httpScenarios)
	done := 0
	for round := range cfg.rounds {
		for wi, n := range httpWorkers {
			for i := range httpScenarios {
				name := httpScenarios[(i+round+wi)%len(httpScenarios)]
				done++
				logf("http %d/%d: round %d, %d client(s), %s", done, total, round+1, n, name)
				smp, err := runHTTPCell(ctx, cfg, name, n)
				if err != nil {
					return nil, fmt.Errorf("http: round %d, %d client(s), %s: %w", round+1, n, name, err)
				}
				logf("    %.0f requests/s, %.2f round trips/request", smp.rate(), float64(smp.trips)/float64(max(smp.msgs, 1)))
				key := cellKey{name, n}
				if res.cells[key] == nil {
					res.cells[key] = &cell{}
				}
				res.cells[key].samples = append(res.cells[key].samples, smp)
				select {
				case <-ctx.Done():
					return nil, ctx.Err()
				case <-time.After(200 * time.Millisecond):
				}
			}
		}
	}
	return res, nil
}

// runHTTPCell runs one scenario with n clients in a fresh schema: a server
// on loopback, a warm-up, then the measurement.
func runHTTPCell(ctx context.Context, cfg *config, name string, n int) (sample, error) {
	s, err := newSchema(ctx, cfg.db, cfg.accounts)
	if err != nil {
		return sample{}, err
	}
	defer s.drop()
	pool, counter, err := s.pool(ctx, n)
	if err != nil {
		return sample{}, err
	}
	defer pool.Close()

	var h http.Handler
	switch name {
	case scHTTPHand, scHTTPHandReplay:
		h = handWrittenHTTP(ledger.NewHandWritten(pool))
	default:
		h = idemhttp.Handler(ledger.NewPostIdem(pool))
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: n, DisableCompression: true}}
	defer client.CloseIdleConnections()

	replays := name == scHTTPHandReplay || name == scHTTPIdemReplay
	deliver := func(ctx context.Context, w *worker) error { return postDeposit(ctx, client, srv.URL, w.next(), false) }
	if replays {
		msgs := make([]ledger.Deposit, duplicateKeys)
		for i := range msgs {
			msgs[i] = ledger.Deposit{MessageID: "d-" + strconv.Itoa(i), Account: int64(i%cfg.accounts) + 1, Amount: 1}
			if err := postDeposit(ctx, client, srv.URL, msgs[i], false); err != nil {
				return sample{}, fmt.Errorf("first requests: %w", err)
			}
		}
		deliver = func(ctx context.Context, w *worker) error {
			w.seq++
			return postDeposit(ctx, client, srv.URL, msgs[(w.id*7919+w.seq)%len(msgs)], true)
		}
	}

	ws := make([]*worker, n)
	for i := range ws {
		ws[i] = &worker{id: i, rng: mrand.New(mrand.NewPCG(uint64(i), uint64(time.Now().UnixNano()))), accounts: cfg.accounts}
	}
	if _, err := runPhase(ctx, ws, cfg.warmup, deliver, false); err != nil {
		return sample{}, fmt.Errorf("warm-up: %w", err)
	}
	counter.reset()
	meter := procstat.Start()
	server0, serverOK := counter.serverCPU()
	res, err := runPhase(ctx, ws, cfg.duration, deliver, true)
	if err != nil {
		return sample{}, err
	}
	res.clientCPU, res.busy = meter.Stop()
	res.serverCPU = -1
	if server1, ok := counter.serverCPU(); ok && serverOK {
		res.serverCPU = server1 - server0
	}
	res.trips = counter.load()
	return res, nil
}

// postDeposit sends msg as a JSON request and checks the answer: 200 with
// the deposit's result, a replay exactly when replay is set.
func postDeposit(ctx context.Context, client *http.Client, url string, msg ledger.Deposit, replay bool) error {
	body, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := client.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	answer, err := io.ReadAll(res.Body)
	if err != nil {
		return err
	}
	var posted ledger.Posted
	switch {
	case res.StatusCode != http.StatusOK:
		return fmt.Errorf("deposit %s: %d %s", msg.MessageID, res.StatusCode, answer)
	case (res.Header.Get(idemhttp.HeaderReplayed) == "true") != replay:
		return fmt.Errorf("deposit %s: replayed %q; want a replay: %v", msg.MessageID, res.Header.Get(idemhttp.HeaderReplayed), replay)
	case json.Unmarshal(answer, &posted) != nil || posted.Account != msg.Account:
		return fmt.Errorf("deposit %s: answered %s", msg.MessageID, answer)
	}
	return nil
}

// handWrittenHTTP is the glue a user writes around the hand-written inbox
// without idemhttp: decode the JSON body (1 MiB at most), handle it, answer
// the result as JSON, a duplicate's with Idempotent-Replayed, and map the
// inbox's errors to statuses.
func handWrittenHTTP(hand *ledger.HandWritten) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
		var tooLarge *http.MaxBytesError
		switch {
		case errors.As(err, &tooLarge):
			http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
			return
		case err != nil:
			http.Error(w, "cannot read the body", http.StatusBadRequest)
			return
		}
		var msg ledger.Deposit
		if err := json.Unmarshal(body, &msg); err != nil {
			http.Error(w, "malformed body", http.StatusBadRequest)
			return
		}
		posted, dup, err := hand.Handle(r.Context(), msg)
		switch {
		case errors.Is(err, ledger.ErrDuplicateInProgress):
			w.Header().Set("Retry-After", "1")
			http.Error(w, "in progress", http.StatusConflict)
			return
		case errors.Is(err, ledger.ErrKeyReused):
			http.Error(w, "key reused", http.StatusUnprocessableEntity)
			return
		case err != nil:
			http.Error(w, "failed", http.StatusInternalServerError)
			return
		}
		out, err := json.Marshal(posted)
		if err != nil {
			http.Error(w, "failed", http.StatusInternalServerError)
			return
		}
		if dup {
			w.Header().Set(idemhttp.HeaderReplayed, "true")
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(append(out, '\n'))
	})
}
