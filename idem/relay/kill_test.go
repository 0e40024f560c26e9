package relay_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemimpl"
	"github.com/idemgen/idemgen/idem/idemtest"
	"github.com/idemgen/idemgen/idem/internal/relaytest"
	"github.com/idemgen/idemgen/idem/relay"
)

// The downstream consumer of the relay's messages: an idem inbox keyed on the
// message id, as the next service's generated wrapper would be, whose
// business effect counts how often each message was applied.

type event struct {
	ID   string `json:"id"`
	Body string `json:"body"`
}

const downstreamMigration = `-- +goose Up
CREATE TABLE applied (message_id text PRIMARY KEY, n integer NOT NULL);
-- +goose Down
DROP TABLE applied;
`

var downstreamTable, downstreamTableMigration = idemtest.TextKeyInbox("test.downstream", "idem_test_downstream", "ID",
	func(msg event) string { return msg.ID })

func downstreamInbox(pool *pgxpool.Pool) *idemimpl.Inbox[event, idem.None] {
	return idemimpl.NewInbox(pool, downstreamTable, idemimpl.NoResult(func(ctx context.Context, tx pgx.Tx, msg event) error {
		_, err := tx.Exec(ctx, `INSERT INTO applied (message_id, n) VALUES ($1, 1)
			ON CONFLICT (message_id) DO UPDATE SET n = applied.n + 1`, msg.ID)
		return err
	}))
}

// deliverDownstream is a publisher whose broker hands each message straight
// to the downstream consumer; outcome, when not nil, sees each delivery's
// outcome.
func deliverDownstream(inbox *idemimpl.Inbox[event, idem.None], outcome func(id string, o idem.Outcome), after func()) idem.Publisher {
	return idem.PublisherFunc(func(ctx context.Context, msgs []idem.OutgoingMessage) []error {
		errs := make([]error, len(msgs))
		for i, m := range msgs {
			_, o, err := inbox.Handle(ctx, event{ID: m.ID, Body: string(m.Payload)})
			errs[i] = err
			if err == nil && outcome != nil {
				outcome(m.ID, o)
			}
		}
		if after != nil {
			after()
		}
		return errs
	})
}

// downstreamBacklog is a test schema with the outbox and the downstream
// consumer's tables, and n outbox rows committed in it.
func downstreamBacklog(t *testing.T, prefix string, n int) (*idemtest.DB, []relaytest.Row) {
	t.Helper()
	db := idemtest.New(t, relaytest.OutboxFS(t, map[string]string{"00100_downstream_inbox.sql": downstreamTableMigration, "00101_downstream.sql": downstreamMigration}))
	rows := relaytest.MakeRows(prefix, n)
	relaytest.Commit(t, db.Pool, rows)
	return db, rows
}

const envKilledRelayURL = "IDEM_TEST_KILLED_RELAY_URL"

// killedRelayLease is the lease of the relays these tests kill: the
// survivor waits for it to lapse. It is long enough that the killed relay's
// keeper renews it on a loaded machine (at 300 ms, a keeper starved of CPU
// while 100 messages were delivered let the lease of the batch it held
// lapse, and the relay, rightly, did not publish that batch), and short
// enough that the survivor starts within seconds.
const killedRelayLease = 3 * time.Second

// TestRelayKilledAfterPublishBeforeMark: a relay process killed with SIGKILL
// after its broker confirmed a batch and before it marked the rows leaves
// them claimed; once the lease lapses another relay publishes them again,
// with the same ids, and the downstream consumer keyed on the id applies
// each message once (the redeliveries are Duplicates).
func TestRelayKilledAfterPublishBeforeMark(t *testing.T) {
	if url := os.Getenv(envKilledRelayURL); url != "" {
		runKilledRelay(url) // never returns
	}
	db, rows := downstreamBacklog(t, "kill", 20)

	runKilledRelayChild(t, envKilledRelayURL, db.URL)
	if got := relaytest.QueryInt(t, db.Pool, `SELECT count(*)::int FROM applied WHERE n = 1`); got != len(rows) {
		t.Fatalf("the killed relay delivered %d of %d messages downstream, want all", got, len(rows))
	}
	if got := relaytest.QueryInt(t, db.Pool, `SELECT count(*)::int FROM idem_outbox WHERE claim_token IS NOT NULL AND attempts = 1`); got != len(rows) {
		t.Fatalf("%d of %d rows left claimed and not deleted by the killed relay, want all", got, len(rows))
	}

	var mu sync.Mutex
	outcomes := map[string]idem.Outcome{}
	inbox := downstreamInbox(db.Pool)
	r := relay.New(db.Pool, deliverDownstream(inbox, func(id string, o idem.Outcome) {
		mu.Lock()
		defer mu.Unlock()
		outcomes[id] = o
	}, nil), relay.WithID("survivor"), relay.WithPollInterval(20*time.Millisecond), relay.WithLogger(relaytest.Logger(t)))
	relaytest.Run(t, r)
	relaytest.WaitFor(t, killedRelayLease+30*time.Second, "the rows published again", func() bool { return relaytest.Pending(t, db) == 0 })

	mu.Lock()
	defer mu.Unlock()
	for _, row := range rows {
		if o, ok := outcomes[row.ID.String()]; !ok || o != idem.Duplicate {
			t.Errorf("message %s: published again with outcome %v (published: %v), want the same id, a Duplicate downstream", row.ID, o, ok)
		}
	}
	if len(outcomes) != len(rows) {
		t.Errorf("%d messages published again, want %d", len(outcomes), len(rows))
	}
	if got := relaytest.QueryInt(t, db.Pool, `SELECT count(*)::int FROM applied WHERE n = 1`); got != len(rows) {
		t.Errorf("%d of %d messages applied exactly once downstream", got, len(rows))
	}
	if got := relaytest.QueryInt(t, db.Pool, `SELECT count(*)::int FROM idem_outbox`); got != 0 {
		t.Errorf("%d of %d rows left in the outbox once published again, want none", got, len(rows))
	}
}

// runKilledRelayChild runs t's test again as a child process, with env set
// to the database URL (the child's cue), and wants it to die of SIGKILL.
func runKilledRelayChild(t *testing.T, env, url string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env+"="+url)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the relay process ended with %v, want killed by SIGKILL; its output:\n%s", err, out.String())
	}
}

// runKilledRelay is the child process of TestRelayKilledAfterPublishBeforeMark:
// a relay whose publisher delivers the batch downstream, then kills the
// process before the relay can mark the rows.
func runKilledRelay(url string) {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "killed relay:", err)
		os.Exit(3)
	}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		fail(err)
	}
	inbox := downstreamInbox(pool)
	pub := deliverDownstream(inbox, func(id string, o idem.Outcome) {
		if o != idem.Processed {
			fail(fmt.Errorf("message %s: first delivery %v, want Processed", id, o))
		}
	}, func() {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	})
	r := relay.New(pool, pub, relay.WithID("doomed"), relay.WithLease(killedRelayLease),
		relay.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, nil))))
	fail(fmt.Errorf("Run returned: %v", r.Run(ctx)))
}
