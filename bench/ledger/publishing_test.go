package ledger_test

import (
	"context"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/bench/ledger"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemtest"
)

// TestMigrationsWithOutboxAppendsTheChain checks the one goose folder the
// benchmark's outbox part migrates with: the ledger's migrations as they are,
// then the outbox chain renumbered after them, so that goose applies both.
func TestMigrationsWithOutboxAppendsTheChain(t *testing.T) {
	fsys, err := ledger.MigrationsWithOutbox()
	if err != nil {
		t.Fatal(err)
	}
	got, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		t.Fatal(err)
	}
	want, err := fs.Glob(ledger.Migrations(), "*.sql")
	if err != nil {
		t.Fatal(err)
	}
	// The outbox chain comes after the ledger's last migration, in its
	// order.
	n := len(want)
	outbox := fmt.Sprintf("%05d_idem_outbox.sql", n+1)
	want = append(want, outbox, fmt.Sprintf("%05d_idem_outbox_delete_on_publish.sql", n+2),
		fmt.Sprintf("%05d_idem_outbox_compact_claim.sql", n+3))
	if !slices.Equal(got, want) {
		t.Fatalf("migrations %q, want %q", got, want)
	}
	data, err := fs.ReadFile(fsys, outbox)
	if err != nil || !strings.Contains(string(data), "CREATE TABLE idem_outbox") {
		t.Fatalf("%s is not the outbox migration (%v):\n%s", outbox, err, data)
	}
}

// TestPublishingPostWritesItsMessages checks what the benchmark's outbox part
// delivers: n rows with the ids OutgoingID computes, none for a duplicate,
// and Post's change made once.
func TestPublishingPostWritesItsMessages(t *testing.T) {
	ctx := context.Background()
	fsys, err := ledger.MigrationsWithOutbox()
	if err != nil {
		t.Fatal(err)
	}
	db := idemtest.New(t, fsys)
	if _, err := db.Pool.Exec(ctx, `INSERT INTO accounts (id) VALUES (3)`); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{0, 1, 10} {
		in := ledger.NewPublishingPost(db.Pool, n)
		msg := ledger.Deposit{MessageID: "p-" + string(rune('a'+n)), Account: 3, Amount: 2}
		for _, want := range []idem.Outcome{idem.Processed, idem.Duplicate} {
			if _, o, err := in.Handle(ctx, msg); err != nil || o != want {
				t.Fatalf("%d messages: %v, %v; want %v", n, o, err, want)
			}
		}
		var ids []string
		rows, err := db.Pool.Query(ctx, `SELECT message_id::text FROM idem_outbox WHERE convert_from(payload, 'UTF8')::jsonb->>'message_id' = $1 AND destination = $2 ORDER BY id`, msg.MessageID, ledger.CreditedDestination)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		var want []string
		for seq := range n {
			id, err := ledger.OutgoingID(msg, seq)
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, id)
		}
		if !slices.Equal(ids, want) {
			t.Fatalf("%d messages: outbox rows %q, want %q", n, ids, want)
		}
	}
	if b := balance(t, db.Pool, 3); b != 6 {
		t.Fatalf("balance %d, want 6: each of the three deposits credited once", b)
	}
}
