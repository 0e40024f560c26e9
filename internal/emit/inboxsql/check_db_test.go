package inboxsql

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemimpl"
	"github.com/idemgen/idemgen/idem/idemtest"
	"github.com/idemgen/idemgen/internal/migrate"
	"github.com/idemgen/idemgen/internal/model"
	outboxmigrations "github.com/idemgen/idemgen/migrations"
)

// These tests run each mode's Check in a real PostgreSQL, against the tables
// that idemgen's migrations create. With the migrations applied, Check
// returns nil. Otherwise it returns an error wrapping idem.ErrNotMigrated.
// The error names what is missing or differs, and the migration to apply.

// checkMigration is the migration the declarations of these tests name, as
// a generated one names its consumer's.
const checkMigration = "migrations/00002_idem_test_check.sql"

// checker is what every wrapper has.
type checker interface {
	Check(ctx context.Context) error
}

// wantCheck fails unless c.Check's error is nil (no parts) or wraps
// idem.ErrNotMigrated and holds every part.
func wantCheck(t *testing.T, c checker, parts ...string) {
	t.Helper()
	err := c.Check(context.Background())
	if len(parts) == 0 {
		if err != nil {
			t.Fatalf("Check = %v; want nil", err)
		}
		return
	}
	if !errors.Is(err, idem.ErrNotMigrated) {
		t.Fatalf("Check = %v; want idem.ErrNotMigrated", err)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("Check = %v\nwant it to say %q", err, p)
		}
	}
	t.Logf("Check: %v", err)
}

// exec runs DDL that changes a table by hand.
func exec(t *testing.T, db *idemtest.DB, sql string) {
	t.Helper()
	if _, err := db.Pool.Exec(context.Background(), sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// checkHandler is keyed by (Account, Ref).
func checkHandler() model.Handler {
	return model.Handler{
		Consumer: "test.check", Table: "idem_test_check",
		Key: []model.KeyPart{
			{Path: "Account", Column: "key_account", Kind: model.KeyString},
			{Path: "Ref", Column: "key_ref", Kind: model.KeyInt, Bits: 64},
		},
	}
}

type checkMsg struct {
	Account string
	Ref     int64
}

func checkInbox(db *idemtest.DB, h model.Handler) *idemimpl.Inbox[checkMsg, idem.None] {
	table := declare(h, func(m checkMsg) ([]any, error) { return []any{m.Account, m.Ref}, nil }, nil)
	table.Migration = checkMigration
	return idemimpl.NewInbox(db.Pool, table, idemimpl.NoResult(func(context.Context, pgx.Tx, checkMsg) error { return nil }))
}

func TestCheckTx(t *testing.T) {
	h := checkHandler()
	migrated := migrations(createFile(Schema(h)))

	t.Run("migrated", func(t *testing.T) {
		wantCheck(t, checkInbox(idemtest.New(t, migrated), h))
	})
	t.Run("without_its_migration", func(t *testing.T) {
		wantCheck(t, checkInbox(idemtest.New(t, migrations()), h),
			"idem: consumer test.check: table idem_test_check does not exist: apply "+checkMigration)
	})
	t.Run("key_column_missing", func(t *testing.T) {
		db := idemtest.New(t, migrated)
		exec(t, db, `ALTER TABLE idem_test_check DROP COLUMN key_ref`)
		wantCheck(t, checkInbox(db, h), "table idem_test_check: no column key_ref (bigint)",
			"apply the consumer's migrations from "+checkMigration+" on, or undo what was changed by hand")
	})
	t.Run("key_column_of_another_type", func(t *testing.T) {
		db := idemtest.New(t, migrated)
		exec(t, db, `ALTER TABLE idem_test_check ALTER COLUMN key_ref TYPE integer`)
		wantCheck(t, checkInbox(db, h), "column key_ref is integer, not bigint")
	})
	t.Run("arbiter_missing", func(t *testing.T) {
		db := idemtest.New(t, migrated)
		exec(t, db, `ALTER TABLE idem_test_check DROP CONSTRAINT idem_test_check_pkey`)
		wantCheck(t, checkInbox(db, h), "no unique constraint or index over exactly (key_account, key_ref), which makes a second delivery of a key a duplicate")
	})
	t.Run("arbiter_over_other_columns", func(t *testing.T) {
		db := idemtest.New(t, migrated)
		exec(t, db, `ALTER TABLE idem_test_check DROP CONSTRAINT idem_test_check_pkey`)
		exec(t, db, `ALTER TABLE idem_test_check ADD PRIMARY KEY (key_account)`)
		wantCheck(t, checkInbox(db, h), "no unique constraint or index over exactly (key_account, key_ref)")
	})
	t.Run("arbiter_partial", func(t *testing.T) {
		db := idemtest.New(t, migrated)
		exec(t, db, `ALTER TABLE idem_test_check DROP CONSTRAINT idem_test_check_pkey`)
		exec(t, db, `CREATE UNIQUE INDEX ON idem_test_check (key_account, key_ref) WHERE status = 'done'`)
		wantCheck(t, checkInbox(db, h), "no unique constraint or index over exactly (key_account, key_ref)")
	})
	t.Run("a_unique_index_instead_of_the_primary_key", func(t *testing.T) {
		db := idemtest.New(t, migrated)
		exec(t, db, `ALTER TABLE idem_test_check DROP CONSTRAINT idem_test_check_pkey`)
		exec(t, db, `CREATE UNIQUE INDEX ON idem_test_check (key_ref, key_account)`)
		wantCheck(t, checkInbox(db, h))
	})
}

// A nullable key part: either a partial unique index per null pattern or
// one UNIQUE NULLS NOT DISTINCT constraint is the arbiter.
func TestCheckNullableKeyParts(t *testing.T) {
	for _, strategy := range []struct {
		name             string
		nullsNotDistinct bool
	}{{"partial_indexes", false}, {"nulls_not_distinct", true}} {
		t.Run(strategy.name, func(t *testing.T) {
			h := shipmentHandler(strategy.nullsNotDistinct)
			db := idemtest.New(t, migrations(createFile(Schema(h))))
			table := shipmentTable(h)
			table.Migration = checkMigration
			inbox := idemimpl.NewInbox(db.Pool, table, recordEffect)
			wantCheck(t, inbox)

			if strategy.nullsNotDistinct {
				exec(t, db, `ALTER TABLE idem_test_shipment DROP CONSTRAINT idem_test_shipment_key`)
			} else {
				exec(t, db, `DROP INDEX idem_test_shipment_key_null_parcel_idx`)
			}
			wantCheck(t, inbox, "neither UNIQUE NULLS NOT DISTINCT constraint over (key_carrier, key_parcel) nor unique index per null pattern",
				"(key_carrier) WHERE key_parcel IS NULL")
		})
	}
	t.Run("every_part_nullable", func(t *testing.T) {
		// The pattern with every part NULL has an index on an
		// expression, (true): at most one such row.
		h := model.Handler{Consumer: "test.maybe", Table: "idem_test_maybe",
			Key: []model.KeyPart{{Path: "Parcel", Column: "key_parcel", Kind: model.KeyInt, Bits: 64, Null: &model.Null{Pointer: true}}}}
		db := idemtest.New(t, migrations(createFile(Schema(h))))
		table := declare(h, func(msg shipment) ([]any, error) { return []any{msg.Parcel}, nil }, nil)
		inbox := idemimpl.NewInbox(db.Pool, table, recordEffect)
		wantCheck(t, inbox)
		exec(t, db, `DROP INDEX idem_test_maybe_key_null_parcel_idx`)
		wantCheck(t, inbox, "((true)) WHERE key_parcel IS NULL")
	})
	t.Run("nullable_part_made_NOT_NULL", func(t *testing.T) {
		h := shipmentHandler(false)
		db := idemtest.New(t, migrations(createFile(Schema(h))))
		table := shipmentTable(h)
		exec(t, db, `ALTER TABLE idem_test_shipment ALTER COLUMN key_parcel SET NOT NULL`)
		wantCheck(t, idemimpl.NewInbox(db.Pool, table, recordEffect), "column key_parcel is NOT NULL, but its key part may be NULL")
	})
}

// A partitioned inbox must be a partitioned table, with the bucket in its
// key.
func TestCheckPartitioned(t *testing.T) {
	h := checkHandler()
	h.Partition = &model.Partition{Bucket: model.BucketDay, Time: model.KeyPart{Path: "At", Kind: model.KeyTime, Column: model.BucketColumn}}
	partitioned := Schema(h)
	type stamped struct {
		checkMsg
		At any
	}
	inbox := func(db *idemtest.DB) checker {
		table := declare(h, func(m stamped) ([]any, error) { return []any{m.Account, m.Ref, m.At}, nil }, nil)
		table.Partition, table.Retain, table.Migration = idemimpl.Day, 72*time.Hour, checkMigration
		return idemimpl.NewInbox(db.Pool, table, idemimpl.NoResult(func(context.Context, pgx.Tx, stamped) error { return nil }))
	}
	wantCheck(t, inbox(idemtest.New(t, migrations(createFile(partitioned)))))

	plain := partitioned
	plain.Partition = ""
	plain.Key = append(plain.Key, model.Column{Name: model.BucketColumn, Type: "timestamptz"})
	wantCheck(t, inbox(idemtest.New(t, migrations(createFile(plain)))), "it is not partitioned (PARTITION BY RANGE (bucket))")
}

// The stale-message guard's versions table is the inbox's too.
func TestCheckGuard(t *testing.T) {
	h := checkHandler()
	h.Guard = &model.Guard{Entity: model.KeyPart{Path: "Account", Column: "entity", Kind: model.KeyString}, Version: model.KeyPart{Path: "Ref", Kind: model.KeyInt, Bits: 64}}
	db := idemtest.New(t, migrations(createFile(Schema(h))))
	table := declare(h, func(m checkMsg) ([]any, error) { return []any{m.Account, m.Ref}, nil },
		func(m checkMsg) (any, int64, error) { return m.Account, m.Ref, nil })
	table.Migration = checkMigration
	inbox := idemimpl.NewInbox(db.Pool, table, idemimpl.NoResult(func(context.Context, pgx.Tx, checkMsg) error { return nil }))
	wantCheck(t, inbox)
	exec(t, db, `DROP TABLE idem_test_check_versions`)
	wantCheck(t, inbox, "table idem_test_check_versions does not exist: apply the consumer's migrations from "+checkMigration+" on")
}

// A publishing inbox needs the outbox table as this runtime's statements
// use it.
func TestCheckOutbox(t *testing.T) {
	h := checkHandler()
	const outboxMigration = "migrations/00003_idem_outbox.sql"
	inbox := func(db *idemtest.DB) checker {
		table := declare(h, func(m checkMsg) ([]any, error) { return []any{m.Account, m.Ref}, nil }, nil)
		table.Migration, table.OutboxMigration = checkMigration, outboxMigration
		return idemimpl.NewPublishingInbox(db.Pool, table,
			idemimpl.NoResultPublishing(func(context.Context, pgx.Tx, *idem.Outbox, checkMsg) error { return nil }))
	}
	files := migrations(createFile(Schema(h)))
	wantCheck(t, inbox(idemtest.New(t, files)), "table idem_outbox does not exist: apply "+outboxMigration)

	names, err := fs.Glob(outboxmigrations.FS, "*.sql")
	if err != nil || len(names) < 2 {
		t.Fatalf("the outbox migrations: %v, %v", names, err)
	}
	copyOutbox := func(i int) {
		data, err := fs.ReadFile(outboxmigrations.FS, names[i])
		if err != nil {
			t.Fatal(err)
		}
		_, name, _ := strings.Cut(names[i], "_")
		files[fmt.Sprintf("%05d_%s", 10+i, name)] = &fstest.MapFile{Data: data}
	}
	for i := range len(names) - 1 {
		copyOutbox(i)
	}
	// Without the runtime's last outbox migration, the outbox is out of
	// date.
	_, last, _ := strings.Cut(strings.TrimSuffix(names[len(names)-1], ".sql"), "_")
	wantCheck(t, inbox(idemtest.New(t, files)), "table idem_outbox lacks the outbox migration "+last+": apply its copy migrations/*_"+last+".sql")
	copyOutbox(len(names) - 1)
	wantCheck(t, inbox(idemtest.New(t, files)))
}

// mode=external: the claims table, its idempotency key and primary key, and
// the key columns.
func TestCheckExternal(t *testing.T) {
	h := checkHandler()
	h.Mode = model.ModeExternal
	_, file, err := migrate.ExternalKind{Create: CreateExternal, Alter: AlterExternal}.Render(nil, ExternalSchema(h))
	if err != nil {
		t.Fatal(err)
	}
	inbox := func(db *idemtest.DB) checker {
		table := idemimpl.ExternalTable[checkMsg]{Consumer: h.Consumer, Name: TableName(h.Table), Migration: checkMigration,
			Key: func(m checkMsg) ([]any, error) { return []any{m.Account, m.Ref}, nil }}
		for _, c := range KeyColumns(h, nil) {
			table.Columns = append(table.Columns, idemimpl.Column{Field: c.Field, Name: c.Name, Type: c.Type, Nullable: c.Nullable})
		}
		return idemimpl.NewExternalInbox(db.Pool, table, idemimpl.NoResultExternal(func(context.Context, checkMsg) error { return nil }))
	}
	db := idemtest.New(t, migrations(file))
	wantCheck(t, inbox(db))
	wantCheck(t, inbox(idemtest.New(t, migrations())), "table idem_test_check does not exist: apply "+checkMigration)

	exec(t, db, `ALTER TABLE idem_test_check ALTER COLUMN key_account TYPE varchar(20)`)
	wantCheck(t, inbox(db), "column key_account is character varying, not text")
	exec(t, db, `ALTER TABLE idem_test_check DROP CONSTRAINT idem_test_check_pkey`)
	wantCheck(t, inbox(db), "no unique constraint or index over exactly (idem_key)")
}

// mode=entity: the business table is the user's; idemgen's migration adds
// its fingerprint column, and the key's unique constraint is the arbiter.
func TestCheckEntity(t *testing.T) {
	const orders = `-- +goose Up
CREATE TABLE orders (order_id text NOT NULL, sku text NOT NULL, CONSTRAINT orders_pkey PRIMARY KEY (order_id, sku));
-- +goose Down
DROP TABLE orders;
`
	h := checkHandler()
	h.Mode, h.Entity = model.ModeEntity, &model.Entity{Table: "orders", Columns: []string{"order_id", "sku"}}
	_, file, err := migrate.EntityKind{Create: CreateEntity}.Render(nil, EntitySchema(h))
	if err != nil {
		t.Fatal(err)
	}
	inbox := func(db *idemtest.DB, constraint string) checker {
		table := idemimpl.EntityTable[checkMsg]{Consumer: h.Consumer, Name: "orders", Migration: checkMigration, Constraint: constraint,
			Key: func(m checkMsg) ([]any, error) { return []any{m.Account, m.Ref}, nil }}
		for _, c := range KeyColumns(h, h.Entity.Columns) {
			table.Columns = append(table.Columns, idemimpl.Column{Field: c.Field, Name: c.Name, Type: c.Type})
		}
		return idemimpl.NewEntityInbox(db.Pool, table, idemimpl.NoResult(func(context.Context, pgx.Tx, checkMsg) error { return nil }), nil)
	}
	withTable := fstest.MapFS{"00001_orders.sql": {Data: []byte(orders)}}
	migrated := fstest.MapFS{"00001_orders.sql": {Data: []byte(orders)}, "00002_idem.sql": {Data: file}}

	db := idemtest.New(t, migrated)
	wantCheck(t, inbox(db, ""))
	wantCheck(t, inbox(db, "orders_pkey"))
	wantCheck(t, inbox(db, "orders_other"), "no unique constraint or index orders_other", "your migrations must create it")
	wantCheck(t, inbox(idemtest.New(t, withTable), ""),
		"table orders: no column idem_fingerprint (bytea): apply "+checkMigration)
	wantCheck(t, inbox(idemtest.New(t, nil), ""),
		"table orders does not exist: it is the handler's own table, which your migrations create (before "+checkMigration)

	exec(t, db, `ALTER TABLE orders DROP CONSTRAINT orders_pkey`)
	wantCheck(t, inbox(db, ""), "no unique constraint or index over exactly (order_id, sku)", "your migrations must create it")
	exec(t, db, `ALTER TABLE orders ALTER COLUMN idem_fingerprint DROP DEFAULT`)
	wantCheck(t, inbox(db, ""), "column idem_fingerprint has no default that reads the setting idem.fingerprint: apply "+checkMigration)
}

// mode=natural records nothing: Check only reaches the database.
func TestCheckNatural(t *testing.T) {
	db := idemtest.New(t, nil)
	table := idemimpl.NaturalTable[checkMsg]{Consumer: "test.natural", KeyFields: []string{"Account"},
		Key: func(m checkMsg) ([]any, error) { return []any{m.Account}, nil }}
	wantCheck(t, idemimpl.NewNaturalInbox(db.Pool, table, idemimpl.NoResult(func(context.Context, pgx.Tx, checkMsg) error { return nil })))
}
