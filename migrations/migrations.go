// Package migrations holds the goose migrations of the runtime's fixed tables:
// the transactional outbox, idem_outbox, that handlers taking an *idem.Outbox
// write and relay.Relay publishes from. They are hand-written, embedded in FS,
// and carry an "-- idemgen:outbox" line so that idemgen recognises the chain
// when it copies it into a service's migrations folder. Apply them with goose
// (goose.NewProvider(goose.DialectPostgres, db, migrations.FS)) or let idemgen
// copy them next to the service's own.
package migrations

import "embed"

// FS holds the outbox migrations, NNNNN_name.sql at its root, in goose's
// format.
//
//go:embed *.sql
var FS embed.FS

// Marker is the line every migration of the outbox chain carries, so that
// idemgen can tell the chain's files in a service's migrations folder.
const Marker = "-- idemgen:outbox"
