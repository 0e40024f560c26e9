package idem_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemimpl"
	"github.com/idemgen/idemgen/idem/idemtest"
)

const envKilledBatchURL = "IDEM_TEST_KILLED_BATCH_URL"

func killBatch() []deposit {
	var msgs []deposit
	for i := range 10 {
		msgs = append(msgs, deposit{Account: "kill", Ref: int64(i + 1), Amount: 1})
	}
	return msgs
}

// TestHandleBatchKilledMidBatch: a worker process killed with SIGKILL while
// the sixth handler of a batch of ten runs (five have written in the batch's
// transaction) commits nothing; the redelivered batch processes each message
// once.
func TestHandleBatchKilledMidBatch(t *testing.T) {
	if url := os.Getenv(envKilledBatchURL); url != "" {
		runKilledBatch(url) // never returns
	}
	db := idemtest.New(t, migrations)
	cmd := exec.Command(os.Args[0], "-test.run=^TestHandleBatchKilledMidBatch$", "-test.count=1")
	cmd.Env = append(os.Environ(), envKilledBatchURL+"="+db.URL)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the worker ended with %v, want killed by SIGKILL; its output:\n%s", err, out.String())
	}
	rows, postings := inboxRows(t, db), count(t, db.Pool, `SELECT count(*) FROM postings`)
	t.Logf("after the SIGKILL mid-batch: %d inbox rows, %d postings", rows, postings)
	if rows != 0 || postings != 0 {
		t.Fatalf("%d inbox rows and %d postings after the killed batch; want none (nothing committed)", rows, postings)
	}
	var calls int
	inbox := idemimpl.NewInbox(db.Pool, depositTable, func(ctx context.Context, tx pgx.Tx, msg deposit) (receipt, error) {
		calls++
		return credit(ctx, tx, msg)
	})
	results, err := inbox.HandleBatch(context.Background(), killBatch())
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range results {
		if r.Err != nil || r.Outcome != idem.Processed {
			t.Errorf("redelivered message %d: %v, %v; want Processed", i, r.Outcome, r.Err)
		}
	}
	t.Logf("the redelivery: %d handler calls, %d postings, balance %d", calls, count(t, db.Pool, `SELECT count(*) FROM postings`), balance(t, db, "kill"))
	if calls != 10 || count(t, db.Pool, `SELECT count(*) FROM postings`) != 10 || balance(t, db, "kill") != 10 {
		t.Errorf("want 10 calls, 10 postings, balance 10 (each message once)")
	}
}

// runKilledBatch is the child of TestHandleBatchKilledMidBatch.
func runKilledBatch(url string) {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		fmt.Fprintln(os.Stderr, "killed batch:", err)
		os.Exit(3)
	}
	n := 0
	inbox := idemimpl.NewInbox(pool, depositTable, func(ctx context.Context, tx pgx.Tx, msg deposit) (receipt, error) {
		n++
		if n == 6 {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
		return credit(ctx, tx, msg)
	})
	_, err = inbox.HandleBatch(ctx, killBatch())
	fmt.Fprintln(os.Stderr, "killed batch: HandleBatch returned", err)
	os.Exit(3)
}
