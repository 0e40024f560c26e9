package idemhttp_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemimpl"
	"github.com/idemgen/idemgen/idem/idemtest"
)

// The tests serve inboxes declared by hand the way idemgen generates them.
// The refund API is keyed by client and idempotency key (key=Client,Key)
// and has a result. The note endpoint is keyed by the key alone, without a
// result. The event endpoint's body carries its own id (key=ID).

type refundParams struct {
	Charge string `json:"charge"`
	Amount int64  `json:"amount"`
}

type refund struct {
	ID     int64  `json:"id"`
	Charge string `json:"charge"`
	Amount int64  `json:"amount"`
}

type note struct {
	Text string `json:"text"`
}

type event struct {
	ID   string `json:"id"`
	Type string `json:"type"`
}

const migrations = `-- +goose Up
CREATE TABLE idem_test_refund (
    key_client   text        NOT NULL,
    key_key      text        NOT NULL,
    fingerprint  bytea       NOT NULL,
    status       text        NOT NULL DEFAULT 'done',
    result       json,
    attempts     integer     NOT NULL DEFAULT 1,
    created_at   timestamptz NOT NULL DEFAULT now(),
    completed_at timestamptz DEFAULT now(),
    PRIMARY KEY (key_client, key_key)
);
CREATE TABLE idem_test_note (
    key_key      text        PRIMARY KEY,
    fingerprint  bytea       NOT NULL,
    status       text        NOT NULL DEFAULT 'done',
    result       json,
    attempts     integer     NOT NULL DEFAULT 1,
    created_at   timestamptz NOT NULL DEFAULT now(),
    completed_at timestamptz DEFAULT now()
);
CREATE TABLE idem_test_event (
    key_id       text        PRIMARY KEY,
    fingerprint  bytea       NOT NULL,
    status       text        NOT NULL DEFAULT 'done',
    result       json,
    attempts     integer     NOT NULL DEFAULT 1,
    created_at   timestamptz NOT NULL DEFAULT now(),
    completed_at timestamptz DEFAULT now()
);
CREATE TABLE refunds (id bigserial PRIMARY KEY, client text NOT NULL, charge text NOT NULL, amount bigint NOT NULL);
CREATE TABLE notes (text text NOT NULL);
CREATE TABLE events (id text NOT NULL, type text NOT NULL);
-- +goose Down
DROP TABLE events, notes, refunds, idem_test_event, idem_test_note, idem_test_refund;
`

func textPart(field, v string) error { return idemimpl.CheckString(field, v) }

var refundTable = idemimpl.Table[idem.Request[refundParams]]{
	Consumer: "test.refund",
	Name:     "idem_test_refund",
	Columns:  []idemimpl.Column{{Field: "Client", Name: "key_client", Type: "text"}, {Field: "Key", Name: "key_key", Type: "text"}},
	Key: func(msg idem.Request[refundParams]) ([]any, error) {
		if err := textPart("Client", msg.Client); err != nil {
			return nil, err
		}
		if err := textPart("Key", msg.Key); err != nil {
			return nil, err
		}
		return []any{msg.Client, msg.Key}, nil
	},
	Retain: time.Hour,
}

var noteTable = idemimpl.Table[*idem.Request[note]]{
	Consumer: "test.note",
	Name:     "idem_test_note",
	Columns:  []idemimpl.Column{{Field: "Key", Name: "key_key", Type: "text"}},
	Key: func(msg *idem.Request[note]) ([]any, error) {
		if err := textPart("Key", msg.Key); err != nil {
			return nil, err
		}
		return []any{msg.Key}, nil
	},
	Retain: time.Hour,
}

var eventTable = idemimpl.Table[event]{
	Consumer: "test.event",
	Name:     "idem_test_event",
	Columns:  []idemimpl.Column{{Field: "ID", Name: "key_id", Type: "text"}},
	Key: func(msg event) ([]any, error) {
		if err := textPart("ID", msg.ID); err != nil {
			return nil, err
		}
		return []any{msg.ID}, nil
	},
	Retain: time.Hour,
}

// errDeclined is the refund handler's own error for the charge "declined".
var errDeclined = errors.New("charge declined")

// service is the handlers' receiver. A refund of the charge "fail-once"
// fails its first run; one of "hold" signals held and waits for release
// inside its transaction.
type service struct {
	failed  bool
	held    chan struct{}
	release chan struct{}
}

func (s *service) refund(ctx context.Context, tx pgx.Tx, req idem.Request[refundParams]) (refund, error) {
	switch req.Body.Charge {
	case "declined":
		return refund{}, errDeclined
	case "fail-once":
		if !s.failed {
			s.failed = true
			return refund{}, errors.New("a failure of the first run")
		}
	case "hold":
		if _, err := tx.Exec(ctx, `SELECT 1`); err != nil {
			return refund{}, err
		}
		s.held <- struct{}{}
		<-s.release
	}
	r := refund{Charge: req.Body.Charge, Amount: req.Body.Amount}
	err := tx.QueryRow(ctx, `INSERT INTO refunds (client, charge, amount) VALUES ($1, $2, $3) RETURNING id`,
		req.Client, req.Body.Charge, req.Body.Amount).Scan(&r.ID)
	return r, err
}

func addNote(ctx context.Context, tx pgx.Tx, req *idem.Request[note]) error {
	_, err := tx.Exec(ctx, `INSERT INTO notes (text) VALUES ($1)`, req.Body.Text)
	return err
}

func recordEvent(ctx context.Context, tx pgx.Tx, ev event) (event, error) {
	_, err := tx.Exec(ctx, `INSERT INTO events (id, type) VALUES ($1, $2)`, ev.ID, ev.Type)
	return ev, err
}

// refundIdem and noteIdem are shaped as idemgen's wrappers: one with a
// result, whose Handle is the embedded inbox's, and one without, whose
// Handle returns only the outcome.
type refundIdem struct {
	*idemimpl.Inbox[idem.Request[refundParams], refund]
}

type noteIdem struct {
	*idemimpl.Inbox[*idem.Request[note], idem.None]
}

func (w *noteIdem) Handle(ctx context.Context, msg *idem.Request[note]) (idem.Outcome, error) {
	_, o, err := w.Inbox.Handle(ctx, msg)
	return o, err
}

type eventIdem struct {
	*idemimpl.Inbox[event, event]
}

// fixture is a test's database, service and wrappers.
type fixture struct {
	pool   *pgxpool.Pool
	svc    *service
	refund *refundIdem
	note   *noteIdem
	event  *eventIdem
}

func newFixture(t *testing.T, opts ...idem.Option) *fixture {
	t.Helper()
	db := idemtest.New(t, fstest.MapFS{"00001_tables.sql": {Data: []byte(migrations)}})
	svc := &service{held: make(chan struct{}, 1), release: make(chan struct{})}
	opts = append([]idem.Option{idemtest.WithTestLogger(t)}, opts...)
	return &fixture{
		pool:   db.Pool,
		svc:    svc,
		refund: &refundIdem{idemimpl.NewInbox(db.Pool, refundTable, svc.refund, opts...)},
		note:   &noteIdem{idemimpl.NewInbox(db.Pool, noteTable, idemimpl.NoResult(addNote), opts...)},
		event:  &eventIdem{idemimpl.NewInbox(db.Pool, eventTable, recordEvent, opts...)},
	}
}

// count returns the rows of table.
func (f *fixture) count(t testing.TB, table string) int {
	t.Helper()
	var n int
	if err := f.pool.QueryRow(context.Background(), "SELECT count(*) FROM "+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// wantRows fails the test unless each table holds its number of rows.
func (f *fixture) wantRows(t testing.TB, when string, want map[string]int) {
	t.Helper()
	for table, n := range want {
		if got := f.count(t, table); got != n {
			t.Errorf("%s: %d rows in %s; want %d", when, got, table, n)
		}
	}
}

// response is what a request got back.
type response struct {
	status int
	header http.Header
	body   string
}

func (r response) replayed() bool { return r.header.Get("Idempotent-Replayed") == "true" }

func (r response) String() string {
	return fmt.Sprintf("%d %s %q", r.status, r.header.Get("Content-Type"), r.body)
}

// send makes one request with net/http's client; header holds name, value
// pairs.
func send(t testing.TB, method, url, body string, header ...string) response {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{status: res.StatusCode, header: res.Header, body: string(b)}
}

// serve runs h on a loopback server for the test.
func serve(t testing.TB, h http.Handler) string {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}
