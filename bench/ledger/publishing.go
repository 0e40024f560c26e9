package ledger

import (
	"context"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"
	"testing/fstest"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemimpl"
	outboxmigrations "github.com/idemgen/idemgen/migrations"
)

// Credited is the message a publishing deposit sends: the benchmark's outbox
// part measures what sending it costs, not what it says.
type Credited struct {
	MessageID string `json:"message_id"` // the deposit's
	Seq       int    `json:"seq"`        // its position among the run's messages
	Account   int64  `json:"account"`
	Amount    int64  `json:"amount"`
}

// CreditedDestination is where a publishing deposit sends its messages.
const CreditedDestination = "bench.ledger.credited"

// NewPublishingPost returns an inbox for Post's consumer (bench.ledger, table
// idem_bench_ledger) whose handler makes Post's change and then publishes n
// Credited messages through the outbox, written with the commit. It is
// hand-written around the generated table, not a handler of its own: the
// benchmark's outbox part measures the runtime's outbox with 0, 1 and 10
// messages per delivery on the same consumer. The outbox table must be there
// (MigrationsWithOutbox); opts are the inbox's (idem.WithoutNotify).
func NewPublishingPost(db idem.DB, n int, opts ...idem.Option) *idemimpl.Inbox[Deposit, Posted] {
	return idemimpl.NewPublishingInbox(db, idemPostTable, func(ctx context.Context, tx pgx.Tx, out *idem.Outbox, msg Deposit) (Posted, error) {
		posted, err := Apply(ctx, tx, msg)
		if err != nil {
			return Posted{}, err
		}
		for seq := range n {
			if err := out.Publish(CreditedDestination, Credited{MessageID: msg.MessageID, Seq: seq, Account: msg.Account, Amount: msg.Amount}); err != nil {
				return Posted{}, err
			}
		}
		return posted, nil
	}, opts...)
}

// OutgoingID is the stable id of the seq-th message that NewPublishingPost's
// handler publishes for msg.
func OutgoingID(msg Deposit, seq int) (string, error) {
	key, err := idemPostKey(msg)
	if err != nil {
		return "", err
	}
	return idem.OutgoingMessageID(idemPostTable.Consumer, key, seq), nil
}

// MigrationsWithOutbox returns the benchmark's migrations (Migrations)
// followed by the runtime's outbox chain (package
// github.com/idemgen/idemgen/migrations), renumbered to come after them, in
// one goose folder: what idemgen writes into a folder whose handler takes an
// *idem.Outbox.
func MigrationsWithOutbox() (fs.FS, error) {
	return appendChain(Migrations(), outboxmigrations.FS)
}

// appendChain returns the goose migrations (NNNNN_name.sql) of base followed
// by those of chain, which are renumbered, in their order, from the highest
// version of base + 1.
func appendChain(base, chain fs.FS) (fs.FS, error) {
	out := fstest.MapFS{}
	last := int64(0)
	baseNames, err := fs.Glob(base, "*.sql")
	if err != nil {
		return nil, err
	}
	for _, name := range baseNames {
		v, _, err := migrationVersion(name)
		if err != nil {
			return nil, err
		}
		last = max(last, v)
		data, err := fs.ReadFile(base, name)
		if err != nil {
			return nil, err
		}
		out[name] = &fstest.MapFile{Data: data}
	}
	chainNames, err := fs.Glob(chain, "*.sql")
	if err != nil {
		return nil, err
	}
	if len(chainNames) == 0 {
		return nil, fmt.Errorf("ledger: the chain to append holds no migration")
	}
	for _, name := range chainNames { // fs.Glob sorts: the chain's own order
		_, rest, err := migrationVersion(name)
		if err != nil {
			return nil, err
		}
		data, err := fs.ReadFile(chain, name)
		if err != nil {
			return nil, err
		}
		last++
		out[fmt.Sprintf("%05d_%s", last, rest)] = &fstest.MapFile{Data: data}
	}
	return out, nil
}

// migrationVersion splits a goose file name, NNNNN_name.sql, into its
// version and what follows the underscore.
func migrationVersion(name string) (int64, string, error) {
	num, rest, ok := strings.Cut(path.Base(name), "_")
	v, err := strconv.ParseInt(num, 10, 64)
	if !ok || err != nil || v < 1 {
		return 0, "", fmt.Errorf("ledger: migration %q is not named NNNNN_name.sql", name)
	}
	return v, rest, nil
}
