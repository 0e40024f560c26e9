package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/idem/idemtest"
)

func TestMain(m *testing.M) {
	// The demo runs its killed worker as a process of its own binary: here,
	// the test binary.
	if os.Getenv(workerEnv) != "" {
		killedWorker()
		return
	}
	os.Exit(m.Run())
}

// want is what the demo prints: the same on every run (charge ids count from
// ch_1, and the idempotency key is a function of the consumer and the order).
const want = `1 migration applied with goose, in a fresh schema that is dropped at the end; the provider listens on loopback

DELIVERY                                                OUTCOME        THE CONSUMER     RESULT OR ERROR
charge ord-1 1200 EUR                                   processed      acks             {ChargeID:ch_1}
the same message again                                  duplicate      acks             {ChargeID:ch_1}
and a third time                                        duplicate      acks             {ChargeID:ch_1}
charge ord-2 300 EUR, 8 copies while a worker holds it  8 in progress  retries 8 later  idem.ErrInProgress at once, no wait
the holding worker's done                               processed      acks             {ChargeID:ch_2}
charge ord-3 700 EUR: its worker SIGKILLed              -              -                after its provider call, before done
redelivered at once                                     error          retries          idem.ErrInProgress
redelivered after the lease (3s)                        processed      acks             {ChargeID:ch_3}

the provider made 3 charges in 4 calls: every repeat came with the idempotency key of its order
ord-3's key, idem.ExternalKey("payments.charge", ord-3) = ef7d440bd807763d…, came 2 times

ORDER  STATUS  ATTEMPTS
ord-1  done    1
ord-2  done    1
ord-3  done    2
`

// TestDemo runs the demo, compares what it prints with want, and checks that
// it dropped its schema.
func TestDemo(t *testing.T) {
	dbURL := idemtest.DatabaseURL(t)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	schema := "payments_demo_test_" + hex.EncodeToString(b)
	var out bytes.Buffer
	if err := run(context.Background(), dbURL, schema, &out); err != nil {
		t.Fatalf("run: %v\noutput so far:\n%s", err, out.String())
	}
	if out.String() != want {
		t.Errorf("the demo printed\n%s\nwant\n%s", out.String(), want)
	}
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
	if exists {
		t.Errorf("the demo left its schema %s behind", schema)
	}
}
