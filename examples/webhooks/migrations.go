package webhooks

import (
	"embed"
	"io/fs"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Migrations returns the service's goose migrations: its own tables and the
// inbox tables idemgen generated, in one sequence.
func Migrations() fs.FS {
	sub, err := fs.Sub(migrations, "migrations")
	if err != nil {
		panic(err) // the embedded folder is fixed at build time
	}
	return sub
}
