package telemetry

import (
	"context"
	"testing"

	"github.com/idemgen/idemgen/idem/idemtest"
)

// readingFixture is the fixture of the generated tests in idem_gen_test.go
// (fixture= of RecordReading's directive): a reading with a unique id and no
// time (the suite times it, now or at a bucket's edge), and the count of its
// stored rows, so that every scenario proves it was stored exactly once.
func readingFixture(t testing.TB, db *idemtest.DB) idemtest.Fixture[idemtest.NoReceiver, Reading] {
	return idemtest.Fixture[idemtest.NoReceiver, Reading]{
		Message: Reading{ReadingID: idemtest.UniqueString[string](), DeviceID: "dev-1", Value: 21.5},
		Variant: func(msg Reading) Reading {
			msg.Value++
			return msg
		},
		Effect: func(ctx context.Context, db *idemtest.DB, msg Reading) (int, error) {
			var n int
			err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM readings WHERE reading_id = $1`, msg.ReadingID).Scan(&n)
			return n, err
		},
		Conflict: func(ctx context.Context, db *idemtest.DB, msg Reading) error {
			// The reading was stored through another path: the handler's
			// INSERT violates readings_pkey.
			_, err := db.Pool.Exec(ctx, `INSERT INTO readings (reading_id, device_id, taken_at, value) VALUES ($1, 'other', now(), 0)`,
				msg.ReadingID)
			return err
		},
	}
}
