package idem_test

import (
	"context"
	"errors"
	"maps"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemimpl"
	"github.com/idemgen/idemgen/idem/idemtest"
)

// execModes are every way pgx can send a statement. PgBouncer in transaction
// pooling mode (before 1.21) and RDS Proxy need exec or simple_protocol, in
// which pgx does not ask the server for the parameters' types: it encodes
// each argument by its Go type alone.
var execModes = []pgx.QueryExecMode{
	pgx.QueryExecModeCacheStatement,
	pgx.QueryExecModeCacheDescribe,
	pgx.QueryExecModeDescribeExec,
	pgx.QueryExecModeExec,
	pgx.QueryExecModeSimpleProtocol,
}

// poolInMode opens a pool of idemtest.MaxConns connections to url (the test's
// schema, or a pooler in front of it) that sends its statements in mode.
func poolInMode(t *testing.T, url string, mode pgx.QueryExecMode) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.DefaultQueryExecMode = mode
	cfg.MaxConns = idemtest.MaxConns
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// ticket is keyed by a UUID and a nullable seat, and guarded by its show (a
// UUID entity) and version: every kind of argument a generated table sends.
type ticket struct {
	ID      [16]byte `json:"id"`
	Seat    *int64   `json:"seat"`
	Show    [16]byte `json:"show"`
	Version int64    `json:"version"`
	Holder  string   `json:"holder"`
}

type booking struct {
	Holder string `json:"holder"`
	Seat   *int64 `json:"seat"`
}

var ticketTable = idemimpl.Table[ticket]{
	Consumer: "test.ticket",
	Name:     "idem_test_ticket",
	Columns: []idemimpl.Column{
		{Field: "ID", Name: "key_id", Type: "uuid"},
		{Field: "Seat", Name: "key_seat", Type: "bigint", Nullable: true},
	},
	Key: func(msg ticket) ([]any, error) {
		if err := idemimpl.CheckUUID("ID", msg.ID); err != nil {
			return nil, err
		}
		var seat any
		if msg.Seat != nil {
			seat = *msg.Seat
		}
		return []any{msg.ID, seat}, nil
	},
	Order:      func(msg ticket) (any, int64, error) { return msg.Show, msg.Version, nil },
	Versions:   "idem_test_ticket_versions",
	EntityType: "uuid",
	Retain:     720 * time.Hour,
}

// ticketMigrations are the deposit migrations and the ticket inbox.
func ticketMigrations() fstest.MapFS {
	fsys := maps.Clone(migrations)
	fsys["00003_idem_test_ticket.sql"] = &fstest.MapFile{Data: []byte(`-- +goose Up
CREATE TABLE idem_test_ticket (
    key_id       uuid        NOT NULL,
    key_seat     bigint,
    fingerprint  bytea       NOT NULL,
    status       text        NOT NULL DEFAULT 'done',
    result       json,
    attempts     integer     NOT NULL DEFAULT 1,
    created_at   timestamptz NOT NULL DEFAULT now(),
    completed_at timestamptz DEFAULT now()
);
CREATE UNIQUE INDEX ON idem_test_ticket (key_id, key_seat) WHERE key_seat IS NOT NULL;
CREATE UNIQUE INDEX ON idem_test_ticket (key_id) WHERE key_seat IS NULL;
CREATE TABLE idem_test_ticket_versions (entity uuid PRIMARY KEY, version bigint NOT NULL, updated_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE bookings (id uuid NOT NULL, seat bigint, holder text NOT NULL);
-- +goose Down
DROP TABLE bookings;
DROP TABLE idem_test_ticket_versions;
DROP TABLE idem_test_ticket;
`)}
	return fsys
}

// book records the booking. Like every handler that runs in exec or
// simple_protocol mode, it sends a UUID as pgtype.UUID (or a type with a
// driver.Valuer, such as github.com/google/uuid's): a bare [16]byte has no
// encoding without the parameter's type.
func book(ctx context.Context, tx pgx.Tx, msg ticket) (booking, error) {
	_, err := tx.Exec(ctx, `INSERT INTO bookings VALUES ($1, $2, $3)`, pgtype.UUID{Bytes: msg.ID, Valid: true}, msg.Seat, msg.Holder)
	return booking{Holder: msg.Holder, Seat: msg.Seat}, err
}

// TestEveryQueryExecMode delivers through pools in each pgx.QueryExecMode:
// the text and integer key of the deposit table and the UUID, nullable and
// guarded key of the ticket table; processed, duplicate, reused key, handler
// error, stale version, concurrent deliveries and purge. Before the result was
// sent as text, every delivery in exec and simple_protocol mode failed with
// "invalid input syntax for type json" (the []byte went as bytea), and a UUID
// key part could not be encoded at all.
func TestEveryQueryExecMode(t *testing.T) {
	db := idemtest.New(t, ticketMigrations())
	ctx := context.Background()
	for _, mode := range execModes {
		t.Run(mode.String(), func(t *testing.T) {
			pool := poolInMode(t, db.URL, mode)
			account := "acc-" + mode.String()
			deposits := idemimpl.NewInbox(pool, depositTable, credit)
			msg := deposit{Account: account, Ref: 1, Amount: 10}
			r1, o, err := deposits.Handle(ctx, msg)
			if err != nil || o != idem.Processed {
				t.Fatalf("first delivery: %v, %v; want Processed", o, err)
			}
			r2, o, err := deposits.Handle(ctx, msg)
			if err != nil || o != idem.Duplicate || r2 != r1 {
				t.Fatalf("redelivery: %+v, %v, %v; want Duplicate with %+v", r2, o, err, r1)
			}
			if _, _, err := deposits.Handle(ctx, deposit{Account: account, Ref: 1, Amount: 11}); !errors.Is(err, idem.ErrKeyReused) {
				t.Fatalf("reused key: %v, want ErrKeyReused", err)
			}
			boom := errors.New("boom")
			failing := idemimpl.NewInbox(pool, depositTable, func(ctx context.Context, tx pgx.Tx, msg deposit) (receipt, error) {
				_, _ = credit(ctx, tx, msg)
				return receipt{}, boom
			})
			if _, _, err := failing.Handle(ctx, deposit{Account: account, Ref: 2, Amount: 1000}); !errors.Is(err, boom) {
				t.Fatalf("failing handler: %v, want its error", err)
			}
			concurrent := deposit{Account: account, Ref: 3, Amount: 5}
			if got := deliverAtOnce(t, pool, 16, func() (idem.Outcome, error) {
				_, o, err := deposits.Handle(ctx, concurrent)
				return o, err
			}); got[idem.Processed] != 1 || got[idem.Duplicate] != 15 {
				t.Errorf("16 concurrent deliveries: %v; want 1 processed, 15 duplicates", got)
			}
			if got := balance(t, db, account); got != 15 {
				t.Errorf("balance %d, want 15 (10 + 5, each once; the failed handler's 1000 rolled back)", got)
			}
			if _, err := deposits.Purge(ctx); err != nil {
				t.Errorf("purge: %v", err)
			}

			tickets := idemimpl.NewInbox(pool, ticketTable, book)
			seat := int64(7)
			show := [16]byte{byte(mode) + 1, 0xaa}
			for i, tk := range []ticket{
				{ID: [16]byte{byte(mode) + 1, 1}, Show: show, Version: 1, Holder: "no seat"},
				{ID: [16]byte{byte(mode) + 1, 1}, Seat: &seat, Show: show, Version: 2, Holder: "seat 7"},
			} {
				for _, want := range []idem.Outcome{idem.Processed, idem.Duplicate} {
					b, o, err := tickets.Handle(ctx, tk)
					if err != nil || o != want || b.Holder != tk.Holder || (b.Seat == nil) != (tk.Seat == nil) {
						t.Fatalf("ticket %d: %+v, %v, %v; want %v with holder %q", i, b, o, err, want, tk.Holder)
					}
				}
			}
			stale := ticket{ID: [16]byte{byte(mode) + 1, 2}, Show: show, Version: 1, Holder: "late"}
			if _, _, err := tickets.Handle(ctx, stale); !errors.Is(err, idem.ErrStale) {
				t.Errorf("an older version of the show: %v, want ErrStale", err)
			}
		})
	}
}

// deliverAtOnce runs deliver n times at once, on a pool warmed to n
// connections, and counts the outcomes; an error fails the test.
func deliverAtOnce(t *testing.T, pool *pgxpool.Pool, n int, deliver func() (idem.Outcome, error)) map[idem.Outcome]int {
	t.Helper()
	idemtest.Warm(t, pool, n)
	var mu sync.Mutex
	outcomes := map[idem.Outcome]int{}
	errs := map[string]int{}
	idemtest.AtOnce(n, func(int) {
		o, err := deliver()
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			errs[err.Error()]++
			return
		}
		outcomes[o]++
	})
	for msg, count := range errs {
		t.Errorf("%d of %d concurrent deliveries: %s", count, n, msg)
	}
	return outcomes
}
