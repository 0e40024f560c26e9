package idem_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemimpl"
	"github.com/idemgen/idemgen/idem/idemtest"
	"github.com/idemgen/idemgen/internal/emit/inboxsql"
	"github.com/idemgen/idemgen/internal/migrate"
	"github.com/idemgen/idemgen/internal/model"
)

// The statements the runtime builds from a table declaration, run against
// real PostgreSQL for every shape of key idemgen declares. The migration
// and the declaration both come from the generator (inboxsql), for the same
// handler, as in a generated package: what is checked is that the runtime's
// statements fit the schema the generator writes.

// shaped is a message with a field for every kind of key part.
type shaped struct {
	Text  string   `json:"text"`
	UUID  [16]byte `json:"uuid"`
	Int   int64    `json:"int"`
	Small int64    `json:"small"`
	// NullInt and NullText are nullable parts.
	NullInt  *int64  `json:"null_int"`
	NullText *string `json:"null_text"`
	// Entity and Version are the stale-message guard's.
	Entity  string `json:"entity"`
	Version int64  `json:"version"`
	Body    string `json:"body"`
}

var shapedSeq atomic.Int64

// newShaped returns a message with a key of its own in every part.
func newShaped() shaped {
	n := shapedSeq.Add(1)
	var u [16]byte
	u[0], u[15] = 1, byte(n)
	u[1], u[2] = byte(n>>8), byte(n>>16)
	return shaped{Text: fmt.Sprint("t-", n), UUID: u, Int: n, Small: n % 30000, Entity: fmt.Sprint("e-", n), Version: 1, Body: fmt.Sprint("body-", n)}
}

// keyPart is one part of a shape's key: its directive facts and how the
// generated key function reads it.
type keyPart struct {
	part model.KeyPart
	read func(shaped) any // nil for a NULL part
}

var (
	textPart  = keyPart{model.KeyPart{Path: "Text", Column: "key_text", Kind: model.KeyString}, func(m shaped) any { return m.Text }}
	uuidPart  = keyPart{model.KeyPart{Path: "UUID", Column: "key_uuid", Kind: model.KeyUUID}, func(m shaped) any { return m.UUID }}
	intPart   = keyPart{model.KeyPart{Path: "Int", Column: "key_int", Kind: model.KeyInt, Bits: 64}, func(m shaped) any { return m.Int }}
	smallPart = keyPart{model.KeyPart{Path: "Small", Column: "key_small", Kind: model.KeyInt, Bits: 16}, func(m shaped) any { return m.Small }}
	// "order" is a keyword: the column is quoted in every statement.
	nullIntPart = keyPart{model.KeyPart{Path: "NullInt", Column: "order", Kind: model.KeyInt, Bits: 64, Null: &model.Null{Pointer: true}},
		func(m shaped) any {
			if m.NullInt == nil {
				return nil
			}
			return *m.NullInt
		}}
	nullTextPart = keyPart{model.KeyPart{Path: "NullText", Column: "key_null_text", Kind: model.KeyString, Null: &model.Null{Pointer: true}},
		func(m shaped) any {
			if m.NullText == nil {
				return nil
			}
			return *m.NullText
		}}
)

// shape is a consumer's key (and guard).
type shape struct {
	name             string
	table            string
	parts            []keyPart
	guard            bool
	nullsNotDistinct bool
}

func (s shape) handler() model.Handler {
	h := model.Handler{Consumer: "test.shape." + s.name, Table: s.table, NullsNotDistinct: s.nullsNotDistinct}
	for _, p := range s.parts {
		h.Key = append(h.Key, p.part)
	}
	if s.guard {
		h.Guard = &model.Guard{
			Entity:  model.KeyPart{Path: "Entity", Column: "entity", Kind: model.KeyString},
			Version: model.KeyPart{Path: "Version", Kind: model.KeyInt, Bits: 64},
		}
	}
	return h
}

func (s shape) key(m shaped) ([]any, error) {
	key := make([]any, len(s.parts))
	for i, p := range s.parts {
		key[i] = p.read(m)
	}
	return key, nil
}

// columns are the declaration's key columns, as the generated code states
// them.
func columns(h model.Handler, names []string) []idemimpl.Column {
	var cols []idemimpl.Column
	for _, c := range inboxsql.KeyColumns(h, names) {
		cols = append(cols, idemimpl.Column{Field: c.Field, Name: c.Name, Type: c.Type, Nullable: c.Nullable})
	}
	return cols
}

// table is the idemimpl.Table idemgen declares for s, kept for no time (so that
// Purge deletes every row).
func (s shape) declare() idemimpl.Table[shaped] {
	h := s.handler()
	t := idemimpl.Table[shaped]{Consumer: h.Consumer, Name: inboxsql.TableName(h.Table), Columns: columns(h, nil), Key: s.key}
	if in := inboxsql.Schema(h); in.Guard != nil {
		t.Order = func(m shaped) (any, int64, error) { return m.Entity, m.Version, nil }
		t.Versions, t.EntityType = inboxsql.VersionsTable(in), in.Guard.Type
	}
	return t
}

const shapeEffects = `-- +goose Up
CREATE SCHEMA IF NOT EXISTS idem_shapes;
CREATE TABLE effects (key text NOT NULL);
-- +goose Down
DROP TABLE effects;
DROP SCHEMA idem_shapes;
`

// shapeDB is a test schema with the migrations idemgen writes for s.
func shapeDB(t *testing.T, files ...[]byte) *idemtest.DB {
	fsys := fstest.MapFS{"00001_effects.sql": {Data: []byte(shapeEffects)}}
	for i, f := range files {
		fsys[fmt.Sprintf("%05d_idem.sql", i+2)] = &fstest.MapFile{Data: f}
	}
	return idemtest.New(t, fsys)
}

func render(t *testing.T, kind interface {
	Render(prev, next migrate.State) (string, []byte, error)
}, next migrate.State) []byte {
	t.Helper()
	_, content, err := kind.Render(nil, next)
	if err != nil {
		t.Fatal(err)
	}
	return content
}

func countRows(t *testing.T, db *idemtest.DB, query string) int {
	t.Helper()
	var n int
	if err := db.Pool.QueryRow(context.Background(), query).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestStatementsEveryKeyShape runs every statement of a mode=tx inbox
// (claim, complete, lookup, purge, and the batch ones where the table has
// them) for each shape of key: one delivery processed, its redelivery a
// duplicate with the stored result, another payload under its key
// ErrKeyReused, a batch of new keys, a key twice and a processed key, and a
// purge of every row; with nullable parts, each null pattern; with a guard,
// a stale version refused.
func TestStatementsEveryKeyShape(t *testing.T) {
	shapes := []shape{
		{name: "text", table: "idem_shape_text", parts: []keyPart{textPart}},
		{name: "uuid", table: "idem_shape_uuid", parts: []keyPart{uuidPart}},
		{name: "int", table: "idem_shape_int", parts: []keyPart{intPart}},
		{name: "composite", table: "idem_shapes.composite", parts: []keyPart{textPart, uuidPart, intPart, smallPart}},
		{name: "nullable", table: "idem_shape_nullable", parts: []keyPart{textPart, nullIntPart, nullTextPart}},
		{name: "nulls_not_distinct", table: "idem_shape_nnd", parts: []keyPart{textPart, nullIntPart}, nullsNotDistinct: true},
		{name: "guard", table: "idem_shape_guard", parts: []keyPart{uuidPart}, guard: true},
		{name: "guard_nullable", table: "order", parts: []keyPart{textPart, nullIntPart}, guard: true},
	}
	inboxes := migrate.InboxKind{Create: inboxsql.Create, Alter: inboxsql.Alter}
	for _, s := range shapes {
		t.Run(s.name, func(t *testing.T) {
			db := shapeDB(t, render(t, inboxes, inboxsql.Schema(s.handler())))
			ctx := context.Background()
			var runs atomic.Int64
			inbox := idemimpl.NewInbox(db.Pool, s.declare(), func(ctx context.Context, tx pgx.Tx, m shaped) (string, error) {
				// A duplicate enters the handler: the lookup sent with its
				// first statement fails that statement. Count the runs past it.
				_, err := tx.Exec(ctx, `INSERT INTO effects VALUES ($1)`, m.Body)
				if err == nil {
					runs.Add(1)
				}
				return m.Body, err
			})
			deliver := func(m shaped, want idem.Outcome) {
				t.Helper()
				r, o, err := inbox.Handle(ctx, m)
				if err != nil || o != want || r != m.Body {
					t.Fatalf("Handle(%+v) = %q, %v, %v; want %q, %v", m, r, o, err, m.Body, want)
				}
			}

			var msgs []shaped
			first := newShaped()
			msgs = append(msgs, first)
			// Every other null pattern of the nullable parts, on the
			// same other parts: each is a key of its own.
			var nullable []keyPart
			for _, p := range s.parts {
				if p.part.Null != nil {
					nullable = append(nullable, p)
				}
			}
			// withPattern gives m's nullable parts values where pattern
			// says (bit j: the j-th nullable part is not NULL).
			withPattern := func(m shaped, pattern int) shaped {
				for j, p := range nullable {
					if pattern&(1<<j) == 0 {
						continue
					}
					switch p.part.Path {
					case "NullInt":
						v := m.Int
						m.NullInt = &v
					case "NullText":
						v := m.Body
						m.NullText = &v
					}
				}
				return m
			}
			for pattern := 1; pattern < 1<<len(nullable); pattern++ {
				m := newShaped()
				m.Text, m.UUID, m.Int, m.Small = first.Text, first.UUID, first.Int, first.Small
				msgs = append(msgs, withPattern(m, pattern))
			}
			for _, m := range msgs {
				deliver(m, idem.Processed)
			}
			for _, m := range msgs {
				deliver(m, idem.Duplicate)
			}
			if got := runs.Load(); got != int64(len(msgs)) {
				t.Fatalf("the handler ran %d times for %d keys", got, len(msgs))
			}
			other := first
			other.Body += "-other"
			if _, _, err := inbox.Handle(ctx, other); !errors.Is(err, idem.ErrKeyReused) {
				t.Fatalf("another payload under a processed key: %v, want ErrKeyReused", err)
			}
			if s.guard {
				stale := newShaped()
				stale.Entity, stale.Version = first.Entity, 0
				if _, _, err := inbox.Handle(ctx, stale); !errors.Is(err, idem.ErrStale) {
					t.Fatalf("an older version of %s: %v, want ErrStale", first.Entity, err)
				}
			}

			// A batch, in one transaction: new keys (of every null
			// pattern), a key twice, the processed keys of every null
			// pattern; with a guard, a stale version, and two new
			// versions of one entity (the second delivered after the
			// batch, and stale).
			a, b := newShaped(), newShaped()
			batch := []shaped{a, b, a}
			want := []idem.Outcome{idem.Processed, idem.Processed, idem.Duplicate}
			for pattern := 1; pattern < 1<<len(nullable); pattern++ {
				batch, want = append(batch, withPattern(newShaped(), pattern)), append(want, idem.Processed)
			}
			for _, m := range msgs {
				batch, want = append(batch, m), append(want, idem.Duplicate)
			}
			added := len(batch) - len(msgs) - 1 // the new keys
			var staleAt []int
			if s.guard {
				old := newShaped()
				old.Entity, old.Version = first.Entity, 0
				newer, older := newShaped(), newShaped()
				newer.Version, older.Entity, older.Version = 5, newer.Entity, 4
				staleAt = []int{len(batch), len(batch) + 2}
				batch, want = append(batch, old, newer, older), append(want, 0, idem.Processed, 0)
				added++
			}
			runs.Store(0)
			results, err := inbox.HandleBatch(ctx, batch)
			if err != nil {
				t.Fatal(err)
			}
			for i, want := range want {
				r := results[i]
				if slices.Contains(staleAt, i) {
					if !errors.Is(r.Err, idem.ErrStale) {
						t.Errorf("batch message %d, an older version: %v, %v; want ErrStale", i, r.Outcome, r.Err)
					}
					continue
				}
				if r.Err != nil || r.Outcome != want || r.Value != batch[i].Body {
					t.Errorf("batch message %d: %q, %v, %v; want %q, %v", i, r.Value, r.Outcome, r.Err, batch[i].Body, want)
				}
			}
			if got := runs.Load(); got != int64(added) {
				t.Errorf("the batch ran the handler %d times; want %d, once for each new key", got, added)
			}

			rows := countRows(t, db, `SELECT count(*) FROM `+inboxsql.TableName(s.table))
			if rows != len(msgs)+added {
				t.Fatalf("%d inbox rows, want %d (no row for a stale message)", rows, len(msgs)+added)
			}
			if n, err := inbox.Purge(ctx); err != nil || n != int64(rows) {
				t.Fatalf("Purge: %d, %v; want %d rows", n, err, rows)
			}
		})
	}
}

// TestStatementsExternal runs every statement of a mode=external table:
// the claim of a new key, its heartbeats (a handler that outlives a third
// of the lease), completion, the lookup of a duplicate and of another
// payload, the release of a failed attempt and the takeover of the
// released claim by its retry, the sweep and its stuck report, the purge.
func TestStatementsExternal(t *testing.T) {
	h := model.Handler{Consumer: "test.shape.external", Table: "idem_shapes.external",
		Key: []model.KeyPart{textPart.part, nullIntPart.part, uuidPart.part}}
	in := inboxsql.ExternalSchema(h)
	db := shapeDB(t, render(t, migrate.ExternalKind{Create: inboxsql.CreateExternal, Alter: inboxsql.AlterExternal}, in))
	ctx := context.Background()
	table := idemimpl.ExternalTable[shaped]{Consumer: h.Consumer, Name: inboxsql.TableName(h.Table), Columns: columns(h, nil),
		Key: shape{parts: []keyPart{textPart, nullIntPart, uuidPart}}.key, Lease: 300 * time.Millisecond}
	failing := map[string]bool{}
	inbox := idemimpl.NewExternalInbox(db.Pool, table, func(ctx context.Context, m shaped) (string, error) {
		if failing[m.Body] {
			delete(failing, m.Body)
			return "", errors.New("the provider timed out")
		}
		if strings.HasSuffix(m.Body, "-slow") {
			time.Sleep(500 * time.Millisecond) // beyond the lease: only the heartbeats keep the claim
		}
		return m.Body, nil
	})
	slow := newShaped()
	slow.Body += "-slow"
	one := int64(1)
	withNull, withPart := newShaped(), newShaped()
	withPart.NullInt = &one
	for _, m := range []shaped{slow, withNull, withPart} {
		if r, o, err := inbox.Handle(ctx, m); err != nil || o != idem.Processed || r != m.Body {
			t.Fatalf("Handle(%s) = %q, %v, %v; want Processed", m.Body, r, o, err)
		}
		if r, o, err := inbox.Handle(ctx, m); err != nil || o != idem.Duplicate || r != m.Body {
			t.Fatalf("redelivery of %s = %q, %v, %v; want Duplicate", m.Body, r, o, err)
		}
	}
	other := withNull
	other.Body += "-other"
	if _, _, err := inbox.Handle(ctx, other); !errors.Is(err, idem.ErrKeyReused) {
		t.Fatalf("another payload: %v, want ErrKeyReused", err)
	}
	retried := newShaped()
	failing[retried.Body] = true
	if _, _, err := inbox.Handle(ctx, retried); err == nil {
		t.Fatal("the failing attempt succeeded")
	}
	if _, o, err := inbox.Handle(ctx, retried); err != nil || o != idem.Processed {
		t.Fatalf("the retry of a released claim: %v, %v; want Processed", o, err)
	}
	var attempts int
	if err := db.Pool.QueryRow(ctx, `SELECT attempts FROM idem_shapes.external WHERE key_text = $1`, retried.Text).Scan(&attempts); err != nil || attempts != 2 {
		t.Fatalf("attempts of the retried key: %d, %v; want 2", attempts, err)
	}

	// A claim whose worker died: running, its lease expired.
	dead := newShaped()
	if _, err := db.Pool.Exec(ctx, `INSERT INTO idem_shapes.external (idem_key, key_text, key_uuid, fingerprint, status, fence, attempts, lease_until)
		VALUES ('dead', $1, $2, '\x00', 'running', 1, 5, now() - interval '1 minute')`, dead.Text, pgtype.UUID{Bytes: dead.UUID, Valid: true}); err != nil {
		t.Fatal(err)
	}
	rep, err := inbox.Sweep(ctx)
	if err != nil || rep.Reset != 1 || len(rep.Stuck) != 1 || rep.Stuck[0].Attempts != 6 {
		t.Fatalf("Sweep: %+v, %v; want 1 reset, 1 stuck claim of 6 attempts", rep, err)
	}
	time.Sleep(10 * time.Millisecond)
	if n, err := inbox.Purge(ctx); err != nil || n != 5 {
		t.Fatalf("Purge: %d, %v; want the 5 rows that are not running", n, err)
	}
}

// TestStatementsEntity runs the statements of a mode=entity consumer on a
// business table keyed by a text and an integer column, one of them a
// keyword: the check before COMMIT of a handler that inserted its row, the
// lookup after a duplicate's collision, and the check that refuses a
// handler that did not insert its row.
func TestStatementsEntity(t *testing.T) {
	h := model.Handler{Consumer: "test.shape.entity", Mode: model.ModeEntity,
		Entity: &model.Entity{Table: "idem_shapes.enrollments", Columns: []string{"course", "user"}},
		Key:    []model.KeyPart{textPart.part, intPart.part}}
	business := []byte(`-- +goose Up
CREATE TABLE idem_shapes.enrollments (course text NOT NULL, "user" bigint NOT NULL, PRIMARY KEY (course, "user"));
-- +goose Down
DROP TABLE idem_shapes.enrollments;
`)
	db := shapeDB(t, business, render(t, migrate.EntityKind{Create: inboxsql.CreateEntity}, inboxsql.EntitySchema(h)))
	ctx := context.Background()
	table := idemimpl.EntityTable[shaped]{Consumer: h.Consumer, Name: inboxsql.TableName(h.Entity.Table),
		Columns: columns(h, h.Entity.Columns), Key: shape{parts: []keyPart{textPart, intPart}}.key}
	inbox := idemimpl.NewEntityInbox(db.Pool, table, idemimpl.NoResult(func(ctx context.Context, tx pgx.Tx, m shaped) error {
		if strings.HasSuffix(m.Body, "-none") {
			return nil
		}
		_, err := tx.Exec(ctx, `INSERT INTO idem_shapes.enrollments (course, "user") VALUES ($1, $2)`, m.Text, m.Int)
		return err
	}), nil)
	m := newShaped()
	if _, o, err := inbox.Handle(ctx, m); err != nil || o != idem.Processed {
		t.Fatalf("first delivery: %v, %v", o, err)
	}
	if _, o, err := inbox.Handle(ctx, m); err != nil || o != idem.Duplicate {
		t.Fatalf("redelivery: %v, %v; want Duplicate", o, err)
	}
	other := m
	other.Body += "-other"
	if _, _, err := inbox.Handle(ctx, other); !errors.Is(err, idem.ErrKeyReused) {
		t.Fatalf("another payload: %v, want ErrKeyReused", err)
	}
	none := newShaped()
	none.Body += "-none"
	if _, _, err := inbox.Handle(ctx, none); err == nil || !strings.Contains(err.Error(), "row") {
		t.Fatalf("a handler that inserted no row: %v, want the check's error", err)
	}
	if n := countRows(t, db, `SELECT count(*) FROM idem_shapes.enrollments`); n != 1 {
		t.Fatalf("%d rows, want 1", n)
	}
}
