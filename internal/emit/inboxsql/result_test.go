package inboxsql

import (
	"context"
	"encoding/json"
	"testing"
	"testing/fstest"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemimpl"
	"github.com/idemgen/idemgen/idem/idemtest"
	"github.com/idemgen/idemgen/internal/migrate"
	"github.com/idemgen/idemgen/internal/model"
)

// execModes are every way pgx can send a statement; poolers such as PgBouncer
// in transaction mode (before 1.21) and RDS Proxy need exec or
// simple_protocol.
var execModes = []pgx.QueryExecMode{
	pgx.QueryExecModeCacheStatement,
	pgx.QueryExecModeCacheDescribe,
	pgx.QueryExecModeDescribeExec,
	pgx.QueryExecModeExec,
	pgx.QueryExecModeSimpleProtocol,
}

// poolInMode opens a pool on the test's schema that sends its statements in
// mode.
func poolInMode(t *testing.T, db *idemtest.DB, mode pgx.QueryExecMode) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.DefaultQueryExecMode = mode
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// note is keyed by ID; its handler echoes Text, whatever it holds, also as a
// map key.
type note struct {
	ID   string
	Text string
}

type echoed struct {
	Text  string            `json:"text"`
	Extra map[string]string `json:"extra"`
}

var noteHandler = model.Handler{
	Consumer: "test.note", Table: "idem_test_note",
	Key: []model.KeyPart{{Path: "ID", Column: "key_id", Kind: model.KeyString}},
}

func noteTable() idemimpl.Table[note] {
	return declare(noteHandler, func(m note) ([]any, error) { return []any{m.ID}, idemimpl.CheckString("ID", m.ID) }, nil)
}

func echo(_ context.Context, _ pgx.Tx, m note) (echoed, error) {
	return echoed{Text: m.Text, Extra: map[string]string{"key " + m.Text: m.Text}}, nil
}

// hostileTexts are strings that encoding/json encodes and jsonb refuses or
// rewrites: a NUL character (\u0000, refused with 22P05), and escapes that
// json must keep as written.
var hostileTexts = []string{"a\x00b", "\x00", "line\u2028sep\\\"quote'", "\ufffd\U0001F600"}

// TestNULResultStoredAndReplayed: a result holding a NUL character is stored
// by the migration idemgen writes, and a duplicate returns it unchanged, in
// every exec mode. With a jsonb result column the store failed with 22P05
// after the handler ran, on every redelivery.
func TestNULResultStoredAndReplayed(t *testing.T) {
	db := idemtest.New(t, migrations(createFile(Schema(noteHandler))))
	ctx := context.Background()
	for _, mode := range execModes {
		t.Run(mode.String(), func(t *testing.T) {
			inbox := idemimpl.NewInbox(poolInMode(t, db, mode), noteTable(), echo)
			for i, text := range hostileTexts {
				msg := note{ID: mode.String() + "/" + string(rune('a'+i)), Text: text}
				first, o, err := inbox.Handle(ctx, msg)
				if err != nil || o != idem.Processed {
					t.Fatalf("first delivery of %q: %v, %v; want Processed", text, o, err)
				}
				again, o, err := inbox.Handle(ctx, msg)
				if err != nil || o != idem.Duplicate {
					t.Fatalf("redelivery of %q: %v, %v; want Duplicate", text, o, err)
				}
				if again.Text != text || first.Text != text || again.Extra["key "+text] != text {
					t.Errorf("result of %q: processed %q, replayed %q (extra %q); want the text unchanged", text, first.Text, again.Text, again.Extra)
				}
				want, _ := json.Marshal(first)
				if got, _ := json.Marshal(again); string(got) != string(want) {
					t.Errorf("replayed result %s, want %s", got, want)
				}
				var stored string
				if err := db.Pool.QueryRow(ctx, `SELECT result::text FROM idem_test_note WHERE key_id = $1`, msg.ID).Scan(&stored); err != nil || stored != string(want) {
					t.Errorf("stored result %q, %v; want the bytes encoding/json wrote, %q", stored, err, want)
				}
			}
		})
	}
}

// TestResultColumnEvolvesFromJSONB: an inbox created with a jsonb result
// column (a migration written before idemgen stored results as json) keeps
// its results through the migration that changes the column to json, which
// then stores a NUL result; down to 0 and up again work.
func TestResultColumnEvolvesFromJSONB(t *testing.T) {
	legacy := Schema(noteHandler)
	legacy.Result = model.ResultJSONB
	current := Schema(noteHandler)
	change, err := migrate.Evolve(legacy, current)
	if err != nil || !change.ResultJSON {
		t.Fatalf("Evolve(jsonb, json) = %+v, %v; want the result column changed", change, err)
	}
	fsys := migrations(createFile(legacy))
	db := idemtest.New(t, fsys)
	ctx := context.Background()
	inbox := idemimpl.NewInbox(db.Pool, noteTable(), echo)
	old := note{ID: "before", Text: "plain"}
	if _, o, err := inbox.Handle(ctx, old); err != nil || o != idem.Processed {
		t.Fatalf("delivery before the change: %v, %v", o, err)
	}
	if _, _, err := inbox.Handle(ctx, note{ID: "nul-before", Text: "a\x00b"}); err == nil {
		t.Fatal("a NUL result was stored in the jsonb column; the legacy schema is not what this test means to start from")
	}

	fsys["00003_idem.sql"] = &fstest.MapFile{Data: alterFile(t, legacy, current)}
	p := db.Migrations(t, fsys)
	if _, err := p.Up(ctx); err != nil {
		t.Fatalf("up to the json result column: %v", err)
	}
	var typ string
	if err := db.Pool.QueryRow(ctx, `SELECT data_type FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = 'idem_test_note' AND column_name = 'result'`).Scan(&typ); err != nil || typ != "json" {
		t.Fatalf("result column type %q, %v; want json", typ, err)
	}
	r, o, err := inbox.Handle(ctx, old)
	if err != nil || o != idem.Duplicate || r.Text != "plain" {
		t.Fatalf("redelivery of the message processed before the change: %+v, %v, %v; want Duplicate with its result", r, o, err)
	}
	for _, want := range []idem.Outcome{idem.Processed, idem.Duplicate} {
		r, o, err := inbox.Handle(ctx, note{ID: "nul-after", Text: "a\x00b"})
		if err != nil || o != want || r.Text != "a\x00b" {
			t.Fatalf("NUL result after the change: %q, %v, %v; want %v with the text unchanged", r.Text, o, err, want)
		}
	}

	// Down refuses nothing once the NUL row is purged, and the chain
	// applies again from scratch.
	if _, err := db.Pool.Exec(ctx, `DELETE FROM idem_test_note`); err != nil {
		t.Fatal(err)
	}
	if _, err := p.DownTo(ctx, 0); err != nil {
		t.Fatalf("down to 0: %v", err)
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatalf("up again: %v", err)
	}
}
