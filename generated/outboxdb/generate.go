// Package outboxdb is sqlc's compilation of the queries over the outbox
// table (migrations/) in sql/: the statements relay.Relay runs
// (sql/outbox.sql) and those of the operator's idemgen outbox commands
// (sql/outbox_ops.sql). Generated; edit sql/ and run go generate, never the
// generated files.
package outboxdb

// sqlc is pinned here and run with go run, so that its dependencies stay out
// of the module that users import. The first run builds it (cgo), which takes
// minutes with an empty build cache.
//
//go:generate go run github.com/sqlc-dev/sqlc/cmd/sqlc@v1.31.1 generate -f ../../sqlc.yaml
