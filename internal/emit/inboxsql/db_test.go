package inboxsql

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemimpl"
	"github.com/idemgen/idemgen/idem/idemtest"
	"github.com/idemgen/idemgen/internal/migrate"
	"github.com/idemgen/idemgen/internal/model"
)

// These tests run the SQL idemgen writes against a real PostgreSQL: the
// migrations of nullable keys (both strategies), of the stale-message guard
// and of every additive change, with the runtime on top.

// shipment is keyed by (Carrier, Parcel), Parcel nullable.
type shipment struct {
	Carrier string
	Parcel  *int64
	Note    string
}

func shipmentHandler(nullsNotDistinct bool) model.Handler {
	return model.Handler{
		Consumer: "test.shipment", Table: "idem_test_shipment", NullsNotDistinct: nullsNotDistinct,
		Key: []model.KeyPart{
			{Path: "Carrier", Column: "key_carrier", Kind: model.KeyString},
			{Path: "Parcel", Column: "key_parcel", Kind: model.KeyInt, Bits: 64, Null: &model.Null{Pointer: true}},
		},
	}
}

func shipmentTable(h model.Handler) idemimpl.Table[shipment] {
	return declare(h, func(msg shipment) ([]any, error) {
		var parcel any
		if msg.Parcel != nil {
			parcel = *msg.Parcel
		}
		return []any{msg.Carrier, parcel}, nil
	}, nil)
}

// declare returns the idemimpl.Table that idemgen declares for h: its names and
// key columns as the generated code states them, the guard's versions table
// when h has one (order then reads entity and version).
func declare[M any](h model.Handler, key func(M) ([]any, error), order func(M) (any, int64, error)) idemimpl.Table[M] {
	t := idemimpl.Table[M]{Consumer: h.Consumer, Name: TableName(h.Table), Key: key, Retain: time.Hour}
	for _, c := range KeyColumns(h, nil) {
		t.Columns = append(t.Columns, idemimpl.Column{Field: c.Field, Name: c.Name, Type: c.Type, Nullable: c.Nullable})
	}
	if in := Schema(h); in.Guard != nil {
		t.Order, t.Versions, t.EntityType = order, VersionsTable(in), in.Guard.Type
	}
	return t
}

const effects = `-- +goose Up
CREATE TABLE effects (key text NOT NULL);
-- +goose Down
DROP TABLE effects;
`

// inboxKind renders whole inbox migrations, header included, as idemgen
// writes them.
var inboxKind = migrate.InboxKind{Create: Create, Alter: Alter}

// createFile is the migration that creates in.
func createFile(in model.Inbox) []byte {
	_, content, _ := inboxKind.Render(nil, in)
	return content
}

// alterFile is the migration that changes prev into next.
func alterFile(t *testing.T, prev, next model.Inbox) []byte {
	t.Helper()
	_, content, err := inboxKind.Render(prev, next)
	if err != nil {
		t.Fatalf("no migration from %s to %s: %v", migrate.SchemaLine(prev), migrate.SchemaLine(next), err)
	}
	return content
}

func migrations(files ...[]byte) fstest.MapFS {
	fsys := fstest.MapFS{"00001_effects.sql": {Data: []byte(effects)}}
	for i, f := range files {
		fsys[fmt.Sprintf("%05d_idem.sql", i+2)] = &fstest.MapFile{Data: f}
	}
	return fsys
}

func recordEffect(ctx context.Context, tx pgx.Tx, msg shipment) (string, error) {
	key := msg.Carrier + "/null"
	if msg.Parcel != nil {
		key = fmt.Sprintf("%s/%d", msg.Carrier, *msg.Parcel)
	}
	_, err := tx.Exec(ctx, `INSERT INTO effects VALUES ($1)`, key)
	return key, err
}

func effectCount(t *testing.T, db *idemtest.DB, key string) int {
	t.Helper()
	var n int
	if err := db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM effects WHERE key = $1`, key).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestNullableKeyParts(t *testing.T) {
	for _, strategy := range []struct {
		name             string
		nullsNotDistinct bool
	}{{"partial_indexes", false}, {"nulls_not_distinct", true}} {
		t.Run(strategy.name, func(t *testing.T) {
			h := shipmentHandler(strategy.nullsNotDistinct)
			db := idemtest.New(t, migrations(createFile(Schema(h))))
			ctx := context.Background()
			inbox := idemimpl.NewInbox(db.Pool, shipmentTable(h), recordEffect)

			// 16 concurrent deliveries of (dhl, NULL): one effect.
			nullMsg := shipment{Carrier: "dhl", Note: "x"}
			outcomes := deliverConcurrently(t, db, 16, func() (idem.Outcome, error) {
				_, o, err := inbox.Handle(ctx, nullMsg)
				return o, err
			})
			if outcomes[idem.Processed] != 1 || outcomes[idem.Duplicate] != 15 {
				t.Fatalf("(dhl, NULL) x16: %v, want 1 processed and 15 duplicates", outcomes)
			}
			if n := effectCount(t, db, "dhl/null"); n != 1 {
				t.Fatalf("(dhl, NULL) applied %d times", n)
			}

			// (dhl, 1) is another message than (dhl, NULL).
			one := int64(1)
			for _, want := range []idem.Outcome{idem.Processed, idem.Duplicate} {
				if _, o, err := inbox.Handle(ctx, shipment{Carrier: "dhl", Parcel: &one, Note: "x"}); err != nil || o != want {
					t.Fatalf("(dhl, 1): %v, %v; want %v", o, err, want)
				}
			}
			if _, o, err := inbox.Handle(ctx, nullMsg); err != nil || o != idem.Duplicate {
				t.Fatalf("(dhl, NULL) after (dhl, 1): %v, %v; want Duplicate", o, err)
			}
			// The payload check works for NULL keys too.
			if _, _, err := inbox.Handle(ctx, shipment{Carrier: "dhl", Note: "other"}); !errors.Is(err, idem.ErrKeyReused) {
				t.Fatalf("(dhl, NULL) with another payload: %v, want ErrKeyReused", err)
			}
			if n := effectCount(t, db, "dhl/1"); n != 1 {
				t.Errorf("(dhl, 1) applied %d times", n)
			}
		})
	}
}

// deliverConcurrently runs deliver n times at once, on a pool warmed to n
// connections, and counts the outcomes.
func deliverConcurrently(t *testing.T, db *idemtest.DB, n int, deliver func() (idem.Outcome, error)) map[idem.Outcome]int {
	t.Helper()
	idemtest.Warm(t, db.Pool, min(n, idemtest.MaxConns))
	var mu sync.Mutex
	outcomes := map[idem.Outcome]int{}
	idemtest.AtOnce(n, func(int) {
		o, err := deliver()
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			t.Errorf("delivery: %v", err)
		}
		outcomes[o]++
	})
	return outcomes
}

// priced is a price change of a SKU, with a unique event id and a version
// per SKU.
type priced struct {
	Event   string
	SKU     string
	Version int64
}

func TestStaleGuardUnderConcurrentOutOfOrderDeliveries(t *testing.T) {
	h := model.Handler{
		Consumer: "test.price", Table: "idem_test_price",
		Key:   []model.KeyPart{{Path: "Event", Column: "key_event", Kind: model.KeyString}},
		Guard: &model.Guard{Entity: model.KeyPart{Path: "SKU", Column: "entity", Kind: model.KeyString}, Version: model.KeyPart{Path: "Version", Kind: model.KeyInt, Bits: 64}},
	}
	prices := []byte(`-- +goose Up
CREATE TABLE prices (sku text PRIMARY KEY, version bigint NOT NULL);
CREATE TABLE applied (seq bigint GENERATED ALWAYS AS IDENTITY, sku text, version bigint);
-- +goose Down
DROP TABLE applied;
DROP TABLE prices;
`)
	fsys := migrations(createFile(Schema(h)))
	fsys["00003_prices.sql"] = &fstest.MapFile{Data: prices}
	db := idemtest.New(t, fsys)
	ctx := context.Background()

	table := declare(h, func(m priced) ([]any, error) { return []any{m.Event}, nil },
		func(m priced) (any, int64, error) { return m.SKU, m.Version, nil })
	inbox := idemimpl.NewInbox(db.Pool, table, idemimpl.NoResult(func(ctx context.Context, tx pgx.Tx, m priced) error {
		if _, err := tx.Exec(ctx, `INSERT INTO prices VALUES ($1, $2) ON CONFLICT (sku) DO UPDATE SET version = EXCLUDED.version`, m.SKU, m.Version); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO applied (sku, version) VALUES ($1, $2)`, m.SKU, m.Version)
		return err
	}), idem.WithClaimWait(idem.DefaultClaimWait*5))

	// Versions 1..30 of one SKU, delivered at once in random order.
	const versions = 30
	order := rand.Perm(versions)
	var mu sync.Mutex
	var next int
	results := map[string]int{}
	deliverConcurrently(t, db, versions, func() (idem.Outcome, error) {
		mu.Lock()
		v := int64(order[next] + 1)
		next++
		mu.Unlock()
		_, o, err := inbox.Handle(ctx, priced{Event: fmt.Sprint("ev-", v), SKU: "sku-1", Version: v})
		mu.Lock()
		defer mu.Unlock()
		switch {
		case errors.Is(err, idem.ErrStale):
			results["stale"]++
			return 0, nil
		case err != nil:
			return 0, err
		}
		results[o.String()]++
		return o, nil
	})

	var final int64
	if err := db.Pool.QueryRow(ctx, `SELECT version FROM prices WHERE sku = 'sku-1'`).Scan(&final); err != nil {
		t.Fatal(err)
	}
	if final != versions {
		t.Errorf("final version %d, want the highest, %d (results %v)", final, versions, results)
	}
	// In commit order, every applied version is greater than the one before.
	rows, err := db.Pool.Query(ctx, `SELECT version FROM applied ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	applied, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(applied); i++ {
		if applied[i] <= applied[i-1] {
			t.Errorf("applied versions out of order or repeated: %v", applied)
			break
		}
	}
	if results["processed"] != len(applied) || results["processed"]+results["stale"] != versions {
		t.Errorf("results %v, applied %v: every delivery must be processed or stale", results, applied)
	}
	t.Logf("%d versions delivered at once: %d applied in order %v, %d stale", versions, len(applied), applied, results["stale"])

	// A redelivery of an applied version is a Duplicate, of a stale one
	// stale again; an older version arriving now is stale.
	if _, o, err := inbox.Handle(ctx, priced{Event: fmt.Sprint("ev-", versions), SKU: "sku-1", Version: versions}); err != nil || o != idem.Duplicate {
		t.Errorf("redelivery of the last version: %v, %v; want Duplicate", o, err)
	}
	if _, _, err := inbox.Handle(ctx, priced{Event: "ev-late", SKU: "sku-1", Version: 3}); !errors.Is(err, idem.ErrStale) {
		t.Errorf("an old version arriving late: %v, want ErrStale", err)
	}
}

// TestAdditiveChangesMigrate applies a base migration, records keys, applies
// each additive change, checks that the recorded keys keep their meaning, and
// goes down to 0 and up again.
func TestAdditiveChangesMigrate(t *testing.T) {
	base := model.Inbox{Consumer: "test.evolve", Table: "idem_test_evolve", Unique: model.PrimaryKey,
		Key: []model.Column{{Name: "key_id", Type: "text"}, {Name: "key_seq", Type: "integer"}}}
	addNullable := base
	addNullable.Key = append(slices.Clone(base.Key), model.Column{Name: "key_batch", Type: "text", Nullable: true})
	addNullable.Unique = model.PartialIndexes
	widened := addNullable
	widened.Key = slices.Clone(addNullable.Key)
	widened.Key[1].Type = "bigint"
	nnd := widened
	nnd.Unique = model.NullsNotDistinct
	guarded := nnd
	guarded.Guard = &model.Column{Name: "entity", Type: "text"}

	steps := []model.Inbox{base, addNullable, widened, nnd, guarded}
	files := [][]byte{createFile(base)}
	for i := 1; i < len(steps); i++ {
		files = append(files, alterFile(t, steps[i-1], steps[i]))
	}
	fsys := migrations(files[0])
	db := idemtest.New(t, fsys)
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `INSERT INTO idem_test_evolve (key_id, key_seq, fingerprint) VALUES ('a', 1, '\x00')`); err != nil {
		t.Fatal(err)
	}
	for i, f := range files[1:] {
		fsys[fmt.Sprintf("%05d_idem.sql", i+3)] = &fstest.MapFile{Data: f}
	}
	p := db.Migrations(t, fsys)
	if _, err := p.Up(ctx); err != nil {
		t.Fatalf("up through every change: %v", err)
	}
	// The row recorded before the changes is the key (a, 1, NULL) now, and
	// still unique: the same key cannot be claimed again.
	tag, err := db.Pool.Exec(ctx, `INSERT INTO idem_test_evolve (key_id, key_seq, fingerprint) VALUES ('a', 1, '\x00') ON CONFLICT DO NOTHING`)
	if err != nil || tag.RowsAffected() != 0 {
		t.Fatalf("re-claiming the recorded key: %v rows, %v; want a conflict", tag.RowsAffected(), err)
	}
	tag, err = db.Pool.Exec(ctx, `INSERT INTO idem_test_evolve (key_id, key_seq, key_batch, fingerprint) VALUES ('a', 1, 'b', '\x00') ON CONFLICT DO NOTHING`)
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("claiming (a, 1, b): %v rows, %v; want a new row", tag.RowsAffected(), err)
	}
	if _, err := db.Pool.Exec(ctx, `DELETE FROM idem_test_evolve WHERE key_batch IS NOT NULL`); err != nil {
		t.Fatal(err)
	}
	if _, err := p.DownTo(ctx, 0); err != nil {
		t.Fatalf("down to 0: %v", err)
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatalf("up again: %v", err)
	}
}

// TestKeywordsCoverTheServer: every keyword that the test server's parser
// does not accept as a bare name everywhere (pg_get_keywords' categories R,
// T and C) is quoted.
func TestKeywordsCoverTheServer(t *testing.T) {
	db := idemtest.New(t, nil)
	rows, err := db.Pool.Query(context.Background(), `SELECT word FROM pg_get_keywords() WHERE catcode IN ('R', 'T', 'C') ORDER BY word`)
	if err != nil {
		t.Fatal(err)
	}
	words, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(words) < 100 {
		t.Fatalf("pg_get_keywords: %d words, %v", len(words), err)
	}
	for _, w := range words {
		if Quote(w) == w {
			t.Errorf("keyword %q is written bare", w)
		}
	}
}

// TestReservedNamesApply creates, evolves, migrates down and up, and uses
// inboxes whose table, schema and columns are keywords or need quotes for
// another reason.
func TestReservedNamesApply(t *testing.T) {
	for _, table := range []string{"order", "user", "select", "between", "Weird.Table", "user.order"} {
		t.Run(table, func(t *testing.T) {
			in := model.Inbox{Consumer: "reserved", Table: table, Unique: model.PartialIndexes, Key: []model.Column{
				{Name: "order", Type: "text"},
				{Name: "Key Part", Type: "bigint", Nullable: true},
			}, Guard: &model.Column{Name: "entity", Type: "text"}}
			next := in
			next.Key = append(slices.Clone(in.Key), model.Column{Name: "user", Type: "text", Nullable: true})
			files := fstest.MapFS{
				"00002_create.sql": {Data: createFile(in)},
				"00003_alter.sql":  {Data: alterFile(t, in, next)},
			}
			if schema, _ := split(table); schema != "" {
				files["00001_schema.sql"] = &fstest.MapFile{Data: []byte("-- +goose Up\nCREATE SCHEMA IF NOT EXISTS " + Quote(schema) +
					";\n-- +goose Down\nDROP SCHEMA " + Quote(schema) + ";\n")}
			}
			db := idemtest.New(t, files)
			provider := db.Migrations(t, files)
			ctx := context.Background()
			if _, err := provider.DownTo(ctx, 0); err != nil {
				t.Fatalf("down to 0: %v", err)
			}
			if _, err := provider.Up(ctx); err != nil {
				t.Fatalf("up again: %v", err)
			}

			// The runtime's statements of the inbox, built from its
			// declaration, on the names that need quotes.
			type reserved struct {
				Order   string
				Part    *int64
				User    *string
				Entity  string
				Version int64
			}
			table := declare(handlerOf(next), func(m reserved) ([]any, error) {
				key := []any{m.Order, nil, nil}
				if m.Part != nil {
					key[1] = *m.Part
				}
				if m.User != nil {
					key[2] = *m.User
				}
				return key, nil
			}, func(m reserved) (any, int64, error) { return m.Entity, m.Version, nil })
			table.Retain = 0
			inbox := idemimpl.NewInbox(db.Pool, table, func(context.Context, pgx.Tx, reserved) (string, error) { return "r", nil })
			// Its Check finds the quoted columns, the partial indexes
			// (their predicates quoted too) and the versions table.
			if err := inbox.Check(ctx); err != nil {
				t.Fatalf("Check: %v", err)
			}
			part, user := int64(1), "u"
			for _, c := range []struct {
				msg  reserved
				want idem.Outcome
			}{
				{reserved{Order: "o", Part: &part, User: &user, Entity: "e", Version: 1}, idem.Processed},
				{reserved{Order: "o", Part: &part, User: &user, Entity: "e", Version: 1}, idem.Duplicate},
				{reserved{Order: "o", Entity: "f", Version: 1}, idem.Processed},
				{reserved{Order: "o", Entity: "f", Version: 1}, idem.Duplicate},
			} {
				if r, o, err := inbox.Handle(ctx, c.msg); err != nil || o != c.want || r != "r" {
					t.Fatalf("Handle(%+v) = %q, %v, %v; want r, %v", c.msg, r, o, err, c.want)
				}
			}
			if _, _, err := inbox.Handle(ctx, reserved{Order: "p", Entity: "e", Version: 1}); !errors.Is(err, idem.ErrStale) {
				t.Fatalf("an old version: %v, want ErrStale", err)
			}
			if n, err := inbox.Purge(ctx); err != nil || n != 2 {
				t.Fatalf("purge: %d, %v; want 2 rows", n, err)
			}
		})
	}
}

// TestNamedSchemasReadsTheMigration: idemtest finds the schema of a
// schema-qualified inbox in the line its migration records the schema in.
func TestNamedSchemasReadsTheMigration(t *testing.T) {
	a := model.Inbox{Consumer: "a", Table: "app.inbox_a", Unique: model.PrimaryKey, Key: []model.Column{{Name: "key_id", Type: "text"}}}
	b := model.Inbox{Consumer: "b", Table: "idem_b", Unique: model.PrimaryKey, Key: []model.Column{{Name: "key_id", Type: "text"}}}
	got, err := idemtest.NamedSchemas(fstest.MapFS{"00001_a.sql": {Data: createFile(a)}, "00002_b.sql": {Data: createFile(b)}})
	if err != nil || !slices.Equal(got, []string{"app"}) {
		t.Errorf("NamedSchemas = %q, %v; want [app]", got, err)
	}
}
