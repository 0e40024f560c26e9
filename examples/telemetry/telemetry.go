// Package telemetry is a consumer built for volume: devices send readings,
// millions a day, each with the id its device gave it and the time it was
// taken. Its inbox is partitioned by the day of that time (partition=day
// time=TakenAt), so that keeping two weeks of deduplication costs one
// partition per day, and forgetting a day is dropping its partition, not
// deleting its rows one by one (docs/scale.md).
package telemetry

//go:generate go run github.com/idemgen/idemgen/cmd/idemgen -migrations migrations .

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"time"

	"github.com/jackc/pgx/v5"
)

// Reading is one measurement of a device. ReadingID and TakenAt are the
// device's own, the same in every copy the broker delivers.
type Reading struct {
	ReadingID string    `json:"reading_id"`
	DeviceID  string    `json:"device_id"`
	TakenAt   time.Time `json:"taken_at"`
	Value     float64   `json:"value"`
}

// RecordReading stores a reading. Its inbox keeps each reading's key for 14
// days in the partition of the day it was taken: a redelivery within them
// is a Duplicate, and a reading older than that is refused with
// idem.ErrOutsideWindow (dead-lettered) instead of being stored again.
//
//idem:handler consumer=telemetry.reading key=ReadingID partition=day time=TakenAt retain=336h fixture=readingFixture
func RecordReading(ctx context.Context, tx pgx.Tx, msg Reading) error {
	if _, err := tx.Exec(ctx,
		`INSERT INTO readings (reading_id, device_id, taken_at, value) VALUES ($1, $2, $3, $4)`,
		msg.ReadingID, msg.DeviceID, msg.TakenAt, msg.Value); err != nil {
		return fmt.Errorf("record reading: %w", err)
	}
	return nil
}

//go:embed migrations/*.sql
var migrations embed.FS

// Migrations returns the service's goose migrations: its readings table and
// the partitioned inbox idemgen generated, in one sequence.
func Migrations() fs.FS {
	sub, err := fs.Sub(migrations, "migrations")
	if err != nil {
		panic(err) // the embedded folder is fixed at build time
	}
	return sub
}
