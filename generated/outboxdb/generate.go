// Package outboxdb is sqlc's compilation of the relay's queries (sql/) over
// the outbox table (migrations/): the statements relay.Relay runs. Generated;
// edit sql/ and run go generate, never the generated files.
package outboxdb

// sqlc is pinned here and run with go run, so that its dependencies stay out
// of the module that users import. The first run builds it (cgo), which takes
// minutes with an empty build cache.
//
//go:generate go run github.com/sqlc-dev/sqlc/cmd/sqlc@v1.31.1 generate -f ../../sqlc.yaml
