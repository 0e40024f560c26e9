package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/idem/idemtest"
)

// readmeMarker precedes, in docs/quickstart.md, the block that shows the demo's output.
const readmeMarker = "<!-- billing-demo output: TestOutputMatchesQuickstart compares it with what the demo prints -->\n"

// readmeOutput returns the fenced block that follows readmeMarker in the
// repository's docs/quickstart.md.
func readmeOutput(t *testing.T) string {
	t.Helper()
	readme, err := os.ReadFile("../../../../docs/quickstart.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(readme), readmeMarker)
	if !ok {
		t.Fatalf("docs/quickstart.md has no line %q before the demo's output", strings.TrimSpace(readmeMarker))
	}
	block, ok := strings.CutPrefix(after, "```\n")
	if !ok {
		t.Fatal("docs/quickstart.md: the line after the demo's marker does not open a ``` block")
	}
	block, _, ok = strings.Cut(block, "```\n")
	if !ok {
		t.Fatal("docs/quickstart.md: the demo's output block is not closed")
	}
	return block
}

func freshSchema(t *testing.T) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "billing_demo_test_" + hex.EncodeToString(b)
}

// schemaExists reports whether the schema is in the database.
func schemaExists(t *testing.T, dbURL, schema string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", schema).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	return exists
}

// TestOutputMatchesQuickstart runs the demo and compares what it prints with the
// quickstart's block, byte for byte, so that the two cannot drift apart; then it
// checks that the demo dropped its schema.
func TestOutputMatchesQuickstart(t *testing.T) {
	dbURL := idemtest.DatabaseURL(t)
	schema := freshSchema(t)
	var out bytes.Buffer
	if err := run(context.Background(), dbURL, schema, &out); err != nil {
		t.Fatalf("run: %v\noutput so far:\n%s", err, out.String())
	}
	if want := readmeOutput(t); sameCharges(out.String()) != sameCharges(want) {
		t.Errorf("the demo printed\n%s\nbut docs/quickstart.md shows\n%s\n(update its block, after %q)", out.String(), want, strings.TrimSpace(readmeMarker))
	}
	if schemaExists(t, dbURL, schema) {
		t.Errorf("the demo left its schema %s behind", schema)
	}
}

// concurrentCharge is the charge id of the order delivered as concurrent
// copies. Copies that run the handler and roll back take values of the
// charges' sequence, so the id varies from run to run.
var concurrentCharge = regexp.MustCompile(`("order_id":"ord-2","account_id":"acc-1","charge_id":)[0-9]+`)

// sameCharges blanks concurrentCharge's id.
func sameCharges(out string) string { return concurrentCharge.ReplaceAllString(out, "${1}N") }

// cancelOnWrite cancels a context when it is first written to.
type cancelOnWrite struct {
	cancel context.CancelFunc
	bytes.Buffer
}

func (w *cancelOnWrite) Write(p []byte) (int, error) {
	w.cancel()
	return w.Buffer.Write(p)
}

// TestDropsSchemaWhenInterrupted cancels the demo's context (what SIGINT
// does) as soon as the migrations are applied: the demo must stop with the
// cancellation and still drop its schema.
func TestDropsSchemaWhenInterrupted(t *testing.T) {
	dbURL := idemtest.DatabaseURL(t)
	schema := freshSchema(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := &cancelOnWrite{cancel: cancel}
	err := run(ctx, dbURL, schema, w)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("run after an interrupt: %v; want context.Canceled\noutput:\n%s", err, w.String())
	}
	if schemaExists(t, dbURL, schema) {
		t.Errorf("interrupted, the demo left its schema %s behind", schema)
	}
}
