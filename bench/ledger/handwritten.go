package ledger

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// HandWritten is the inbox of the seeds' algorithm as a careful user writes it
// with pgx, one statement per round trip: BEGIN; claim the key with INSERT
// ... ON CONFLICT DO NOTHING; the change; store the result; COMMIT. A
// duplicate rolls back and reads the stored row. It is what the generated
// wrapper is measured against, so it does the same work: the same table
// shape, fingerprint and stored result.
type HandWritten struct {
	db *pgxpool.Pool
}

// NewHandWritten returns the hand-written consumer on db, whose schema holds
// the hand_inbox table.
func NewHandWritten(db *pgxpool.Pool) *HandWritten {
	return &HandWritten{db: db}
}

// The hand-written consumer's statements.
const (
	handClaim    = `INSERT INTO hand_inbox (key_message_id, fingerprint) VALUES ($1, $2) ON CONFLICT DO NOTHING RETURNING true`
	handComplete = `UPDATE hand_inbox SET status = 'done', result = $2, completed_at = now() WHERE key_message_id = $1`
	handLookup   = `SELECT fingerprint, status, result FROM hand_inbox WHERE key_message_id = $1`
)

// Errors of the hand-written consumer that a caller branches on.
var (
	ErrDuplicateInProgress = errors.New("ledger: the message is being processed by another delivery")
	ErrKeyReused           = errors.New("ledger: message id reused with another payload")
)

// Handle processes msg once per MessageID and reports whether it was a
// duplicate (then the stored result is returned).
func (h *HandWritten) Handle(ctx context.Context, msg Deposit) (Posted, bool, error) {
	if msg.MessageID == "" {
		return Posted{}, false, errors.New("ledger: message without an id")
	}
	payload, err := json.Marshal(msg)
	if err != nil {
		return Posted{}, false, err
	}
	fp := sha256.Sum256(payload)

	tx, err := h.db.Begin(ctx)
	if err != nil {
		return Posted{}, false, err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit

	var claimed bool
	err = tx.QueryRow(ctx, handClaim, msg.MessageID, fp[:]).Scan(&claimed)
	if errors.Is(err, pgx.ErrNoRows) {
		if err := tx.Rollback(ctx); err != nil {
			return Posted{}, false, err
		}
		return h.duplicate(ctx, msg, fp[:])
	}
	if err != nil {
		return Posted{}, false, fmt.Errorf("ledger: claim: %w", err)
	}

	result, err := Apply(ctx, tx, msg)
	if err != nil {
		return Posted{}, false, err
	}
	encoded, err := json.Marshal(result)
	if err != nil {
		return Posted{}, false, err
	}
	if _, err := tx.Exec(ctx, handComplete, msg.MessageID, encoded); err != nil {
		return Posted{}, false, fmt.Errorf("ledger: store the result: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return Posted{}, false, fmt.Errorf("ledger: commit: %w", err)
	}
	return result, false, nil
}

// duplicate reads the row of a key this delivery did not claim, after the
// rollback, so that it sees the committed row.
func (h *HandWritten) duplicate(ctx context.Context, msg Deposit, fp []byte) (Posted, bool, error) {
	var (
		storedFP []byte
		status   string
		stored   []byte
	)
	err := h.db.QueryRow(ctx, handLookup, msg.MessageID).Scan(&storedFP, &status, &stored)
	switch {
	case err != nil:
		return Posted{}, false, fmt.Errorf("ledger: read the processed row: %w", err)
	case !bytes.Equal(storedFP, fp):
		return Posted{}, false, ErrKeyReused
	case status != "done":
		return Posted{}, false, ErrDuplicateInProgress
	}
	var result Posted
	if err := json.Unmarshal(stored, &result); err != nil {
		return Posted{}, false, err
	}
	return result, true, nil
}
