// Package benchgen has no code: its go:generate line regenerates the
// benchmarks' module. bench/ is a module of its own, joined by go.work, so
// go generate ./... from the repository root does not reach it without this
// line; with it, the root's go generate ./... regenerates everything.
package benchgen

//go:generate go -C ../../bench generate ./...
