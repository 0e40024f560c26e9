package inboxsql

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemimpl"
	"github.com/idemgen/idemgen/idem/idemtest"
	"github.com/idemgen/idemgen/internal/model"
)

// stamped is a shipment with its sender's time, for a partitioned inbox
// keyed by (Carrier, Parcel), Parcel nullable.
type stamped struct {
	Carrier string
	Parcel  *int64
	Note    string
	At      time.Time
}

// A partitioned inbox with a nullable key part: the bucket is in every
// partial unique index (or in the NULLS NOT DISTINCT constraint), which
// PostgreSQL requires of a partitioned table, and the key still decides
// within a bucket.
func TestPartitionedNullableKeyParts(t *testing.T) {
	for _, strategy := range []struct {
		name             string
		nullsNotDistinct bool
	}{{"partial_indexes", false}, {"nulls_not_distinct", true}} {
		t.Run(strategy.name, func(t *testing.T) {
			h := shipmentHandler(strategy.nullsNotDistinct)
			h.Partition = &model.Partition{Bucket: model.BucketDay, Time: model.KeyPart{Path: "At", Kind: model.KeyTime, Column: model.BucketColumn}}
			db := idemtest.New(t, migrations(createFile(Schema(h))))
			ctx := context.Background()
			table := declare(h, func(msg stamped) ([]any, error) {
				var parcel any
				if msg.Parcel != nil {
					parcel = *msg.Parcel
				}
				return []any{msg.Carrier, parcel, msg.At}, nil
			}, nil)
			table.Partition, table.Retain = idemimpl.Day, 72*time.Hour
			inbox := idemimpl.NewInbox(db.Pool, table, func(ctx context.Context, tx pgx.Tx, msg stamped) (string, error) {
				_, err := tx.Exec(ctx, `INSERT INTO effects VALUES ($1)`, msg.Carrier+"/"+msg.At.Format(time.RFC3339Nano))
				return msg.Carrier, err
			})
			if _, err := inbox.Purge(ctx); err != nil { // the partitions
				t.Fatal(err)
			}
			// Check finds the bucket in the arbiter of each null pattern.
			if err := inbox.Check(ctx); err != nil {
				t.Fatalf("Check: %v", err)
			}

			now := time.Now().UTC()
			today := stamped{Carrier: "dhl", Note: "x", At: now}
			outcomes := deliverConcurrently(t, db, 16, func() (idem.Outcome, error) {
				_, o, err := inbox.Handle(ctx, today)
				return o, err
			})
			if outcomes[idem.Processed] != 1 || outcomes[idem.Duplicate] != 15 {
				t.Fatalf("(dhl, NULL, today) x16: %v, want 1 processed and 15 duplicates", outcomes)
			}
			// The same key in another bucket is another row.
			yesterday := today
			yesterday.At = now.Add(-24 * time.Hour)
			for _, want := range []idem.Outcome{idem.Processed, idem.Duplicate} {
				if _, o, err := inbox.Handle(ctx, yesterday); err != nil || o != want {
					t.Fatalf("(dhl, NULL, yesterday): %v, %v; want %v", o, err, want)
				}
			}
			other := today
			other.Note = "other"
			if _, _, err := inbox.Handle(ctx, other); !errors.Is(err, idem.ErrKeyReused) {
				t.Fatalf("(dhl, NULL, today) with another payload: %v, want ErrKeyReused", err)
			}
			old := today
			old.At = now.Add(-73 * time.Hour)
			if _, _, err := inbox.Handle(ctx, old); !errors.Is(err, idem.ErrOutsideWindow) {
				t.Fatalf("a message older than the retention: %v, want ErrOutsideWindow", err)
			}
			var rows int
			if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM idem_test_shipment`).Scan(&rows); err != nil || rows != 2 {
				t.Fatalf("%d inbox rows (%v); want 2, one per bucket", rows, err)
			}
		})
	}
}
